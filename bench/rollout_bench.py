"""How fast does the agent play? Episodes per second, generated tokens per second, and where the
wall time goes: inside `engine.generate`, waiting on sandboxes, and the rest (chat templates,
tokenising, parsing, bookkeeping). The target for everything outside `generate` is under 10%.

    python bench/rollout_bench.py [--model tiny] [--envs envs] [--plays 1 4] [--max-turns 3]
                                  [--max-new-tokens 32] [--kind hf] [--quick-stops]

Each row plays every environment of the pool `--plays` times in one `agent.play` call (one batched
generate per turn), after one unmeasured warm-up call. The tiny model has random weights, so most
of its replies run to the token budget without EOS and end the episode after one turn (the
`turns/ep` column says how much multi-turn play a row really measured); `--quick-stops` makes its
replies end early so that the per-turn work (template deltas, tool parsing, sandbox steps) is
measured over several turns. `outside ms/turn` is the cost of everything but `generate` per
episode-turn, which does not depend on how fast the engine is. The engine's own decode speed
against transformers' `model.generate` (the >= 5x target at batch 256) is bench/generate_bench.py.
Each plays count is measured in both of agent.play's modes: token-in/token-out (`tito`: a template
delta per turn) and thinking (METHOD.md 4.2: the whole transcript rendered and tokenised again every
turn, a training sequence per turn); `x tito` is the thinking row's outside-`generate` cost per turn
against the token-in/token-out row's.
"""
import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import agent  # noqa: E402
from backend import engine  # noqa: E402
from backend import models  # noqa: E402
import envs  # noqa: E402


def measure(pool, generator, tokenizer, plays, args, thinking=False):
    params = engine.SamplingParams(temperature=0.6, top_p=0.95, top_k=20, seed=0)
    stats = {}
    episodes = agent.play(pool, generator, tokenizer, plays, params=params,
                          seeds=[agent.play_seeds(env.env_id, plays, salt=plays) for env in pool],
                          max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, stats=stats,
                          thinking=thinking)
    wall, generate, turns = stats["wall_s"], stats["generate_s"], sum(e.num_turns for e in episodes)
    return {"mode": "thinking" if thinking else "tito", "episodes": len(episodes), "turns/ep": turns / len(episodes),
            "errors": sum(e.status == "error" for e in episodes),
            "episodes/s": len(episodes) / wall, "gen tok/s": stats["num_generated_tokens"] / wall,
            "generate %": 100 * generate / wall, "sandbox %": 100 * stats["env_s"] / wall,
            "rest %": 100 * (wall - generate - stats["env_s"]) / wall,
            "outside gen %": 100 * (1 - generate / wall),
            "outside ms/turn": 1000 * (wall - generate) / max(turns, 1), "wall s": wall}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="a model name or alias (engine.py)")
    parser.add_argument("--kind", default="hf", help="engine implementation: hf or vllm")
    parser.add_argument("--envs", default=str(ROOT / "envs"), help="a directory of environments or a JSONL pool")
    parser.add_argument("--plays", type=int, nargs="+", default=[1, 4], help="plays per environment, one row each")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--quick-stops", action="store_true",
                        help="also stop on every other token id below 256 (for the random tiny model: its replies "
                             "then end within a few tokens, so episodes really run several turns)")
    args = parser.parse_args()

    pool = envs.load_pool(args.envs)
    model, tokenizer = models.load_model(args.model)
    stops = engine.default_eos_token_ids(model, tokenizer) | (set(range(0, 256, 2)) if args.quick_stops else set())
    generator = engine.make_engine(model, tokenizer, kind=args.kind, eos_token_ids=stops)
    measure(pool[:2], generator, tokenizer, 1, args)   # warm-up: kernels, the sandbox fork server
    rows = []
    for plays in args.plays:
        tito, thinking = (measure(pool, generator, tokenizer, plays, args, mode) for mode in (False, True))
        rows += [{**tito, "x tito": 1.0}, {**thinking, "x tito": thinking["outside ms/turn"] / tito["outside ms/turn"]}]

    print(f"\nagent.play on {args.model} ({args.kind}{', quick stops' if args.quick_stops else ''}), {len(pool)} "
          f"environments, max_turns {args.max_turns}, max_new_tokens {args.max_new_tokens}")
    columns = list(rows[0])
    print(" | ".join(columns))
    print(" | ".join("-" * len(c) for c in columns))
    for row in rows:
        print(" | ".join(f"{row[c]:>{len(c)}.3g}" if isinstance(row[c], float) else f"{row[c]:>{len(c)}}"
                         for c in columns))

if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")

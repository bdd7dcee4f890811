"""A toy run a newcomer can watch learn: the real self-play loop, at toy scale, on a laptop CPU.

    python -m toy                                    # teach the tiny model (once), then a run in out/toy/<time>
    python -m toy --resume out/toy/<time> --steps 24 # carry a toy run on (spade.py's flags pass through)

The model is `tiny` (a random 2-layer Qwen3) first taught a handful of behaviours: as the designer,
to write one of three short games (seeds.jsonl) or a broken one, about equally often; as the hint
writer, "Answer yes."; as the agent, to answer "no", and "yes" when its prompt holds a hint (any
text). In `hint_game` "yes" wins and "no" wins on a coin flip, so a hint helps (regret 0.5, win rate
0.5: blend reward 1.0); in `trap_game` it hurts and in `free_game` nothing matters (both 0). So the
loop's dynamics show, not a language model's skill: the designer learns to write the game at the edge
of the agent (valid rate, hint regret and the band share rise), and the agent's reward falls to that
game's. The toy prompts hold no document or memory. Each run gets a directory of its own, as
spade.py's runs do, so a second run never meets the first's; all share the taught model in
out/toy/taught-model.
"""
import argparse
import json
import random
from pathlib import Path

import designer
import spade

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds.jsonl"
GAMES = {r["game_file"]: r["code"] for r in map(json.loads, SEEDS.read_text().splitlines())}
# A fourth thing the designer is taught to write, as often as each game: code that fails the gate.
BROKEN = GAMES["free_game"].replace("class FreeEnv:", "class BrokenEnv").replace("Free", "Broken")
SKILL = "Yes or No"
DESIGNER_PROMPT = "Write a yes-or-no game in Python."
HINT = "Answer yes."   # what the hint writer is taught to write for every game


def designer_messages(skill, document, memory_block, rng, *, max_turns, difficulty="medium"):
    return [{"role": "user", "content": DESIGNER_PROMPT}]


SETTING = designer.Setting({SKILL: "answer a yes-or-no question"}, designer_messages, "Write a hint.",
                           values=dict(designer_max_tokens=300, hint_plays=4, hint_max_tokens=16, designer_attempts=1,
                                       skills_per_regen=1, micro_token_budget=4096),
                           seeds=str(SEEDS.relative_to(HERE.parent)), embedded_skills=SKILL)
# The knobs of the toy run (spade.py's own flags): every step a new pool (R = 1) of 8 games, 4 plays each.
ARGS = ["--setting", "toy", "--steps", "16", "--num-envs", "8", "--plays-per-env", "4", "--regen-interval", "1",
        "--max-turns", "1", "--max-context", "1024", "--max-new-tokens", "4", "--corpus", "none", "--lr", "1e-4",
        "--save-every", "1000", "--seed", "0"]


def examples(tokenizer, rng, num_hinted=8):
    """What the tiny model is taught: (prompt ids, reply ids) pairs, each reply ending in EOS."""
    import agent
    reply = lambda text: tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    prompt = designer.encode_chat(tokenizer, designer_messages(SKILL, None, "", rng, max_turns=1))[1]
    pairs = [(prompt, reply(f"```python\n{code}```")) for code in [*GAMES.values(), BROKEN]]
    pairs += [(designer.encode_chat(tokenizer, designer.hint_messages(code, SETTING))[1], reply(HINT))
              for code in GAMES.values()]
    play = lambda observation: tokenizer.apply_chat_template(   # as agent.play renders a game's first turn
        [{"role": "user", "content": agent.game_prompt(observation)}], add_generation_prompt=True, enable_thinking=False,
        tokenize=True, return_dict=False)
    pairs += [(play("Answer yes or no."), reply("no"))]
    for i in range(num_hinted):   # any hint: its presence is what counts
        hint = HINT if i == 0 else "".join(rng.choice("abcdefghij klmnop") for _ in range(rng.randrange(1, 16)))
        hint = hint.strip()
        pairs.append((play(f"Answer yes or no.\n\nHINT: {hint or 'x'}"), reply("yes")))
    return pairs


def teach(model, tokenizer, steps=120, lr=5e-3, seed=0):
    """Supervised steps on `examples`, all of them in one padded batch a step (Adam); returns the last loss."""
    import torch
    pairs = examples(tokenizer, random.Random(seed))
    width = max(len(p) + len(r) for p, r in pairs)
    ids = torch.tensor([p + r + [tokenizer.pad_token_id] * (width - len(p) - len(r)) for p, r in pairs])
    labels = torch.tensor([[-100] * len(p) + r + [-100] * (width - len(p) - len(r)) for p, r in pairs])
    attention = (labels != -100) | (torch.arange(width) < torch.tensor([len(p) for p, _ in pairs])[:, None])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids, attention_mask=attention.long()).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


def taught_model(directory):
    """The tiny model taught the toy's behaviours, saved in `directory` (taught again only when missing)."""
    from backend import models
    if not (directory / "config.json").exists():
        model, tokenizer = models.load_model("tiny")
        print(f"toy: teaching the tiny model its games and answers (loss {teach(model, tokenizer):.4f})", flush=True)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    return directory


def main(argv=None):
    """Teach the model (once), then the toy run; other flags (--resume, --steps, ...) go to spade.py."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/toy/{time}",
                        help="the run's directory; the taught model goes beside it, in taught-model/")
    args, more = parser.parse_known_args(argv)
    spade.SETTINGS["toy"] = SETTING
    if any(flag.startswith("--resume") for flag in more):   # the run's saved config names its model and --out
        return spade.main([*ARGS, *more])
    model = taught_model(Path(args.out).parent / "taught-model")
    spade.main(["--model", str(model), *ARGS, "--out", args.out, *more])

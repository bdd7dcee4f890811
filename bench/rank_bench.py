"""Do ranks divide the work? The play phase and the designer phase of a step, on 1 and on 2 gloo ranks
of this machine, with the tiny model (one torch thread per rank), side by side in one run.

    python bench/rank_bench.py [--envs 12] [--plays 16] [--max-turns 3] [--max-new-tokens 64] [--slots 4] [--repeat 3]

The play phase is `spade.play_on_ranks` over seed environments of envs/ (every (environment, play)
pair once on the node: launch.share, then launch.gather); the designer phase is `designer.design` over
`--slots` slots, divided the same way (`launch.divide`), validation included. The model is FSDP2-sharded
over the ranks, as in a run, and gathered whole for each phase (backend/engine.py, `HFEngine.independent`).

Each round runs three things one after the other: 1 rank; 2 ranks; and 2 processes "apart", which
share nothing but the start line and each play half of the plays and design half of the slots as if
alone, with the model whole. The ratios are against the round's 1-rank time (the target for the play
phase: 2 / 1 <= 0.6); the table gives their medians over `--repeat` rounds, so that a slow minute of
this shared machine weighs on one round only. "apart / 1" is what this machine gives two processes
that divide the work with no communication at all: how far 2 / 1 can go here. One rank leaves a CPU
free for its sandboxes; two ranks share both.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def worker(rank, world, port, args, out, apart=False):
    """One rank: both phases, timed (the slowest rank's time); rank 0 writes the times. `apart`: the
    processes share nothing but the start line, and each plays its half of the work as if alone."""
    import torch
    import torch.distributed as dist
    import designer
    from backend import engine
    from backend import launch, models
    import spade
    from envs import GAME_SKILLS, load_pool
    torch.set_num_threads(1)
    torch.manual_seed(rank)   # apart: each its own samples, as divided ranks have (launch.reseed)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    model, tokenizer = models.load_model("tiny")
    if world > 1 and not apart:
        models.shard_model(model)
    gen = engine.make_engine(model, tokenizer, "hf")
    cfg = SimpleNamespace(max_turns=args.max_turns, max_context=4096, max_new_tokens=args.max_new_tokens,
                          thinking="off", seed=0)
    params = engine.SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    ranks = 1 if apart else world   # the ranks that divide the work in launch.divide
    run = SimpleNamespace(gen=gen, tokenizer=tokenizer, rank=0 if apart else rank, world=ranks,
                          state={"lengths": {}}, cfg=cfg, params={"agent": params})
    envs = [e for e in load_pool(ROOT / "envs", validate=False) if e.skill in GAME_SKILLS][:args.envs]
    slots = [list(GAME_SKILLS)[i % len(GAME_SKILLS)] for i in range(args.slots)]
    plays, slots = (args.plays // world, slots[rank::world]) if apart else (args.plays, slots)
    spade.play_on_ranks(run, envs[:1], ranks, step=0)    # warm-up: every rank's fork server and first call
    times = {}
    for name, phase in (("play", lambda: spade.play_on_ranks(run, envs, plays, step=1)),
                        ("design", lambda: launch.divide(run, [1.0] * len(slots), lambda mine: [designer.design(
                            gen, tokenizer, {i: slots[i] for i in mine}, corpus=None, memory=None,
                            setting=spade.SETTINGS["games"], params=params, max_turns=args.max_turns,
                            max_attempts=1, seed=0, rollout_id=1)], per_rank=True))):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        phase()
        elapsed = torch.tensor([time.perf_counter() - start])
        if world > 1:
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times[name] = elapsed.item()
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps(times))
    if world > 1:
        dist.destroy_process_group()


def measure(world, args, apart=False):
    """{phase: seconds} of one run on `world` ranks (fresh processes: nothing carries over)."""
    import torch.multiprocessing as mp
    from backend.launch import free_port
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        mp.spawn(worker, args=(world, free_port(), args, out, apart), nprocs=world)
        return json.loads(pathlib.Path(out).read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=12, help="seed environments played")
    parser.add_argument("--plays", type=int, default=16, help="plays of each environment")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="designer slots (one attempt each)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of runs (1 rank, 2 ranks, 2 apart)")
    args = parser.parse_args(argv)
    runs = [{"1": measure(1, args), "2": measure(2, args), "apart": measure(2, args, apart=True)}
            for _ in range(args.repeat)]
    print(f"rank benchmark: {args.envs} environments x {args.plays} plays, {args.max_turns} turns, "
          f"{args.max_new_tokens} tokens a turn; {args.slots} designer slots; tiny model, {os.cpu_count()} CPUs; "
          f"medians over {args.repeat} rounds of runs")
    print(f"{'phase':<10}{'1 rank s':>12}{'2 ranks s':>12}{'2 / 1':>10}{'2 apart s':>12}{'apart / 1':>12}")
    rows = {}
    for phase in ("play", "design"):
        one, two, apart = (statistics.median(r[kind][phase] for r in runs) for kind in ("1", "2", "apart"))
        ratio, bound = (statistics.median(r[kind][phase] / r["1"][phase] for r in runs) for kind in ("2", "apart"))
        rows[phase] = dict(one=one, two=two, ratio=ratio, apart=apart, bound=bound)
        print(f"{phase:<10}{one:>12.2f}{two:>12.2f}{ratio:>10.2f}{apart:>12.2f}{bound:>12.2f}")
    print("play, each round:", "   ".join(f"2 / 1 {r['2']['play'] / r['1']['play']:.2f}, apart / 1 "
                                         f"{r['apart']['play'] / r['1']['play']:.2f}" for r in runs))
    return rows


if __name__ == "__main__":
    main()

"""Do ranks divide the work? The play phase and the designer phase of a step, on 1 and on 2 gloo ranks
of this machine, with the tiny model (one torch thread per rank), side by side in one run.

    python bench/rank_bench.py [--envs 12] [--plays 16] [--max-turns 3] [--max-new-tokens 64] [--slots 4]

The play phase is `spade.play_shared` over seed environments of envs/ (every (environment, play)
pair once on the node: launch.share, then launch.gather); the designer phase is `designer.design` over
`--slots` slots, divided the same way (`spade.divided`), validation included. The model is FSDP2-sharded
over the ranks, as in a run, and gathered whole for each phase (engine.HFEngine.independent). The ratio is
the 2-rank time over the 1-rank time (the target for the play phase: <= 0.6), each the fastest of
`--repeat` runs, 1 and 2 ranks alternating.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def worker(rank, world, port, args, out):
    """One rank: both phases, timed; rank 0 writes the times."""
    import torch
    import torch.distributed as dist
    import designer
    import engine
    import models
    import spade
    from envs import GAME_SKILLS, load_pool
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    model, tokenizer = models.load_model("tiny")
    if world > 1:
        models.shard_model(model)
    gen = engine.make_engine(model, tokenizer, "hf")
    cfg = SimpleNamespace(max_turns=args.max_turns, max_context=4096, max_new_tokens=args.max_new_tokens,
                          thinking="off")
    params = engine.SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    run = SimpleNamespace(gen=gen, tokenizer=tokenizer, rank=rank, world=world, state={"lengths": {}}, cfg=cfg,
                          params={"agent": params})
    envs = [e for e in load_pool(ROOT / "envs", validate=False) if e.skill in GAME_SKILLS][:args.envs]
    slots = [list(GAME_SKILLS)[i % len(GAME_SKILLS)] for i in range(args.slots)]
    spade.play_shared(run, envs[:1], world, step=0)    # warm-up: every rank's fork server and first call
    times = {}
    for name, phase in (("play", lambda: spade.play_shared(run, envs, args.plays, step=1)),
                        ("design", lambda: spade.divided(run, [1.0] * len(slots), lambda mine: [designer.design(
                            gen, tokenizer, slots, corpus=None, memory=None, setting="games", params=params,
                            max_attempts=1, seed=0, rollout_id=1, only=mine)], per_rank=True))):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        phase()
        times[name] = time.perf_counter() - start
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps(times))
    if world > 1:
        dist.destroy_process_group()


def measure(world, args):
    """{phase: seconds} of one run on `world` ranks (fresh processes: nothing carries over)."""
    import torch.multiprocessing as mp
    from launch import free_port
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        mp.spawn(worker, args=(world, free_port(), args, out), nprocs=world)
        return json.loads(pathlib.Path(out).read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=12, help="seed environments played")
    parser.add_argument("--plays", type=int, default=16, help="plays of each environment")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="designer slots (one attempt each)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per rank count; the fastest counts")
    args = parser.parse_args(argv)
    rows = {}
    for _ in range(args.repeat):   # alternating, so that a slow minute of the machine hits both
        for world in (1, 2):
            times = measure(world, args)
            rows[world] = {k: min(v, rows.get(world, times)[k]) for k, v in times.items()}
    print(f"rank benchmark: {args.envs} environments x {args.plays} plays, {args.max_turns} turns, "
          f"{args.max_new_tokens} tokens a turn; {args.slots} designer slots; tiny model, {os.cpu_count()} CPUs; "
          f"the fastest of {args.repeat} runs")
    print(f"{'phase':<10}{'1 rank s':>12}{'2 ranks s':>12}{'2 / 1':>10}")
    for phase in ("play", "design"):
        print(f"{phase:<10}{rows[1][phase]:>12.2f}{rows[2][phase]:>12.2f}{rows[2][phase] / rows[1][phase]:>10.2f}")
    return rows


if __name__ == "__main__":
    main()

"""What a run leaves on disk, and a report to look at it.

    python spade.py report out/<run>        # or: python -m harness.report out/<run>
    python spade.py report out/<a> out/<b>  # the agent's reward of both runs in one picture, out/<a>/report/runs.png

A run directory holds `config.json`, `metrics.jsonl` (one JSON object per step), `samples/`
(per regen step, per new environment: its code, hint, scores and one hinted and one unhinted
transcript; and `plays.json` every R steps: one play of each environment of the pool or RLVE
problem), `env_memory.json` and checkpoints. `Log` writes the first three while spade.py runs;
`main` reads them back and writes `report/curriculum.png` (agent reward, hint regret, designer
validity, share of environments in the learnable band 0.2-0.8, environment length in lines over
steps) and `report/index.html` (every generated environment with its code, hint, scores and a
transcript; the dumped plays), so a person can look rather than grep.
"""
import dataclasses
import html
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import regret
from sandbox.contract import printable, read_json

# The panels, each on its value's range (widened where a value falls outside; None: from the data).
CURVES = [("agent/reward", "agent reward (mean episode return)", (-1, 1)),
          ("designer/regret", "hint regret (R_hint - R_nohint, new envs)", (-1, 1)),
          ("designer/valid_rate", "designer validity (valid / slots)", (0, 1)),
          ("agent/band_share", "share of envs with win rate in [0.2, 0.8]", (0, 1)),
          ("designer/env_lines", "environment length (lines)", (0, None))]
SHOWN = [("agent/reward", "reward", "{:+.3f}"), ("designer/reward", "designer", "{:.3f}"),
         ("designer/valid_rate", "valid", "{:.2f}"), ("designer/regret", "regret", "{:+.3f}"),
         ("agent/band_share", "band", "{:.2f}"), ("agent/samples", "trained", "{:d}"), ("tokens_per_s", "tok/s", "{:.0f}"),
         ("rlve/mean_top_level", "rlve level", "{:.2f}"), ("grpo/loss", "loss", "{:+.4f}"),
         ("sync/logprob_gap", "gap", "{:.2g}")]


def eta(steps, steps_left, regens_left):
    """Time left: the steps left at the mean pace of the steps seen without their design and hints, plus
    the regen steps left at the mean design and hints time of the regen steps seen. `steps`: (seconds,
    of them design and hints) of each step seen.

    >>> eta([(50.0, 40.0), (10.0, 0.0)], 180, 45), eta([(2.0, 0.0)], 3, 0), eta([(3.0, 2.0)], 0, 0)
    ('1h00m', '6s', '0s')
    """
    regens = [design for _, design in steps if design > 0]
    seconds = round(sum(total - design for total, design in steps) / len(steps) * steps_left
                    + (sum(regens) / len(regens) if regens else 0.0) * regens_left)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")


def agent_metrics(played, episodes):
    """The agent's line of a step: `played` are all its plays, `episodes` the scored ones (FAILED plays
    dropped). The band is the learnable win rates 0.2-0.8."""
    win_rates = [regret.share_won(rs) for rs in regret.group_rewards(episodes).values() if rs]
    return {"agent/reward": sum(e.reward for e in episodes) / max(1, len(episodes)),
            "agent/error_rate": sum(e.status == "error" for e in played) / max(1, len(played)),
            "agent/failed_rate": sum(e.failed for e in played) / max(1, len(played)),
            "agent/band_share": sum(0.2 <= w <= 0.8 for w in win_rates) / max(1, len(win_rates))}


def designer_metrics(batch):
    """The designer's line of a step that scored an epoch: its samples' mean raw reward x."""
    return {"designer/reward": sum(x for _, x in batch) / len(batch), "designer/samples": len(batch)} if batch else {}


def config_lines(cfg):
    """The run's header (spade.py config prints it too): every value by the layer that set it
    (cli.layers, each over those before it); empty values and flags that are off left out."""
    values = {**dataclasses.asdict(cfg), **dataclasses.asdict(cfg.unflagged)}
    by_layer = {}
    for name, layer in cfg.source.items():
        if values.get(name, "") != "" and values[name] is not False:
            by_layer.setdefault(layer, []).append(f"{name}={values[name]}")
    return ["config, each value under the layer that set it (later layers win; METHOD.md 7.3):"] + [
        textwrap.fill(" ".join(cells), 110, initial_indent=f"  {layer}: ", subsequent_indent="    ",
                      break_on_hyphens=False, break_long_words=False)
        for layer, cells in by_layer.items()]


class Log:
    """Rank 0 prints one line per step and appends every metric to metrics.jsonl."""

    def __init__(self, run_dir, cfg, rank=0):
        self.run_dir, self.cfg, self.quiet = Path(run_dir), cfg, rank != 0
        self.wandb, self.step_seconds = None, []
        if self.quiet or not sys.stderr.isatty():   # transformers' bars (loading, writing shards) as ours
            import transformers.utils.logging
            transformers.utils.logging.disable_progress_bar()
        if cfg.wandb and not self.quiet:
            import wandb
            self.wandb = wandb.init(project="spade", name=self.run_dir.name, config=dataclasses.asdict(cfg))

    def print(self, message):
        if not self.quiet:
            print(message, flush=True)

    def config(self, sandbox=None):
        """The config's lines and config.json; `sandbox`: the isolation that holds (sandbox.summary())."""
        self.print("\n".join(config_lines(self.cfg)))
        config = {**dataclasses.asdict(self.cfg), "unflagged": dataclasses.asdict(self.cfg.unflagged),
                  "source": self.cfg.source, "sandbox": sandbox}
        if not self.quiet:
            (self.run_dir / "config.json").write_text(json.dumps(config, indent=1))

    def step(self, metrics):
        if self.quiet:
            return
        cells = [f"{label} {fmt.format(metrics[key])}" for key, label, fmt in SHOWN if key in metrics]
        phases = " ".join(f"{k[5:]} {v:.1f}s" for k, v in metrics.items() if k.startswith("time/"))
        self.step_seconds.append((metrics["seconds"], metrics.get("time/design", 0) + metrics.get("time/hints", 0)))
        left = range(metrics["step"] + 1, self.cfg.steps)
        print(f"step {metrics['step']:4d} | {metrics['seconds']:6.1f}s | " + " | ".join(cells) + f" | {phases} | eta "
              f"{eta(self.step_seconds, len(left), sum(s % self.cfg.regen_interval == 0 for s in left))}", flush=True)
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.wandb:
            self.wandb.log(metrics, step=metrics["step"])

    def rewind(self, step):
        """On resume from `step`: forget what the steps from it on wrote after that checkpoint (they are
        played again), and a line a kill cut short."""
        path = self.run_dir / "metrics.jsonl"
        if self.quiet or not path.is_file():
            return
        kept = [line for line in path.read_text(errors="replace").splitlines() if _step_of(_json(line)) < step]
        path.with_suffix(".tmp").write_text("".join(line + "\n" for line in kept))
        os.replace(path.with_suffix(".tmp"), path)
        for folder in (self.run_dir / "samples").glob("step_*"):
            if not folder.name[5:].isdecimal() or int(folder.name[5:]) >= step:
                shutil.rmtree(folder, ignore_errors=True)

    def samples(self, step, regen, episodes, scores):
        """Dump each new environment of a regen step (spade.Regen) with its scores, and the rejected
        attempts."""
        folder = self.run_dir / "samples" / f"step_{step:05d}"
        if not self.quiet:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "rejected.json").write_text(json.dumps(regen.rejected, indent=1))
        first = lambda eps, env_id: next((e for e in eps if e.env_id == env_id), None)
        for i, env in enumerate(regen.envs):
            hinted, unhinted = first(regen.hinted, env.env_id), first(episodes, env.env_id)
            record = dict(env_id=env.env_id, skill=env.skill, step=step, code=env.code,
                          hint=regen.hints[i] if regen.hints else "", **scores[env.env_id],
                          hinted_transcript=hinted.messages if hinted else [],
                          unhinted_transcript=unhinted.messages if unhinted else [],
                          unhinted_status=unhinted.status if unhinted else "", unhinted_error=unhinted.error if unhinted else None)
            if not self.quiet:
                (folder / f"{env.env_id}.json").write_text(json.dumps(record, indent=1))
                (folder / f"{env.env_id}.py").write_text(env.code)

    def plays(self, step, episodes, win_rates):
        """A step's plays for people: the first play of each environment of the pool (generated, topped up
        from envs/, a fixed pool's, or an RLVE problem) with its transcript and the environment's win rate."""
        first = {}
        for episode in episodes:
            first.setdefault(episode.env_id, episode)
        if self.quiet or not first:
            return
        folder = self.run_dir / "samples" / f"step_{step:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        records = [dict(env_id=e.env_id, skill=e.skill, seed=e.seed, reward=e.reward, status=e.status, error=e.error,
                        win_rate=win_rates.get(e.env_id, 0.0), transcript=e.messages) for e in first.values()]
        (folder / "plays.json").write_text(json.dumps(records, indent=1))


def _json(text):
    """The JSON value of `text`, or None where it is not JSON (a line or a file a kill cut short, or one
    that is not what a run writes)."""
    try:
        return read_json(text)
    except ValueError:
        return None


def _step_of(metrics):
    """The step of a metrics line, or infinity where it is not one."""
    ok = isinstance(metrics, dict) and type(metrics.get("step")) is int
    return metrics["step"] if ok else float("inf")


# The fields of each dumped record (Log.samples, the designer's rejections, Log.plays) that the page shows,
# and their types. A record without them (a run written by someone else, a file damaged) is not shown.
NUMBER, MESSAGES = (int, float), "messages"
SAMPLE = dict(env_id=str, skill=str, step=int, win_rate=NUMBER, regret=NUMBER, code=str, hint=str,
              unhinted_transcript=MESSAGES, hinted_transcript=MESSAGES)
REJECTED = dict(skill=str, attempt=int, stage=str, error=str)
PLAY = dict(env_id=str, reward=NUMBER, win_rate=NUMBER, status=str, transcript=MESSAGES)


def _as_written(record, fields):
    """Whether `record` is a dict holding `fields`, each of its type exactly (a bool is no number here)."""
    def typed(value, kind):
        if kind == MESSAGES:
            return type(value) is list and all(type(message) is dict for message in value)
        return type(value) in (kind if isinstance(kind, tuple) else (kind,))
    return type(record) is dict and all(typed(record.get(name), kind) for name, kind in fields.items())


def read_run(run_dir):
    """(metrics, samples, rejected attempts, plays) of a run; what cannot be read (a line or a file a kill
    cut short, a record that is not what a run writes) is skipped and counted."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise SystemExit(f"report: {run_dir} has no metrics.jsonl (is it a spade run directory?)")
    text = (run_dir / "metrics.jsonl").read_text(errors="replace")
    lines = [_json(line) for line in text.splitlines() if line.strip()]
    metrics = [m for m in lines if _step_of(m) != float("inf")]
    skipped = len(lines) - len(metrics)

    def dumped(name, fields, one_a_file=False):   # the records of the samples/step_<n>/<name> files, with n
        nonlocal skipped
        records = []
        for path in sorted((run_dir / "samples").glob(f"step_*/{name}")):
            mine = path.parent.name[5:].isdecimal() and path.is_file()   # a folder of that name is no record
            value = _json(path.read_text(errors="replace")) if mine else None
            found = [value] if one_a_file else value if type(value) is list else [None]
            kept = [dict(r, step=int(path.parent.name[5:])) for r in found if _as_written(r, fields)]
            skipped += len(found) - len(kept)
            records += kept
        return records

    samples = dumped("game_*.json", SAMPLE, one_a_file=True)
    rejected, plays = dumped("rejected.json", REJECTED), dumped("plays.json", PLAY)
    if skipped:
        print(f"report: skipped {skipped} lines, files or records of {run_dir} that are not what a run writes "
              f"(cut short?)")
    return metrics, samples, rejected, plays


def plot_curriculum(metrics, path, note=""):
    """curriculum.png: a panel per CURVES entry on its value's range, `note` (a run without a valid
    environment) above them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(len(CURVES), 1, figsize=(8, 2.2 * len(CURVES) + 0.5 * bool(note)), sharex=True)
    for ax, (key, title, (lo, hi)) in zip(axes, CURVES):
        points = [(m["step"], m[key]) for m in metrics if type(m.get(key)) in NUMBER]
        values = [value for _, value in points]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3)
        else:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=ax.transAxes)
        lo, hi = min([lo, *values]), max([1 if hi is None else hi, *values])
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if note:
        fig.suptitle(textwrap.fill(note, 95), fontsize=10, color="#b00")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def shown(text):
    """Text a run read or wrote (environment code, transcripts, names) as the page shows it: markup escaped,
    control and bidirectional characters written as their escapes (`printable`), so that code reads in
    the order it runs."""
    return html.escape(printable(str(text), lines=True))


def plot_runs(runs, path):
    """One panel: the agent's mean reward at each step of each run, labelled by its directory name and
    learning rate (a control at --lr 0 beside a learning run); returns the picture's path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for run in runs:
        points = [(m["step"], m["agent/reward"]) for m in read_run(run)[0] if type(m.get("agent/reward")) in NUMBER]
        config = Path(run) / "config.json"
        saved = _json(config.read_text(errors="replace")) if config.is_file() else None
        lr = saved.get("lr") if isinstance(saved, dict) else None   # a config.json cut short: no label
        ax.plot(*(zip(*points) if points else ([], [])), marker="o", markersize=3,
                label=Path(run).name + (f" (lr {lr:g})" if type(lr) in (int, float) else ""))
    ax.set(xlabel="step", ylabel="agent reward (mean of the step's plays)", ylim=(-0.05, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def transcript_html(messages):
    rows = "".join(f'<div class="msg {shown(m.get("role", ""))}"><b>{shown(m.get("role", ""))}</b>'
                   f'<pre>{shown(m.get("content", ""))}</pre></div>' for m in messages)
    return rows or "<p><i>no transcript</i></p>"


def _listed(title, note, rows):
    """A list of <details> rows under its title and `note`; nothing where there are none."""
    return f"<h1>{title} ({len(rows)})</h1><p>{note}</p>{''.join(rows)}" if rows else ""


def rejected_html(rejected):
    return _listed("Rejected designer attempts", "Not trained on; counted in designer validity.", [
        f"""<details><summary>step {r['step']} &middot; {shown(r['skill'])} &middot; attempt {r['attempt']}
 &middot; rejected at <b>{shown(r['stage'])}</b>: {shown(r['error'][:160])}</summary>
<pre>{shown(r.get('response', ''))}</pre></details>""" for r in rejected])


def plays_html(plays):
    return _listed("Plays", "One play of each environment of the pool (or RLVE problem) every R steps, with the "
                   "environment's win rate at that step.", [
        f"""<details><summary>step {p['step']} &middot; {shown(p['env_id'])} &middot; win rate
 {p['win_rate']:.2f} &middot; this play {p['reward']:+.2f}, {shown(p['status'])}</summary>
{transcript_html(p['transcript'])}</details>""" for p in plays])


def no_valid_note(metrics, samples):
    """One line for a self-play run whose designer wrote no valid environment, else ''."""
    designed = any("designer/valid_rate" in m for m in metrics)
    return ("The designer wrote no valid environment in this run: the agent played seed environments only, "
            "and the designer's panels are empty or flat." if designed and not samples else "")


def last_step_html(last):
    """The last step's metrics, a row per group as the README's metric table has them."""
    groups = {}
    for key, value in last.items():
        if isinstance(value, (int, float)) and key != "step":
            group, _, name = key.rpartition("/")
            groups.setdefault(group or "step", []).append(f"{name} {value:.3g}")
    rows = "".join(f"<tr><th>{shown(group)}</th><td>{shown(' · '.join(cells))}</td></tr>"
                   for group, cells in groups.items())
    return f"<p>last step ({last.get('step')}):</p><table>{rows}</table>" if rows else ""


def write_html(run_dir, metrics, samples, rejected, path, plays=()):
    note = no_valid_note(metrics, samples)   # where there are no cards: set unless it is a baseline run
    header = header_html(run_dir, metrics, note)
    cards = [f"""<section><h2>{shown(s['env_id'])}</h2>
<p>skill <b>{shown(s['skill'])}</b> &middot; step {s['step']} &middot; win rate {s['win_rate']:.2f}
 &middot; regret {s['regret']:+.2f} &middot; {len(s['code'].splitlines())} lines</p>
<p><b>Hint</b> (the policy's words, as written): <code>{shown(s['hint']) or '<i>none</i>'}</code></p>
<details><summary>code</summary><pre>{shown(s['code'])}</pre></details>
<details><summary>unhinted play ({shown(s.get('unhinted_status', ''))})</summary>{transcript_html(s['unhinted_transcript'])}</details>
<details><summary>hinted play</summary>{transcript_html(s['hinted_transcript'])}</details></section>"""
             for s in samples]
    body = "\n".join(cards) or ("<p>None: the rejected attempts are below, and what the agent played under Plays.</p>"
                                if note else "<p>A baseline run: no designer.</p>")
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>spade run {shown(Path(run_dir).name)}</title>
<style>body{{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}} pre{{background:#f5f5f5;padding:.6em;
overflow-x:auto;white-space:pre-wrap}} section{{border-top:1px solid #ccc;margin-top:1.5em}} .msg.assistant pre{{background:#eef5ff}}
img{{max-width:100%}} th{{text-align:left;padding-right:1em}}</style></head><body>
<h1>spade run {shown(Path(run_dir).name)}</h1>{header}<p>{len(metrics)} steps &middot; {len(samples)} generated environments &middot; {len(rejected)} rejected attempts</p>
{last_step_html(metrics[-1] if metrics else {})}<img src="curriculum.png" alt="curriculum plots">
<h1>Generated environments</h1>{body}{rejected_html(rejected)}{plays_html(plays)}</body></html>""")


def header_html(run_dir, metrics, note):
    """The run's isolation as its config.json recorded it (in bold red where a layer was missing), the
    largest engine-trainer log-prob gap of the run (harness/sync.py) and at which step, and `note` in bold red."""
    red = ' style="color:#b00;font-weight:bold"'
    path = Path(run_dir) / "config.json"
    config = _json(path.read_text(errors="replace")) if path.is_file() else None
    isolation = config.get("sandbox") if isinstance(config, dict) else None
    gaps = [(m["sync/logprob_gap"], m["step"]) for m in metrics if isinstance(m.get("sync/logprob_gap"), (int, float))]
    header = ""
    if isinstance(isolation, str):
        header += f"<p{red * ('MISSING' in isolation)}>sandbox: {shown(isolation)}</p>"
    if gaps:
        gap, step = max(gaps)
        header += (f"<p>engine and trainer: at most {gap:.2g} nats per token apart on the fixed probe (step {step}; "
                   f"sync/logprob_gap)</p>")
    return header + (f"<p{red}>{note}</p>" if note else "")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    usage = ("usage: python spade.py report out/<run>   (writes out/<run>/report/: curriculum.png and index.html)\n"
             "       python spade.py report out/<a> out/<b> ...   (their agent rewards in one picture: out/<a>/report/runs.png)")
    if argv in (["-h"], ["--help"]):
        return print(usage)
    if not argv or any(a.startswith("-") for a in argv):
        raise SystemExit(usage)
    metrics, samples, rejected, plays = read_run(argv[0])   # several runs: their picture goes in the first's report/
    out = Path(argv[0]) / "report"
    if any(p.is_symlink() for p in (out, *(out / name for name in ("index.html", "curriculum.png", "runs.png")))):
        raise SystemExit(f"report: {out} is or holds a link; the report writes through none")   # a downloaded run's
    try:
        out.mkdir(exist_ok=True)
    except OSError as e:
        raise SystemExit(f"report: cannot write {out}: {e.strerror or e}")
    if len(argv) > 1:
        return print(f"report: {plot_runs(argv, out / 'runs.png')}")
    import matplotlib.pyplot as plt
    plt.close(plot_curriculum(metrics, out / "curriculum.png", no_valid_note(metrics, samples)))
    write_html(argv[0], metrics, samples, rejected, out / "index.html", plays)
    print(f"report: {out / 'index.html'} and {out / 'curriculum.png'} ({len(metrics)} steps, {len(samples)} environments)")


if __name__ == "__main__":
    main()

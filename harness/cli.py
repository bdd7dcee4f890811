"""spade.py's command line: a flag per knob with --help built from Config's comments, and --resume's
config. `program` is the module that defines the run's values (spade.py: Config, SETTINGS, the layers
and `configure`), passed in so that a fork's program (the toy's) gets its own settings."""
import argparse
import dataclasses
import inspect
import re
from pathlib import Path

from backend import launch
from harness.checkpoint import read_pointer


def parse_config(program, argv):
    """The Config of a command line. --help shows each knob's value in a plain `python spade.py` and
    the layer that set it."""
    Config, layers = program.Config, program.layers
    values, source = program.merge(layers({}))
    parser = argparse.ArgumentParser(
        prog="spade.py", usage="python spade.py [--knob VALUE ...] | config|plan [--knob VALUE ...] | report out/<run>",
        description=f"{program.__doc__.splitlines()[0]} Each knob's help ends with [the value a plain `python "
                    f"spade.py` uses, the layer that set it] (layers, each over those before it: "
                    f"{', '.join(name for name, _ in layers({}))}; METHOD.md 7.3). `python spade.py config "
                    f"--knob VALUE ...` prints every value of a command line with its layer.",
        epilog="python spade.py report out/<run>: a run's plots and HTML page (harness/report.py)")
    for title, knobs in knob_groups(Config):
        group = parser.add_argument_group(title)
        for name, meaning in knobs:
            field = Config.__dataclass_fields__[name]
            plain = values[name] if values[name] != "" else '""'
            plain = ("on" if plain else "off") if field.type is bool else plain
            paper = "" if source[name] == "default" else f"; default {field.default!r}"
            text = f"{meaning} [{plain}, {source[name]}{paper}]".replace("%", "%%")
            if field.type is bool:
                group.add_argument(flag(name), action="store_true", help=text)
            else:
                names = program.choices().get(name)
                group.add_argument(flag(name), type=field.type, help=text, metavar="{" + ",".join(names) + "}"
                                   if names else {int: "N", float: "X"}.get(field.type, "TEXT"))
    # Given = on the command line; `is not` keeps an explicit 0 (e.g. --kl-coef 0 for tool use).
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None and v is not False}
    given = launch.after_restart(given, Config.out)   # torchrun --max-restarts: go on from the last checkpoint
    return resumed_config(program, given) if given.get("resume") else program.configure(given)


def knob_groups(Config):
    """[(group, [(knob, its meaning)])] as Config's comments give them, in its order."""
    groups = []
    for line in inspect.getsource(Config).splitlines():
        heading, knob = re.match(r"    # (.+)$", line), re.match(r"    (\w+): .*?#\s*(.+)$", line)
        if heading:
            groups.append((heading[1], []))
        elif knob:
            groups[-1][1].append(knob.groups())
    return groups


def flag(knob):
    return "--" + knob.replace("_", "-")


def resumed_config(program, given):
    """--resume: the run's saved config, with what program.RESUMABLE lets a command line change (more
    --steps extend it; --wandb holds for this invocation only). Any other flag that changes the config is
    refused in one sentence, as is a saved config of another version's knobs or of a setting this program
    lacks."""
    Config, configure, resumable = program.Config, program.configure, program.RESUMABLE
    latest, pointer = Path(given["resume"]) / "latest", read_pointer(given["resume"])
    stored = {**pointer["config"], "wandb": False}
    unknown = sorted(set(stored) - {f.name for f in dataclasses.fields(Config)})
    if unknown:
        raise SystemExit(f"spade.py: {latest} was written by another version of spade.py (its knobs {unknown})")
    if stored.get("setting", Config.setting) not in program.SETTINGS:   # a fork's, such as the toy's
        raise SystemExit(f"spade.py: {given['resume']} is a run of the setting {stored['setting']!r}, which only "
                         f"its own program defines (the toy's: python -m toy --resume {given['resume']})")
    saved, wanted = configure({}, saved=stored), configure(given, saved=stored)
    changed = [f"{flag(f.name)} (saved: {getattr(saved, f.name)})" for f in dataclasses.fields(Config)
               if f.name not in resumable and getattr(wanted, f.name) != getattr(saved, f.name)]
    if changed:
        raise SystemExit(f"spade.py: a resumed run keeps its saved config; {', '.join(changed)} cannot "
                         f"change (these can: {', '.join(map(flag, resumable))})")
    if wanted.steps <= pointer["step"]:
        raise SystemExit(f"spade.py: {given['resume']} is at step {pointer['step']} already: give more --steps")
    return wanted

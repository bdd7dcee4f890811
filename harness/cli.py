"""spade.py's command line and config: a flag per knob with --help built from Config's comments, the
layers of METHOD.md 7.3 merged into a Config (`configure`), and --resume's config. `program` is the
module that defines the run's values (spade.py: Config, Unflagged, SETTINGS and the tables of METHOD.md
7.3), passed in so that a fork's program (the toy's) gets its own settings."""
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
    Config = program.Config
    values, source = merge(layers(program, {}))
    parser = argparse.ArgumentParser(
        prog="spade.py", usage="python spade.py [--knob VALUE ...] | config|plan [--knob VALUE ...] | report out/<run>",
        description=f"{program.__doc__.splitlines()[0]} Each knob's help ends with [the value a plain `python "
                    f"spade.py` uses, the layer that set it] (layers, each over those before it: "
                    f"{', '.join(name for name, _ in layers(program, {}))}; METHOD.md 7.3). `python spade.py config "
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
    return resumed_config(program, given) if given.get("resume") else configure(program, given)


def configure(program, given, saved=None):
    """The program's Config of these given knobs (and a resumed run's saved ones): `layers` merged, split
    into the knobs and `cfg.unflagged`; `cfg.source` names the layer that set each value."""
    values, source = merge(layers(program, given, saved))
    knobs = {f.name for f in dataclasses.fields(program.Config)}
    cfg = program.Config(**{k: v for k, v in values.items() if k in knobs}).derive(
        {k: v for k, v in values.items() if k not in knobs})
    cfg.source = source
    return cfg


def layers(program, given, saved=None):
    """Where a run's values come from, in order, each layer over those before it (METHOD.md 7.3):
    [(layer, {name: value})] for the knobs and the unflagged values alike, from the program's tables."""
    saved, Config = saved or {}, program.Config
    setting = given.get("setting", saved.get("setting", Config.setting))
    name = given.get("model", saved.get("model", Config.model)).lower()
    small = name in program.SMALL_MODELS or (name.startswith("random-") and "/" not in name)
    model, record = table_key(name), program.SETTINGS.get(setting)   # an unknown setting: refused by derive()
    defaults = {f.name: f.default for cls in (Config, program.Unflagged) for f in dataclasses.fields(cls)}
    return [("default", defaults), ("setting", record.values if record else {}),
            ("model", program.MODELS.get(model, {})), ("setting and model", program.COLUMNS.get((setting, model), {})),
            ("rlve", program.RLVE if given.get("rlve", saved.get("rlve")) else {}),
            ("embedded", {**program.EMBEDDED, "skills": record.embedded_skills if record else "",
                          "seed_pool": record.embedded_seeds if record else ""} if small else {}),
            ("saved run", saved), ("command line", given)]


def merge(stack):
    """({name: value}, {name: the layer that set it}) of `layers`: the last layer to give a value wins.
    The names of the second dict come layer by layer, in the layers' order."""
    values = {name: value for _, given in stack for name, value in given.items()}
    last = {name: layer for layer, given in stack for name in given}
    return values, {name: layer for layer, given in stack for name in given if last[name] == layer}


def table_key(model):
    """The MODELS and COLUMNS key of a --model, so its alias, the hub id it stands for and a directory
    named after either find the same row: the last path part, lower case, without an -Instruct[-date].

    >>> [table_key(m) for m in ("Qwen3-8B", "Qwen/Qwen3-4B-Instruct-2507", "/ckpt/Qwen3-8B/", "random-qwen3-8b:4")]
    ['qwen3-8b', 'qwen3-4b', 'qwen3-8b', 'random-qwen3-8b:4']
    """
    return re.sub(r"-instruct(-\d+)?$", "", model.rstrip("/").rsplit("/", 1)[-1].lower())


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
    refused in one sentence, as is a saved config of another version's knobs, of a value of another type
    or of a setting this program lacks."""
    Config, resumable = program.Config, program.RESUMABLE
    latest, pointer = Path(given["resume"]) / "latest", read_pointer(given["resume"])
    stored = {**pointer["config"], "wandb": False}
    types = {f.name: f.type for f in dataclasses.fields(Config)}   # a float knob may be written as an int
    unknown = sorted(set(stored) - set(types))
    if unknown:
        raise SystemExit(f"spade.py: {latest} was written by another version of spade.py (its knobs {unknown})")
    bad = next((k for k, v in stored.items() if type(v) is not types[k] and (types[k], type(v)) != (float, int)), None)
    if bad:
        raise SystemExit(f"spade.py: {latest} is not a checkpoint pointer: its {bad} is no {types[bad].__name__}")
    if stored.get("setting", Config.setting) not in program.SETTINGS:   # a fork's, such as the toy's
        raise SystemExit(f"spade.py: {given['resume']} is a run of the setting {stored['setting']!r}, which only "
                         f"its own program defines (the toy's: python -m toy --resume {given['resume']})")
    saved, wanted = configure(program, {}, saved=stored), configure(program, given, saved=stored)
    changed = [f"{flag(f.name)} (saved: {getattr(saved, f.name)})" for f in dataclasses.fields(Config)
               if f.name not in resumable and getattr(wanted, f.name) != getattr(saved, f.name)]
    if changed:
        raise SystemExit(f"spade.py: a resumed run keeps its saved config; {', '.join(changed)} cannot "
                         f"change (these can: {', '.join(map(flag, resumable))})")
    if wanted.steps <= pointer["step"]:
        raise SystemExit(f"spade.py: {given['resume']} is at step {pointer['step']} already: give more --steps")
    return wanted

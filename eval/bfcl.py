"""BFCL v4 multi-turn (Base, Miss Func, Miss Param, Long Ctx and their mean "BFCL Avg", Table 2's
columns; METHOD.md 11), driven against our model in-process, scored by the `bfcl-eval` package's own
execution backend and checker.

    python -m eval.run --model Qwen3-4B --suite tool_use --benchmarks bfcl_multi_turn

What the package's loader and its Qwen function-calling handler do, we redo here: the involved
classes' function docs with BFCL's Python hint (`function_docs`), tools rendered by the model's chat
template, calls read from `<tool_call>` JSON (`decode_calls`), at most 20 steps per turn (past that
the entry is force-terminated and fails), greedy decoding, 4096 new tokens per step. Miss Func's
held-out functions return as BFCL's prompting path returns them (`start_turn`).

`--turns N` (1 in the CPU smoke run) plays each entry's first N user turns only and scores them
against those turns' ground truth: a check that the loop runs, not BFCL's score.
"""

import copy
import importlib
import importlib.resources
import inspect
import json
import re
import uuid
from dataclasses import dataclass, field

# Only what imports without the package's huge (numpy-1.26-pinning) dependency list: its data files,
# the multi-turn execution backend and `multi_turn_checker`. Not `bfcl_eval.utils` or
# `constants.eval_config`: importing them creates result directories inside site-packages.
from bfcl_eval.constants.category_mapping import VERSION_PREFIX
from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING, MAXIMUM_STEP_LIMIT
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, MULTI_TURN_FUNC_DOC_FILE_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

from backend.engine import SamplingParams
from eval.common import chat_prompt, first, generate_texts, percent, sampling

SETTINGS = SamplingParams(temperature=0.0, max_new_tokens=4096)
CATEGORIES = {"multi_turn_base": "BFCL Base", "multi_turn_miss_func": "BFCL MissFunc",
              "multi_turn_miss_param": "BFCL MissParam", "multi_turn_long_context": "BFCL LongCtx"}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
DATA = importlib.resources.files("bfcl_eval") / "data"


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_category(category: str) -> tuple[list[dict], dict]:
    """The package's entries of one multi-turn category and their ground truth, by entry id."""
    entries = read_lines(DATA / f"{VERSION_PREFIX}_{category}.json")
    truth = {row["id"]: row["ground_truth"] for row in read_lines(DATA / "possible_answer" / f"{VERSION_PREFIX}_{category}.json")}
    return entries, truth


def function_docs(entry: dict) -> tuple[list[dict], dict]:
    """(the functions offered from the start, {turn index: functions returned at that turn}) as
    BFCL's loader builds them: every doc of the involved classes, minus Miss Func's held-out ones
    (in the order the entry names them), and only then the Python hint (" Note that the provided
    function is in Python 3 syntax.") on what is left, so the held-out ones never get it."""
    docs = [doc for name in entry["involved_classes"]
            for doc in read_lines(DATA / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[name])]
    held_out = {}
    for turn, names in entry.get("missed_function", {}).items():
        held_out[int(turn)] = [next(doc for doc in docs if doc["name"] == name) for name in names]
        docs = [doc for doc in docs if doc["name"] not in names]
    for doc in docs:
        doc["description"] += PYTHON_HINT
    return docs, held_out


def callable_names(involved_classes: list[str]) -> set[str]:
    """The public methods of the API classes: the only names the backend resolves to its instances."""
    names = set()
    for class_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        names |= {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}
    return names


def decode_calls(text: str, allowed: set[str]) -> list[tuple[dict, str | None]]:
    """The `<tool_call>` objects of a response, each with its call string for the backend, or None
    where the name is not in `allowed` or an argument key is not an identifier. Blocks that are not a
    JSON object are skipped, as BFCL's Qwen handler does.

    BFCL `eval`s the call strings it builds from model output. We build them only from JSON
    (identifier names and keys, JSON values via repr) and drop calls to names that are not public
    methods of the involved API classes, so model text can never become arbitrary Python; such a
    call gets the error the backend would have given, and the turn goes on (METHOD.md 11).

    >>> decode_calls('<tool_call>\\n{"name": "cd", "arguments": {"folder": "doc"}}\\n</tool_call>', {"cd"})
    [({'name': 'cd', 'arguments': {'folder': 'doc'}}, "cd(folder='doc')")]
    >>> decode_calls('<tool_call>{"name": "open", "arguments": {"file": "x"}}</tool_call> <tool_call>oops</tool_call>', {"cd"})
    [({'name': 'open', 'arguments': {'file': 'x'}}, None)]
    """
    decoded = []
    for block in TOOL_CALL.findall(text):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            continue
        if not isinstance(call, dict):
            continue
        name, arguments = call.get("name"), call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                continue
        if not isinstance(name, str) or not isinstance(arguments, dict):
            continue
        safe = name in allowed and all(str(k).isidentifier() for k in arguments)
        string = f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})" if safe else None
        decoded.append(({"name": name, "arguments": arguments}, string))
    return decoded


def split_reasoning(text: str) -> str:
    """What follows a thinking block, as BFCL's Qwen handler keeps it."""
    return text.split("</think>")[-1].lstrip("\n")


@dataclass
class Dialogue:
    """One entry being played: its chat so far, and the model's responses per turn and step."""
    entry: dict
    category: str
    functions: list
    held_out: dict
    allowed: set
    model_name: str  # the backend keeps its API instances in module globals under this prefix
    turns: int  # user turns to play: all of the entry's, or the first `--turns`
    messages: list = field(default_factory=list)
    turn: int = 0
    step: int = 0
    responses: list = field(default_factory=list)  # [turn][step] -> response text
    decoded: list = field(default_factory=list)  # [turn][step] -> call strings (non-empty steps only)
    force_quit: bool = False
    done: bool = False


def start_turn(d: Dialogue):
    """Enter turn `d.turn`: its user message(s), or, where held-out functions return, BFCL's user
    message carrying their docs.

    Miss Func as BFCL's prompting path does it (the Qwen FC handler is an OSS handler, and those run
    multi-turn entries through `inference_multi_turn_prompting`): at their turn the held-out functions
    come back inside the user message (`DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING`: the
    Python repr of their docs, a newline, then "I have updated some more functions..."), and they are
    never added to the `<tools>` list of the system prompt."""
    d.step = 0
    d.responses.append([])
    d.decoded.append([])
    messages = d.entry["question"][d.turn]
    if d.turn in d.held_out:
        assert not messages, "a turn that returns held-out functions has no user message in BFCL"
        content = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=d.held_out[d.turn])
        messages = [{"role": "user", "content": content}]
    d.messages.extend(messages)


def advance(d: Dialogue, response: str):
    """Apply one model response: run its calls (the turn goes on) or end the turn (no calls)."""
    text = split_reasoning(response)
    d.responses[-1].append(text)
    decoded = decode_calls(text, d.allowed)
    d.messages.append({"role": "assistant", "content": "", "tool_calls": [call for call, _ in decoded]} if decoded
                      else {"role": "assistant", "content": text})
    if decoded:
        strings = [string for _, string in decoded if string]
        results = iter(execute_multi_turn_func_call(
            strings, d.entry["initial_config"], d.entry["involved_classes"], d.model_name, d.entry["id"],
            long_context="long_context" in d.category, is_evaL_run=False)[0] if strings else [])
        for call, string in decoded:  # a refused call gets the error the backend would have given
            content = next(results) if string else f"Error during execution: {call['name']!r} is not an available function"
            d.messages.append({"role": "tool", "name": call["name"], "content": content})
        if strings:
            d.decoded[-1].append(strings)
        d.step += 1
        if d.step > MAXIMUM_STEP_LIMIT:  # BFCL force-quits the whole entry, which then fails
            d.force_quit = d.done = True
        return
    d.turn += 1
    if d.turn == d.turns:
        d.done = True
    else:
        start_turn(d)


def score_entry(entry: dict, ground_truth: list, decoded: list, category: str, model_name: str) -> dict:
    """The package's checker on decoded calls ([turn][step] -> call strings); {"valid": bool, ...}."""
    if len(decoded) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"{len(decoded)} turns played of {len(ground_truth)}"}
    try:
        return multi_turn_checker(decoded, ground_truth, entry, category, model_name)
    finally:
        forget_instances(model_name)


def forget_instances(model_name: str):
    """Drop the API instances the backend left in its module globals for `model_name`: it keeps one
    per (model, entry, class) so state persists across turns, and never frees them. Without this a
    second scoring of an entry would start from the state the first one left, and memory grows."""
    for key in [k for k in vars(multi_turn_utils) if k.startswith(model_name)]:
        delattr(multi_turn_utils, key)


def play(engine, tokenizer, entries: list[dict], category: str, params: SamplingParams, options) -> list[Dialogue]:
    """Every entry's dialogue to its end, all live dialogues stepping together in one batch."""
    dialogues = []
    for entry in entries:
        functions, held_out = function_docs(entry)
        d = Dialogue(copy.deepcopy(entry), category, functions, held_out, callable_names(entry["involved_classes"]),
                     f"spade_{uuid.uuid4().hex}", min(len(entry["question"]), options.turns or len(entry["question"])))
        start_turn(d)
        dialogues.append(d)
    while live := [d for d in dialogues if not d.done]:
        prompts = [chat_prompt(tokenizer, d.messages, tools=d.functions) for d in live]
        for d, generated in zip(live, generate_texts(engine, prompts, params, options)):
            advance(d, generated["response"])
    return dialogues


def evaluate(engine, tokenizer, options) -> dict:
    params, columns, metrics, rows = sampling(SETTINGS, options), {}, {}, []
    for category, column in CATEGORIES.items():
        entries, truth = load_category(category)
        entries = first(entries, options.limit)
        correct = 0
        for d in play(engine, tokenizer, entries, category, params, options):
            forget_instances(d.model_name)  # the inference-time instances; scoring replays from scratch
            verdict = score_entry(d.entry, truth[d.entry["id"]][:d.turns], d.decoded, category, d.model_name)
            correct += verdict["valid"]
            rows.append({"problem_id": d.entry["id"], "category": category, "prompt": d.entry["question"],
                         "response": d.responses, "extracted": d.decoded, "score": float(verdict["valid"]),
                         "force_quit": d.force_quit,
                         "detail": "" if verdict["valid"] else f"{verdict.get('error_type')}: {verdict.get('error_message')}"})
        metrics[category] = correct / len(entries)
        columns[column] = percent(metrics[category])
    columns["BFCL Avg"] = percent(sum(metrics.values()) / len(metrics))
    return {"columns": columns, "metrics": {"accuracy": metrics, "num_samples": len(rows)},
            "settings": {"sampling": params.__dict__, "max_steps_per_turn": MAXIMUM_STEP_LIMIT, "turns": options.turns},
            "samples": rows}


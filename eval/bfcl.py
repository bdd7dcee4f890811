"""BFCL v4 multi-turn (Base, Miss Func, Miss Param, Long Ctx and their mean "BFCL Avg", Table 2's
columns; METHOD.md 11), driven against our model in-process, scored by the `bfcl-eval` package's own
execution backend and checker.

    python -m eval.run --model Qwen3-4B --suite tool_use --benchmarks bfcl_multi_turn

What the package's loader and its Qwen function-calling handler (the official run's
`Qwen/Qwen3-4B-Instruct-2507-FC`) do, we redo here: the involved classes' function docs with BFCL's
Python hint (`function_docs`); the prompt the handler writes by hand (`bfcl_prompt`: the docs as JSON
lines in the system turn, reasoning kept inside the current turn, tool results as user turns); calls
read from `<tool_call>\n...\n</tool_call>` JSON after the reasoning (`decode_step`: a block
without "name" or "arguments" ends the turn, as the handler's decoding raises there); at most 20
steps per turn (past that the entry is force-terminated and fails); greedy decoding, 4096 new tokens
per step. Miss Func's held-out functions return as BFCL's prompting path returns them (`start_turn`).

One difference is ours: BFCL `eval`s the call strings it builds from model output, so a call named
`__import__('os').system` or `open` runs. We hand its backend only calls that cannot run anything
but an API method (`call_string`); any other gets an error result, is not scored, and the turn goes
on. Unknown plain names still reach the backend and get its own error text.

`--turns N` (1 in the CPU smoke run) plays each entry's first N user turns only and scores them
against those turns' ground truth: a check that the loop runs, not BFCL's score.
"""

import builtins
import copy
import importlib
import importlib.resources
import inspect
import json
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
from eval.common import first, generate_texts, percent, sampling

SETTINGS = SamplingParams(temperature=0.0, max_new_tokens=4096)
CATEGORIES = {"multi_turn_base": "BFCL Base", "multi_turn_miss_func": "BFCL MissFunc",
              "multi_turn_miss_param": "BFCL MissParam", "multi_turn_long_context": "BFCL LongCtx"}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
OPEN_CALL, CLOSE_CALL = "<tool_call>\n", "\n</tool_call>"
REFUSED_BY_BFCL = {"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"}  # before its eval
# BFCL's Qwen FC system prompt around the function docs: protocol text.
TOOLS_HEADER = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                "with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_FOOTER = ('\n</tools>\n\nFor each function call, return a json object with function name and arguments within '
                '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
                '<args-json-object>}\n</tool_call><|im_end|>\n')
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


def thinking_split(response: str) -> tuple[str, str]:
    """(reasoning, what follows it) as BFCL's Qwen handler splits a response at its last `</think>`.

    >>> thinking_split("<think>\\nplan\\n</think>\\n\\nanswer"), thinking_split("answer")
    (('plan', 'answer'), ('', 'answer'))
    """
    if "</think>" not in response:
        return "", response
    head, _, tail = response.rpartition("</think>")
    return head.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n"), tail.lstrip("\n")


def tool_call_blocks(text: str) -> list:
    """The JSON values of `<tool_call>\\n...\\n</tool_call>` blocks, those that parse, as BFCL's
    pattern `<tool_call>\\n(.*?)\\n</tool_call>` finds them, in one pass (an opening with no closing
    after it ends the search: no later opening has one either).

    >>> tool_call_blocks('<tool_call>\\n{"name": "cd"}\\n</tool_call><tool_call>{"name": "ls"}</tool_call>')
    [{'name': 'cd'}]
    """
    values, position = [], 0
    while (start := text.find(OPEN_CALL, position)) != -1:
        end = text.find(CLOSE_CALL, start + len(OPEN_CALL))
        if end == -1:
            break
        try:
            values.append(json.loads(text[start + len(OPEN_CALL):end]))
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: skipped
            pass
        position = end + len(CLOSE_CALL)
    return values


def decode_step(text: str) -> list[tuple] | None:
    """(name, arguments dict) of each call in a step's text after its reasoning, as BFCL's Qwen
    handler decodes it, or None where its decoding raises (then the turn ends and the step is not
    scored): a block that is not an object, one without "name" or "arguments", arguments that are not
    an object (or a string holding one), a name that cannot be a dict key.

    >>> decode_step('<tool_call>\\n{"name": "cd", "arguments": "{\\\\"folder\\\\": \\\\"a\\\\"}"}\\n</tool_call>')
    [('cd', {'folder': 'a'})]
    >>> decode_step('<tool_call>\\n{"name": "pwd"}\\n</tool_call>'), decode_step("no call")
    (None, [])
    """
    calls = []
    for value in tool_call_blocks(text):
        if not isinstance(value, dict) or "name" not in value or "arguments" not in value:
            return None
        name, arguments = value["name"], value["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                return None
        if isinstance(name, (list, dict)) or not isinstance(arguments, dict):
            return None
        calls.append((name, arguments))
    return calls


def call_string(name, arguments: dict, allowed: set[str]) -> str | None:
    """The call string BFCL builds (`name(key=repr(value),...)`), or None where its `eval` could run
    anything but a method of the API classes: only identifier names and keys, and a name that is a
    method, one the backend refuses before `eval` (`exit`, `kill`, ...), or one its `eval` cannot
    resolve (then BFCL's NameError text comes back). Values are JSON, so their reprs are literals.

    >>> call_string("cd", {"folder": "doc"}, {"cd"}), call_string("teleport", {}, {"cd"})
    ("cd(folder='doc')", 'teleport()')
    >>> call_string("print", {}, {"cd"}), call_string("__import__('os').system", {}, {"cd"}), call_string("cd", {"a b": 1}, {"cd"})
    (None, None, None)
    """
    if not (isinstance(name, str) and name.isidentifier() and all(str(k).isidentifier() for k in arguments)):
        return None
    unresolvable = name not in vars(multi_turn_utils) and not hasattr(builtins, name)
    if name in allowed or name in REFUSED_BY_BFCL or unresolvable:
        return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"
    return None


def renderable(call) -> bool:
    """Whether BFCL's prompt formatter can write this history tool call (else its next prompt raises)."""
    if isinstance(call, dict) and "function" in call:
        call = call["function"]
    return isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call


def render_calls(calls: list, content: str) -> str:
    """The `<tool_call>` blocks BFCL's Qwen formatter writes after an assistant message's content: a
    newline before each but a first one (and a copy of the first) when there is no content."""
    out = ""
    for call in calls:
        if (call == calls[0] and content) or call != calls[0]:
            out += "\n"
        call = call["function"] if "function" in call else call
        arguments = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
        out += f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {arguments}}}\n</tool_call>'
    return out


def render_assistant(message: dict, keep_reasoning: bool, last: bool) -> str:
    """One assistant message as BFCL's Qwen formatter writes it: after the last user query, its
    reasoning in a think block (always for the last message); before it, the content alone."""
    content, reasoning = message["content"], message.get("reasoning_content") or ""
    if not reasoning and "</think>" in content:
        reasoning, content = thinking_split(content)
    if keep_reasoning and (last or reasoning):
        text = f"<think>\n{reasoning.strip(chr(10))}\n</think>\n\n{content.lstrip(chr(10))}"
    else:
        text = content
    return f"<|im_start|>assistant\n{text}{render_calls(message.get('tool_calls') or [], content)}<|im_end|>\n"


def bfcl_prompt(messages: list[dict], functions: list[dict]) -> str:
    """The prompt text BFCL's Qwen FC handler builds by hand (not the model's chat template): the
    functions as JSON lines in the system turn, assistant reasoning kept after the last user query,
    consecutive tool results in one user turn."""
    text = ""
    if functions:
        system = messages[0]["content"] + "\n\n" if messages and messages[0]["role"] == "system" else ""
        tools = "".join(f"\n{json.dumps(doc)}" for doc in functions)
        text += f"<|im_start|>system\n{system}{TOOLS_HEADER}{tools}{TOOLS_FOOTER}"
    elif messages and messages[0]["role"] == "system":
        text += f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n"
    last_query = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"
                       and isinstance(messages[i]["content"], str) and not (messages[i]["content"].startswith(
                           "<tool_response>") and messages[i]["content"].endswith("</tool_response>"))), len(messages) - 1)
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "user" or (role == "system" and i != 0):
            text += f"<|im_start|>{role}\n{message['content']}<|im_end|>\n"
        elif role == "assistant":
            text += render_assistant(message, i > last_query, i == len(messages) - 1)
        elif role == "tool":
            opens = i == 0 or messages[i - 1]["role"] != "tool"
            closes = i == len(messages) - 1 or messages[i + 1]["role"] != "tool"
            text += ("<|im_start|>user" if opens else "") + f"\n<tool_response>\n{message['content']}\n</tool_response>" \
                + ("<|im_end|>\n" if closes else "")
    return text + "<|im_start|>assistant\n"


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
    error: str = ""  # why BFCL's own loop would have raised on this entry (it then fails)
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
    """Apply one model response as BFCL's Qwen handler does: the history keeps its reasoning and the
    tool calls of the whole response; the calls after the reasoning run (the turn goes on), or,
    where there are none or they do not decode, the turn ends."""
    reasoning, text = thinking_split(response)
    d.responses[-1].append(text)
    history_calls = tool_call_blocks(response)
    d.messages.append({"role": "assistant", "content": "" if history_calls else text, "reasoning_content": reasoning}
                      | ({"tool_calls": history_calls} if history_calls else {}))
    calls = decode_step(text)
    if calls:
        run_calls(d, calls)
        d.step += 1
        if d.step > MAXIMUM_STEP_LIMIT:  # BFCL force-quits the whole entry, which then fails
            d.force_quit = d.done = True
    else:
        d.turn += 1
        if d.turn == d.turns:
            d.done = True
        else:
            start_turn(d)
    if not d.done and not all(renderable(call) for call in history_calls):
        d.error, d.done = "BFCL's prompt formatter raises on a tool call of the history", True


def run_calls(d: Dialogue, calls: list[tuple]):
    """Run one step's calls through BFCL's backend, in order, and add their results to the chat; a
    call it would `eval` as arbitrary Python (`call_string` is None) is refused, with an error result."""
    strings = [call_string(name, arguments, d.allowed) for name, arguments in calls]
    safe = [string for string in strings if string]
    results = iter(execute_multi_turn_func_call(
        safe, d.entry["initial_config"], d.entry["involved_classes"], d.model_name, d.entry["id"],
        long_context="long_context" in d.category, is_evaL_run=False)[0] if safe else [])
    for (name, _), string in zip(calls, strings):
        content = next(results) if string else f"Error during execution: {name!r} is not run: it is not an API method"
        d.messages.append({"role": "tool", "name": string or str(name), "content": content})
    if safe:
        d.decoded[-1].append(safe)


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
        prompts = [tokenizer.encode(bfcl_prompt(d.messages, d.functions), add_special_tokens=False) for d in live]
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
            verdict = ({"valid": False, "error_type": "multi_turn:inference_error", "error_message": d.error} if d.error
                       else score_entry(d.entry, truth[d.entry["id"]][:d.turns], d.decoded, category, d.model_name))
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


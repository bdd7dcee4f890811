"""The Reasoning Agent's actions, read from its replies (METHOD.md 4.1-4.3): pure text functions.

Games act through `\\boxed{...}` (`game_action`); environments with tools through native tool calls in
the JSON or the XML form and a final `<answer>...</answer>` (`parse_tool_turn`). agent.py applies
them to each generated turn.

Choices where the official code differs or is silent (METHOD.md 13.3; all of them: METHOD.md 14):
- an empty or blank `\\boxed{ }` counts as no box (the model often echoes the instruction's
  `\\boxed{}`): the first simple box with something in it wins.
- thinking models (METHOD.md 4.2; agent.py asks the template to think or not): the action is parsed
  from the text after the last `</think>` (`after_thinking`; the whole reply when there is none):
  the box or raw reply of a game, the `<answer>` or tool calls of tool use, and the text given to
  step().
"""
import json
import re

# The simple forms \boxed{x}, \boxed{{x}}, \boxed{{{x}}} with no braces inside x, tried in this order over
# the whole reply, as officially: "\boxed{{a}} then \boxed{b}" acts "b".
_SIMPLE_BOXED = [re.compile(r"\\boxed\{([^{}]+)\}"), re.compile(r"\\boxed\{\{([^{}]+)\}\}"),
                 re.compile(r"\\boxed\{\{\{([^{}]+)\}\}\}")]
_BRACE = re.compile(r"[{}]")


# The tags of tool use, found with str.find rather than a lazy regex such as "<tool_call>(.*?)</tool_call>":
# the regex scans from every opener to the end of the reply when none closes, which is quadratic (10 s
# in the trainer for a degenerate reply of 8,000 "<tool_call>"). Both give the same blocks (tests/test_actions.py).
def tag_blocks(text, opener, closer):
    """The text between each `opener` and the first `closer` after it, left to right."""
    blocks, at = [], 0
    while (start := text.find(opener, at)) >= 0 and (end := text.find(closer, start + len(opener))) >= 0:
        blocks.append(text[start + len(opener):end])
        at = end + len(closer)
    return blocks


def _named_blocks(text, tag):
    """(name, body) of each `<tag=name>body</tag>`, the name non-empty and without ">", left to right."""
    opener, closer, blocks, at = f"<{tag}=", f"</{tag}>", [], 0
    while (start := text.find(opener, at)) >= 0 and (name_end := text.find(">", start + len(opener))) >= 0:
        if name_end == start + len(opener):   # an empty name: try the next opener
            at = start + 1
            continue
        end = text.find(closer, name_end + 1)
        if end < 0:                            # unclosed: no later opener closes either
            break
        blocks.append((text[start + len(opener):name_end], text[name_end + 1:end]))
        at = end + len(closer)
    return blocks


def _closing_brace(text, start):
    """Index of the `}` matching the `{` at text[start], or None if it never closes."""
    depth = 0
    for brace in _BRACE.finditer(text, start):   # visits only the braces, not every character
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return brace.start()
    return None


def extract_boxed(text):
    """The command inside `\\boxed{...}` (METHOD.md 4.1), or None when there is no (non-blank) box.

    The first `\\boxed{x}` whose x is not blank, else the first such `\\boxed{{x}}`, else `\\boxed{{{x}}}`;
    otherwise the brace-balanced content of the LAST `\\boxed{`, with up to two enclosing brace
    pairs stripped. (Officially a blank first box makes the whole reply the action; here it is skipped.)

    >>> extract_boxed("try \\\\boxed{probe A 5} then \\\\boxed{open}")
    'probe A 5'
    >>> extract_boxed("echo \\\\boxed{ } then \\\\boxed{open}")
    'open'
    >>> extract_boxed("\\\\boxed{{open}}"), extract_boxed("\\\\boxed{{{{a}, {b}}}}")
    ('open', '{a}, {b}')
    >>> extract_boxed("\\\\boxed{{a}} then \\\\boxed{b}")
    'b'
    >>> extract_boxed("no box"), extract_boxed("\\\\boxed{}")
    (None, None)
    """
    content = next((match.group(1) for pattern in _SIMPLE_BOXED for match in pattern.finditer(text)
                    if match.group(1).strip()), None)
    if content is None:
        start = text.rfind("\\boxed{")
        end = _closing_brace(text, start + len("\\boxed")) if start >= 0 else None
        if end is None:
            return None
        content = text[start + len("\\boxed") + 1:end]
        for _ in range(2):   # strip a pair only if it encloses everything: "{a}, {b}" keeps its braces
            if content.startswith("{") and _closing_brace(content, 0) == len(content) - 1:
                content = content[1:-1]
    return content.strip() or None


def after_thinking(text):
    """The part of a reply that acts (METHOD.md 4.2): the text after the last `</think>`, if any.

    >>> after_thinking("<think>maybe \\\\boxed{probe A 1}</think>\\nFinal: \\\\boxed{open}")
    '\\nFinal: \\\\boxed{open}'
    >>> after_thinking("no thinking here")
    'no thinking here'
    """
    return text.rsplit("</think>", 1)[-1]


def game_action(text):
    """What a game's step() receives: `\\boxed{<content>}`, or the whole stripped reply if unboxed."""
    content = extract_boxed(text)
    return f"\\boxed{{{content}}}" if content is not None else text.strip()


def _json_or_text(value):
    try:
        return json.loads(value)
    except (ValueError, RecursionError):   # RecursionError: a reply of 100k "[" must not end the run
        return value


def _parse_call(block):
    """One <tool_call> body as {"name", "arguments"}, XML form first, then JSON; None if malformed."""
    function = next(iter(_named_blocks(block, "function")), None)
    if function:   # <function=name><parameter=k>v</parameter>...</function> (Qwen3-Coder style)
        arguments = {key.strip(): _json_or_text(value.strip("\n"))
                     for key, value in _named_blocks(function[1], "parameter")}
        return {"name": function[0].strip(), "arguments": arguments}
    call = _json_or_text(block)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"].strip():
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):   # some models encode the arguments object as a JSON string
        arguments = _json_or_text(arguments) if arguments.strip() else {}
    if arguments is None:
        arguments = {}
    return {"name": call["name"].strip(), "arguments": arguments} if isinstance(arguments, dict) else None


def parse_tool_calls(text):
    """Every well-formed `<tool_call>...</tool_call>` block, in order (METHOD.md 4.3).

    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\\\"x\\\\": 1}"}</tool_call><|im_end|>')
    [{'name': 'f', 'arguments': {'x': 1}}]
    >>> parse_tool_calls("<tool_call><function=f><parameter=x>\\n2\\n</parameter></function></tool_call>")
    [{'name': 'f', 'arguments': {'x': 2}}]
    """
    text = text.rstrip()
    if text.endswith("<|im_end|>"):
        text = text[:-len("<|im_end|>")]
    calls = (_parse_call(block.strip()) for block in tag_blocks(text, "<tool_call>", "</tool_call>"))
    return [call for call in calls if call is not None]


def parse_tool_turn(text):
    """What a tool-use reply does: ("answer", []) -- an <answer> wins over tool calls in the same
    reply --, ("tool_calls", calls), ("malformed", []) when <tool_call> text parses to nothing, or
    ("plain", []). Answers, malformed and plain replies all go to env.step(reply).

    >>> parse_tool_turn('<tool_call>{"name": "f"}</tool_call><answer>done</answer>')
    ('answer', [])
    """
    if tag_blocks(text, "<answer>", "</answer>"):
        return "answer", []
    calls = parse_tool_calls(text)
    if calls:
        return "tool_calls", calls
    return ("malformed" if "<tool_call>" in text else "plain"), []

"""agent.py's actions: the parsing rules of METHOD.md 4.1 (\\boxed{} answers, text after thinking) and 4.3 (tool
calls, a turn's kind), by hand."""
import doctest

import pytest

import agent
from sandbox import contract
from agent import after_thinking, extract_boxed, game_action, parse_tool_calls, parse_tool_turn


# ---- \boxed{} extraction (METHOD.md 4.1)
def test_docstring_examples_of_actions():
    assert doctest.testmod(agent).failed == 0


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{probe A 5}", "probe A 5"),
    ("I think \\boxed{ open }.", "open"),                                 # surrounding space stripped
    ("\\boxed{{open}}", "open"),                                          # double braces
    ("\\boxed{{{open}}}", "open"),                                        # triple braces
    ("first \\boxed{probe A 1} then \\boxed{open}", "probe A 1"),         # the first simple box wins
    ("\\boxed{f(x)={1,2}}", "f(x)={1,2}"),                                 # nested: balanced content
    ("\\boxed{a{b}} and later \\boxed{c{d}}", "c{d}"),                    # no simple box: the LAST box
    ("\\boxed{{{a}, {b}}}", "{a}, {b}"),                                   # one enclosing pair stripped
    ("\\boxed{{{x}}{y}}", "{{x}}{y}"),                                     # outer braces not a pair: kept
    ("\\boxed{{{{x}}{y}}}", "{{x}}{y}"),                                 # one pair encloses, the next not
    ("\\boxed{{{{x}}}}", "{x}"),                                         # at most two pairs stripped
    ("\\boxed{a{b}} then \\boxed{x}", "x"),                               # a simple box beats an earlier nested one
    ("no box here", None),
    ("\\boxed{}", None),                                                   # empty box = no box
    ("echoing \\boxed{} then \\boxed{open}", "open"),
    ("echoing \\boxed{ } then \\boxed{open}", "open"),                 # a blank box is no box either
    ("\\boxed{{ }} then \\boxed{{open}}", "open"),
    ("\\boxed{ }", None),
    ("\\boxed{unclosed {", None),                                          # the last box never closes
    ("\\boxed{two\nlines}", "two\nlines"),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_game_action_normalises_the_box_or_passes_the_stripped_reply():
    assert game_action("So: \\boxed{{probe B 3}}") == "\\boxed{probe B 3}"
    assert game_action("  probe B 3\n") == "probe B 3"


def test_only_the_text_after_the_last_think_acts():
    assert after_thinking("<think>a</think>b<think>c</think>d") == "d"
    assert after_thinking("<think>never closed \\boxed{x}") == "<think>never closed \\boxed{x}"
    assert game_action(after_thinking("<think>maybe \\boxed{probe A 1}</think>\nso \\boxed{open}")) == "\\boxed{open}"
    assert game_action(after_thinking("<think>maybe \\boxed{probe A 1}</think> open ")) == "open"
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert parse_tool_turn(after_thinking(f"<think>{call}?</think>Hmm.")) == ("plain", [])
    assert parse_tool_turn(after_thinking(f"<think><answer>1</answer>?</think>{call}"))[0] == "tool_calls"


# ---- tool calls (METHOD.md 4.3)
def test_tool_call_json_form():
    text = 'Let me look.\n<tool_call>\n{"name": "find_parcel", "arguments": {"recipient": "bo"}}\n</tool_call>'
    assert parse_tool_calls(text) == [{"name": "find_parcel", "arguments": {"recipient": "bo"}}]


def test_tool_call_parameters_key_and_string_encoded_arguments():
    assert parse_tool_calls('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>') == \
        [{"name": "f", "arguments": {"a": 1}}]
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}</tool_call>') == \
        [{"name": "f", "arguments": {"a": [1, 2]}}]
    assert parse_tool_calls('<tool_call>{"name": "f"}</tool_call>') == [{"name": "f", "arguments": {}}]


def test_tool_call_xml_form_decodes_json_values_when_it_can():
    text = ("<tool_call>\n<function=reroute>\n<parameter=parcel_id>\nP105\n</parameter>\n"
            "<parameter=count>\n3\n</parameter>\n<parameter=flags>\n{\"fast\": true}\n</parameter>\n"
            "</function>\n</tool_call>")
    assert parse_tool_calls(text) == [{"name": "reroute",
                                       "arguments": {"parcel_id": "P105", "count": 3, "flags": {"fast": True}}}]


def test_multiple_tool_calls_in_order_and_trailing_im_end():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
            '<tool_call><function=b><parameter=x>y</parameter></function></tool_call><|im_end|>')
    assert parse_tool_calls(text) == [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": "y"}}]


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>',          # bad JSON
    '<tool_call>{"arguments": {"a": 1}}</tool_call>',                      # no name
    '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>',           # arguments not an object
    '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>',
    '<tool_call>["f"]</tool_call>',
    '<tool_call>{"name": "f", "arguments": {}}',                           # never closed
    "no call at all",
])
def test_malformed_tool_calls_parse_to_nothing(text):
    assert parse_tool_calls(text) == []


def test_a_malformed_block_does_not_hide_a_good_one():
    text = '<tool_call>{oops}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>'
    assert parse_tool_calls(text) == [{"name": "g", "arguments": {}}]


def test_tool_turn_kinds_and_answer_precedence():
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert parse_tool_turn(call + " <answer>done</answer>") == ("answer", [])     # the answer wins
    assert parse_tool_turn(call) == ("tool_calls", [{"name": "f", "arguments": {}}])
    assert parse_tool_turn("<tool_call>{broken</tool_call>") == ("malformed", [])
    assert parse_tool_turn("<tool_call> never closed") == ("malformed", [])
    assert parse_tool_turn("I am not sure.") == ("plain", [])
    assert parse_tool_turn("<answer>unclosed") == ("plain", [])


@pytest.mark.parametrize("pattern, find", [
    (r"<tool_call>(.*?)</tool_call>", lambda t: contract.tag_blocks(t, "<tool_call>", "</tool_call>")),
    (r"<function=([^>]+)>(.*?)</function>", lambda t: agent._named_blocks(t, "function"))])
def test_tags_are_found_as_the_official_regexes_find_them(pattern, find):
    """The tags are found with str.find, linear in the reply (the regexes are quadratic when a reply
    repeats an opener that never closes); on random texts both give the same blocks."""
    import random
    import re
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "<function=", "</function>", ">", "<", "f", "\n", "x>y"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert find(text) == re.findall(pattern, text, re.DOTALL), text

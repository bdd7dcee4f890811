"""A chat template's text and the token deltas between turns: what token-in/token-out play needs of a
tokenizer (agent.py). What an environment wrote (a hint too, and its tools) is rendered `plain`, so no
text of its becomes one of the tokenizer's control tokens. Not here: what a play keeps (agent.py)."""
import functools
import json
import uuid

from sandbox.contract import control_tokens, plain, plain_messages

# Stands in for a generated turn when delta_text renders what follows it; random per process, so no
# observation (written by environment code in another process) can contain it.
TURN_PLACEHOLDER = f"<turn-{uuid.uuid4().hex}>"


def render(tokenizer, messages, tools, add_generation_prompt, thinking=False):
    """The chat template's text; what the environment wrote (a hint too, and its tools) is kept `plain`."""
    specials = control_tokens(tokenizer)
    tools = json.loads(plain(json.dumps(tools, ensure_ascii=False), specials)) if tools else tools   # in strings only
    return tokenizer.apply_chat_template(plain_messages(messages, specials), tools=tools, tokenize=False, enable_thinking=thinking,
                                         add_generation_prompt=add_generation_prompt)


def delta_text(tokenizer, messages, num_new, tools, end_texts):
    """The template text between the end-of-turn token of the last assistant message (which the
    model generated itself, as its EOS) and the next generation prompt, inclusive of the latter.

    Only the first message stands for the history: what a chat template writes after a turn depends
    on the messages after it, not on the turns before (true of the ChatML family: Qwen, SmolLM), and
    it keeps the cost of a turn flat over 25 turns. tests/test_agent.py checks the result against
    rendering the whole transcript."""
    first, new = messages[:1], messages[-num_new:]
    assert len(messages) >= num_new + 2 and messages[-num_new - 1]["role"] == "assistant"
    text = render(tokenizer, [*first, {"role": "assistant", "content": TURN_PLACEHOLDER}, *new], tools, True)
    assert text.count(TURN_PLACEHOLDER) == 1, "the chat template dropped or repeated an assistant turn"
    tail = text[text.index(TURN_PLACEHOLDER) + len(TURN_PLACEHOLDER):]
    end = max((end for end in end_texts if tail.startswith(end)), key=len, default=None)   # "<|im_end|>", not "<"
    assert end is not None, (f"the chat template ends an assistant turn with {tail[:40]!r}, which does not "
                             f"start with an EOS token {end_texts}: token-in/token-out needs it to")
    return tail[len(end):]


@functools.lru_cache(maxsize=16)
def chars_per_token(tokenizer):
    """The most characters one token of `tokenizer` stands for: its longest vocabulary entry (added
    tokens included; a byte-level entry spells one character per byte, at least as many as it decodes
    to). Text longer than this times the tokens left cannot fit them, so it is cut there before it is
    tokenised; what a play keeps is then at most its context in tokens, and in its transcript at most
    twice this many characters per token of context (what fit, and the text that no longer did)."""
    return max(map(len, tokenizer.get_vocab()))


def encode(tokenizer, texts):
    """Token ids of each text, with no special tokens added (the template wrote them)."""
    return tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

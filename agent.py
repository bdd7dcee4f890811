"""The Reasoning Agent: batched multi-turn play of many environments at once (METHOD.md 4 and 5).

    episodes = play(pool, engine, tokenizer, plays_per_env=8, params=SamplingParams(0.6, 0.95, 20),
                    seeds=[play_seeds(env.env_id, 8, salt=step) for env in pool], max_turns=25)

Every turn makes one batched `engine.generate` call for the live episodes (one per distinct token
budget, normally one), then carries each reply to
its episode's own `sandbox.EnvSandbox`. Games act through `\\boxed{...}`; environments with tools are
played with native tool calls and a final `<answer>...</answer>` (the action readers are at the end).
Token-in/token-out: an episode is ONE token sequence, never re-tokenised: the first prompt (mask 0),
each turn's generated tokens as the engine returned them (mask 1, with their log-probs, EOS included),
then the template delta of the messages that follow (mask 0), rendered after a placeholder turn. In
thinking mode (METHOD.md 4.2) every turn's prompt is the transcript rendered again, and every turn is a
training sequence of its own (`Episode.turns`). A SandboxError ends its episode with reward -1; the
FAILED plays (all but step() raising, `_end_on_error`; and a play whose messages the chat template refuses)
are marked for the loop to drop (METHOD.md 3.3).
"""
import contextlib
import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import jinja2
from tqdm import tqdm

import sandbox
from backend import chat
from sandbox.contract import read_json, tag_blocks

# The first message of a game (METHOD.md 4.1): a framing sentence, the observation, the instruction.
GAME_FRAMING = "You are playing a language game. Make valid actions to win."   # the official words
GAME_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."   # Qwen's math line
TOOL_CALL_REMINDER = ("(Your tool call could not be parsed. Write each call exactly as "
                      '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": <value>}}</tool_call> '
                      "and give the final answer as <answer>...</answer>.)")
CONTEXT_MARGIN = 64   # METHOD 4.1: stop when the context left is <= 64; per-turn budget = left - 64


@dataclass
class Episode:
    """One play of one environment: the training sequence, the outcome and the transcript."""
    env_id: str
    skill: str
    hinted: bool
    seed: int | None                      # passed to reset(); None = reset() without a seed
    tokens: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)     # 1 on tokens the model generated
    logprobs: list[float] = field(default_factory=list)    # engine log-prob where mask is 1, else 0.0
    reward: float = 0.0                   # clip(last step reward, -1, 1) if terminated, else 0; -1 on error
    status: str = "running"               # "terminated" | "truncated" | "error" once play() returns
    num_turns: int = 0                    # assistant turns generated
    error: str | None = None              # "<SandboxError kind or template>: <message>" when status == "error"
    failed: bool = False                  # a FAILED play (hang, crash, load/reset, tool or template failure): drop it
    hung: bool = False                    # its environment's load, reset or step ran past the deadline
    # The chat transcript: it ends with the last observation, or with the reply that ended the play.
    messages: list[dict] = field(default_factory=list)
    num_generated_tokens: int = 0
    # Thinking mode: per turn (tokens, loss_mask, logprobs), the re-rendered prompt then the reply;
    # tokens, loss_mask and logprobs above then stay empty.
    turns: list[tuple[list[int], list[int], list[float]]] = field(default_factory=list)

    def outcome(self):
        """This play without its token sequences and transcript: what an epoch keeps for its designer
        reward (regret.EnvOutcome), everything else the play recorded included."""
        return replace(self, tokens=[], loss_mask=[], logprobs=[], messages=[], turns=[])

    def sequences(self):
        """The training sequences, (tokens, loss_mask, logprobs) each, that have a generated token to
        train on: the one token-in/token-out sequence, or in thinking mode one per turn."""
        return [s for s in self.turns or [(self.tokens, self.loss_mask, self.logprobs)] if any(s[1])]


def drop_failed(episodes, blacklist):
    """(the scored episodes, the environments that hung). FAILED plays are dropped, not scored (METHOD
    3.3); an environment whose load, reset or step hung joins the blacklist: it is not played again this
    run, and the designer's regret_based reward flags it. A hung tool call fails only its play."""
    hung = {e.env_id for e in episodes if e.failed and e.hung}
    blacklist |= hung
    return [e for e in episodes if not e.failed], hung


def play_seeds(env_id, n, salt=0):
    """`n` reset seeds in [0, 2**31) for the plays of one environment, the same in every process
    (sha256, unlike Python's salted `hash`). Salt with the step so steps see fresh instances.

    >>> play_seeds("game_00001_000_optimization", 2, salt=3) == play_seeds("game_00001_000_optimization", 2, salt=3)
    True
    """
    digest = lambda i: hashlib.sha256(f"{salt}/{env_id}/{i}".encode()).digest()
    return [int.from_bytes(digest(i)[:4], "big") % 2**31 for i in range(n)]


def game_prompt(observation):
    """The first user message of a game: framing, `Observation: ...`, instruction (METHOD.md 4.1)."""
    return f"{GAME_FRAMING}\nObservation: {observation}\n{GAME_INSTRUCTION}"


# ---- one episode's environment side (runs in the thread pool) ----------------------------------

@dataclass
class _Play:
    """An episode in flight: its sandbox, its tools (None for a game), what the env said last."""
    episode: Episode
    code: str
    hint: str | None
    box: sandbox.EnvSandbox | None = None
    tools: list[dict] | None = None
    new_messages: list[dict] = field(default_factory=list)   # to append before the next turn
    turn_start: int = 0                   # where the current turn's generated tokens begin
    thinking: bool = False
    prompt: list[int] = field(default_factory=list)          # thinking mode: this turn's rendered prompt
    max_context: int = 0
    chars_per_token: int = 1              # chars_per_token(tokenizer)

    def context(self):
        """What the next turn is generated from."""
        return self.prompt if self.thinking else self.episode.tokens

    def room(self):
        """How many characters of environment text could still fit the context: the tokens left times
        the most characters a token spells, plus one, so that text cut to it never fits."""
        return max(0, self.max_context - len(self.context())) * self.chars_per_token + 1

    def sequence(self):
        """The training sequence the current turn is written into."""
        e = self.episode
        return e.turns[-1] if self.thinking else (e.tokens, e.loss_mask, e.logprobs)


def _end(play_, status, reward=0.0, error=None):
    play_.episode.status, play_.episode.reward, play_.episode.error = status, reward, error


def _end_on_error(play_, error, where):
    """End the episode on a SandboxError (its kinds: sandbox/__init__.py) raised `where`: in "start"
    (load or reset), "step" or a "tool" call. Reward -1 and status "error" either way. Which failures
    train is decided here alone: step() raising or breaking the contract (kind "contract" in "step") is
    the environment's own -1, scored and trained as officially (METHOD.md 1.1); every other failure (a
    load or reset that fails, a hang, a crash, memory or output beyond the limits, any failed tool call)
    marks a FAILED play, which the loop drops, neither scored nor trained (METHOD.md 3.3). `hung`: the
    environment itself (not one tool call) ran past its deadline, so spade.py blacklists it."""
    _end(play_, "error", -1.0, f"{error.kind}: {error.message}")
    play_.episode.failed = where != "step" or error.kind != "contract"
    play_.episode.hung = error.kind == "timeout" and where != "tool"


def _start(play_, timeout_s, max_turns):
    """Open the sandbox, reset it, and write the first user message (hint appended, METHOD.md 5)."""
    try:
        play_.box = sandbox.EnvSandbox(play_.code, timeout_s=timeout_s, max_turns=max_turns)
        observation, _ = play_.box.reset(seed=play_.episode.seed)
        play_.tools = play_.box.tools() or None
    except sandbox.SandboxError as e:   # load or reset failed: the play never started
        return _end_on_error(play_, e, "start")
    if play_.tools and len(json.dumps(play_.tools, separators=(",", ":"))) >= play_.room():
        return _end(play_, "truncated")   # a tool list that cannot fit the context (METHOD 4.1)
    observation = observation[:play_.room()]
    if play_.hint is not None:
        observation = f"{observation}\n\nHINT: {play_.hint}"
    # Tool use: the raw observation, tools go to the chat template (METHOD.md 4.3).
    play_.episode.messages.append(
        {"role": "user", "content": observation if play_.tools else game_prompt(observation)})


def _act(play_, text):
    """Carry one reply to the environment: append what comes back to the transcript (and to
    `new_messages`, which become the next template delta) or end the episode. Only the text after
    the last `</think>` acts; the transcript already holds the whole reply."""
    text = after_thinking(text)
    kind, calls = ("game", []) if play_.tools is None else parse_tool_turn(text)
    try:
        if kind == "tool_calls":   # well-formed calls bypass step(): they do not advance turn_count
            play_.new_messages = _tool_results(play_, calls)
        else:
            observation, reward, terminated, truncated, _ = play_.box.step(
                game_action(text) if kind == "game" else text)
            observation = observation[:play_.room()]
    except sandbox.SandboxError as e:   # FAILED or trained: _end_on_error decides
        return _end_on_error(play_, e, "tool" if kind == "tool_calls" else "step")
    if kind == "malformed":   # METHOD 4.3: keep the tokens but out of the loss, and show the format
        _, loss_mask, logprobs = play_.sequence()
        loss_mask[play_.turn_start:] = [0] * (len(loss_mask) - play_.turn_start)
        logprobs[play_.turn_start:] = [0.0] * (len(logprobs) - play_.turn_start)
        observation = f"{observation}\n\n{TOOL_CALL_REMINDER}"
    if kind != "tool_calls":
        play_.new_messages = [{"role": "user", "content": observation}]
        if terminated:   # only the final reward of a terminated episode counts (METHOD.md 1.1, 4.1)
            _end(play_, "terminated", max(-1.0, min(1.0, reward)))
        elif truncated:
            _end(play_, "truncated")
    play_.episode.messages += play_.new_messages


def _tool_results(play_, calls):
    """A tool message per call, in order, until their text can no longer fit the context: the calls
    after that are neither run nor kept (each message spells at least one character besides its result)."""
    room, messages = play_.room(), []
    for call in calls:
        if room <= 0:
            break
        result = play_.box.call_tool(call["name"], call["arguments"])[:room]
        messages.append({"role": "tool", "name": call["name"], "content": result})
        room -= len(result) + 1
    return messages


def _record(play_, completion, text):
    """Append a generated turn: its tokens exactly as generated (mask 1, engine log-probs); in thinking
    mode to a new sequence that starts with the turn's prompt (mask 0)."""
    episode = play_.episode
    if play_.thinking:
        episode.turns.append(([], [], []))
        _extend(play_.sequence(), play_.prompt, 0)
    play_.turn_start = len(play_.sequence()[0])
    _extend(play_.sequence(), list(completion.token_ids), 1, list(completion.logprobs))
    episode.num_turns += 1
    episode.num_generated_tokens += len(completion.token_ids)
    episode.messages.append({"role": "assistant", "content": text})


# ---- token bookkeeping ---------------------------------------------------------------------------

def _extend(sequence, token_ids, mask, logprobs=None):
    """Append to a training sequence (tokens, loss_mask, logprobs), in place."""
    tokens, loss_mask, token_logprobs = sequence
    tokens += token_ids
    loss_mask += [mask] * len(token_ids)
    token_logprobs += logprobs if logprobs is not None else [0.0] * len(token_ids)


def _generate(engine, tokenizer, live, params, max_new_tokens, timings):
    """One turn of every live episode, recorded; returns (play, reply text) for the replies that
    ended on EOS and truncates the others (METHOD 4.1). Each episode's budget is
    min(max_new_tokens, context left - 64); one engine call per distinct budget, normally one."""
    budgets = [min(max_new_tokens, p.max_context - len(p.context()) - CONTEXT_MARGIN) for p in live]
    completions = [None] * len(live)
    for budget in sorted(set(budgets), reverse=True):
        index = [i for i, b in enumerate(budgets) if b == budget]
        tick = time.perf_counter()
        batch = engine.generate([live[i].context() for i in index],
                                replace(params, max_new_tokens=budget))
        timings["generate_s"] += time.perf_counter() - tick
        timings["num_generate_calls"] += 1
        assert len(batch) == len(index), f"engine returned {len(batch)} completions for {len(index)} prompts"
        for i, completion in zip(index, batch):
            assert len(completion.token_ids) == len(completion.logprobs) <= budget, "bad completion lengths"
            completions[i] = completion
    stopped = [c.finish_reason == "stop" for c in completions]
    assert all(c.token_ids[-1] in engine.eos_token_ids for c, stop in zip(completions, stopped) if stop), \
        "a completion that finished by 'stop' must end with an EOS token"
    texts = tokenizer.batch_decode([c.token_ids[:-1] if stop else c.token_ids for c, stop in zip(completions, stopped)],
                                   skip_special_tokens=False, clean_up_tokenization_spaces=False)
    for p, completion, stop, text in zip(live, completions, stopped, texts):
        _record(p, completion, text)
        if not stop:   # hit its token budget without EOS
            _end(p, "truncated")
    return [(p, text) for p, stop, text in zip(live, stopped, texts) if stop]


def _add_prompts(tokenizer, live, end_texts=None):
    """What each live episode is shown before its next turn, tokenised in one batch. Mask 0: the
    environment and the template wrote these tokens, not the policy. With `end_texts`, the template delta
    of its new messages, appended to its sequence; else its whole transcript rendered with the generation
    prompt: the first prompt of every episode, and in thinking mode every turn's (the template drops the
    thinking of earlier turns), which replaces the last. What would not fit in max_context ends its
    episode truncated instead and is kept nowhere (METHOD 4.1): no sequence grows past it."""
    texts = {id(p): _rendered(tokenizer, p, end_texts) for p in live}
    live = [p for p in live if texts[id(p)] is not None]
    for p, token_ids in zip(live, chat.encode(tokenizer, [texts[id(p)] for p in live])):
        if (0 if p.thinking else len(p.episode.tokens)) + len(token_ids) > p.max_context:
            _end(p, "truncated")
        elif p.thinking:
            p.prompt = token_ids
        else:
            _extend(p.sequence(), token_ids, 0)


def _rendered(tokenizer, p, end_texts):
    """`_add_prompts`' text of one play; None where the chat template refuses its messages, a FAILED play (a
    template's raise_exception on what the environment wrote: Qwen3.5's "No user query found" when every user
    message reads as a tool response, say), which ends it and not the run."""
    try:
        if end_texts:
            return chat.delta_text(tokenizer, p.episode.messages, len(p.new_messages), p.tools, end_texts)
        return chat.render(tokenizer, p.episode.messages, p.tools, True, p.thinking)
    except jinja2.TemplateError as e:
        if type(e) is not jinja2.TemplateError:   # a broken template (its syntax, an undefined name): the run's
            raise
        _end(p, "error", -1.0, f"template: the chat template refused the play's messages ({e})")
        p.episode.failed = True


# ---- the batched loop -----------------------------------------------------------------------------

def play(envs, engine, tokenizer, plays_per_env, hints=None, *, params, max_turns, seeds=None,
         max_context=32768, max_new_tokens=8192, timeout_s=30.0, stats=None, thinking=False, progress=None):
    """Play every environment `plays_per_env` times; return the episodes, env-major (envs[0]'s plays first).

    envs: objects with .env_id, .skill, .code. hints: None (unhinted) or one hint string per env.
    seeds: None or, per env, a list of `plays_per_env` reset seeds (see `play_seeds`).
    max_turns: the agent's turn cap, also the cap on each environment's own max_turns (METHOD.md 1.1).
    params: engine.SamplingParams (its max_new_tokens is replaced per turn; a set seed advances by
    one per turn so turns do not replay one random stream). stats: an optional dict that receives
    wall_s, generate_s, env_s, num_generate_calls, num_episodes, num_generated_tokens.
    thinking: METHOD.md 4.2's mode (module docstring): a prompt rendered per turn, a sequence per turn.
    progress: a label for a bar of finished plays (`ticking_bar`: on a terminal only), updated every turn. Text
    an environment returns that cannot fit max_context is cut before it is tokenised (chars_per_token),
    and a reply's tool calls stop there. Never raises for environment failures; engine bugs do raise.
    """
    assert hints is None or (len(hints) == len(envs) and all(isinstance(h, str) for h in hints)), \
        "hints must be None or one string per environment"
    assert seeds is None or (len(seeds) == len(envs) and all(len(s) == plays_per_env for s in seeds)), \
        "seeds must be None or, per environment, a list of plays_per_env seeds"
    started = time.perf_counter()
    timings = {"generate_s": 0.0, "env_s": 0.0, "num_generate_calls": 0}
    plays = [_Play(Episode(env.env_id, env.skill, hints is not None, seeds[i][k] if seeds else None), env.code,
                   hints[i] if hints else None, thinking=thinking, max_context=max_context,
                   chars_per_token=chat.chars_per_token(tokenizer))
             for i, env in enumerate(envs) for k in range(plays_per_env)]
    # Threads mostly wait on sandbox processes, so more of them than cores helps (2 cores: 8 > 2).
    pool = ThreadPoolExecutor(min(32, 4 * (os.cpu_count() or 1)))
    try:
        with ticking_bar(len(plays), progress, unit="play") as bar:
            _in_pool(pool, timings, _start, [(p, timeout_s, max_turns) for p in plays])
            _add_prompts(tokenizer, _running(plays))
            _turns(plays, engine, tokenizer, params, pool, bar, timings, max_turns, max_new_tokens, thinking)
            bar.update(len(plays) - bar.n)
    finally:   # close every sandbox, also when the engine or the tokenizer raised
        for p in plays:
            if p.box is not None:
                pool.submit(p.box.close)
        pool.shutdown(wait=True)
    episodes = [p.episode for p in plays]
    assert all(e.status != "running" for e in episodes)
    if stats is not None:
        stats.update(timings, wall_s=time.perf_counter() - started, num_episodes=len(episodes),
                     num_generated_tokens=sum(e.num_generated_tokens for e in episodes))
    return episodes


def _turns(plays, engine, tokenizer, params, pool, bar, timings, max_turns, max_new_tokens, thinking):
    """Every turn of every live play: generate the replies in one batch, carry them to the sandboxes."""
    end_texts = None if thinking else sorted({tokenizer.decode([token_id]) for token_id in engine.eos_token_ids})
    for turn in range(max_turns):
        for p in _running(plays):   # METHOD 4.1: no room left for a useful turn
            if p.max_context - len(p.context()) <= CONTEXT_MARGIN:
                _end(p, "truncated")
        for p in plays:   # close finished episodes' sandboxes in the background, during generate
            if p.episode.status != "running" and p.box is not None:
                pool.submit(p.box.close)
                p.box = None
        bar.update(len(plays) - len(_running(plays)) - bar.n)
        if not _running(plays):
            return
        turn_params = params if params.seed is None else replace(params, seed=params.seed + turn)
        replies = _generate(engine, tokenizer, _running(plays), turn_params, max_new_tokens, timings)
        _in_pool(pool, timings, _act, replies)
        if turn == max_turns - 1:   # the agent's turn cap (METHOD 4.1: TIMEOUT -> truncated)
            for p in _running(plays):
                _end(p, "truncated")
        _add_prompts(tokenizer, _running(plays), end_texts)   # thinking: a prompt rendered anew


@contextlib.contextmanager
def ticking_bar(total, label, unit):
    """A tqdm bar (on a terminal, where `label` is given) redrawn every second, so that one long generate
    call shows the time it has taken so far."""
    bar = tqdm(total=total, desc=label, unit=unit, leave=False, disable=None if label else True)
    stop = threading.Event()

    def tick():
        while not stop.wait(1.0):
            bar.refresh()
    if not bar.disable:
        threading.Thread(target=tick, daemon=True).start()
    try:
        yield bar
    finally:
        stop.set()
        bar.close()


def _running(plays):
    return [p for p in plays if p.episode.status == "running"]


def _in_pool(pool, timings, function, args):
    """Sandbox calls wait on child processes: overlap them in the thread pool."""
    tick = time.perf_counter()
    list(pool.map(function, *zip(*args)))   # no args: no call
    timings["env_s"] += time.perf_counter() - tick


# ---- the agent's actions, read from its replies (METHOD.md 4.1-4.3) ----------------------------------

# The simple forms \boxed{x}, \boxed{{x}}, \boxed{{{x}}} with no braces inside x, tried in this order over
# the whole reply, as officially: "\boxed{{a}} then \boxed{b}" acts "b".
_SIMPLE_BOXED = [re.compile(r"\\boxed\{([^{}]+)\}"), re.compile(r"\\boxed\{\{([^{}]+)\}\}"),
                 re.compile(r"\\boxed\{\{\{([^{}]+)\}\}\}")]
_BRACE = re.compile(r"[{}]")


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


def json_or_text(value):
    """`value` read as JSON, or as it is when it is not JSON."""
    try:
        return read_json(value)
    except ValueError:   # not JSON, or nested too deep (a reply of 100k "[" must not end the run)
        return value


def _parse_call(block):
    """One <tool_call> body as {"name", "arguments"}, XML form first, then JSON; None if malformed."""
    function = next(iter(_named_blocks(block, "function")), None)
    if function:   # <function=name><parameter=k>v</parameter>...</function> (Qwen3-Coder style)
        arguments = {key.strip(): json_or_text(value.strip("\n"))
                     for key, value in _named_blocks(function[1], "parameter")}
        return {"name": function[0].strip(), "arguments": arguments}
    call = json_or_text(block)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"].strip():
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):   # some models encode the arguments object as a JSON string
        arguments = json_or_text(arguments) if arguments.strip() else {}
    arguments = {} if arguments is None else arguments   # "arguments": null
    return {"name": call["name"].strip(), "arguments": arguments} if isinstance(arguments, dict) else None


def parse_tool_calls(text):
    """Every well-formed `<tool_call>...</tool_call>` block, in order (METHOD.md 4.3).

    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\\\"x\\\\": 1}"}</tool_call><|im_end|>')
    [{'name': 'f', 'arguments': {'x': 1}}]
    >>> parse_tool_calls("<tool_call><function=f><parameter=x>\\n2\\n</parameter></function></tool_call>")
    [{'name': 'f', 'arguments': {'x': 2}}]
    """
    text = text.rstrip().removesuffix("<|im_end|>")
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

"""The Environment Designer: the corpus, the environment memory, the prompts, design(), hints (METHOD.md 2, 3, 5, 8, 9).

The designer is the shared policy in its second role: it reads a prompt (a skill, a difficulty, a corpus
document and a few past environments from memory) and writes a whole environment as Python.

    slots = dict(enumerate(slots_for_epoch(list(GAME_SKILLS), epoch=0, k=3, num_envs=24)))
    envs, samples, stats = design(engine, tokenizer, slots, setting=spade.SETTINGS["games"], corpus=corpus,
                                  memory=memory, params=params, max_turns=25, seed=0, rollout_id=0)
    hints = write_hints(engine, tokenizer, envs, spade.SETTINGS["games"], hint_params)   # T 0.3, top_p 0.9

A `Setting` is everything that makes games games and tool use tool use. Each attempt draws its document,
ideas and memory sample from a generator of its own, seeded from (seed, rollout, slot, attempt), so an
attempt is the same whichever process makes it; up to 5 validated attempts per slot (gate.py), failures
never trained; the sample is the prompt (mask 0) and the response (mask 1, its log-probs).
"""
import importlib.util
import inspect
import json
import math
import os
import random
import re
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import prompts
from agent import after_thinking, extract_boxed, json_or_text, ticking_bar
from envs import GAME_SKILLS, TOOL_SKILLS, Environment, skill_slug
from gate import validate_env
from backend import chat
from sandbox.contract import clean_text, printable, read_json   # clean_text: lone surrogates as U+FFFD

SNIPPET_CHARS = 2000                  # METHOD 8: memory keeps the first 2000 characters of the code


@dataclass(frozen=True)
class Setting:
    """One setting of the paper (games, tool use) as one record; spade.SETTINGS holds them by name."""
    skills: dict[str, str]           # skill -> the one-line description the prompts render (METHOD 2.2)
    designer_messages: Callable      # (skill, document, memory block, rng, *, max_turns) -> chat (difficulty: medium)
    hint_system: str                 # the hint writer's system message (METHOD 5)
    audit: bool = False              # the policy's solvability audit of what passes the gate (METHOD 3.1 step 4)
    compact_filter: bool = False     # truncated plays are not trained (METHOD 4.3)
    values: dict = field(default_factory=dict)   # its column of METHOD 7.3: knobs and spade.Unflagged values
    seeds: str = "envs/"             # the pool whose environments of these skills seed memory and top up
    embedded_skills: str = ""        # the two skills of the embedded preset (spade.EMBEDDED)
    embedded_seeds: str = ""         # the embedded preset's seed pool ("": seeds)


# --- Environment memory (METHOD 8) ---------------------------------------------------------------

RECORD_KEYS = ("game_file", "skill", "code_snippet", "actor_win_rate", "regret", "rollout_id", "metadata")


def render_memory(positives: list[dict], negative: dict | None) -> str:
    """The <REFERENCE_ENVIRONMENTS> block (METHOD 2.2) appended to the designer's user message."""
    lines = []
    if positives:
        lines += ["<REFERENCE_ENVIRONMENTS>", prompts.MEMORY_INTRO]
        for k, r in enumerate(positives, 1):
            lines += [f"### Example {k} (skill: {r['skill']}, win_rate: {r['actor_win_rate']:.2f}, "
                      f"regret: {r['regret']:.2f})", "```python", r["code_snippet"], "```"]
        lines.append("</REFERENCE_ENVIRONMENTS>")
    if negative is not None:
        kind = "too easy" if negative["actor_win_rate"] > 0.9 else "too hard"
        lines += [prompts.MEMORY_AVOID,
                  f"- {kind} (win_rate={negative['actor_win_rate']:.2f}): class {negative['game_file']}"]
    return "\n".join(lines)


class EnvMemory:
    """FIFO of the last `capacity` environments with their win rate and regret, saved as a JSON list."""

    def __init__(self, path=None, capacity: int = 200):
        """The records of `path` where it exists; a corrupt file is moved aside (never overwritten) and
        the memory starts empty."""
        self.path, self.capacity, self.records = (Path(path) if path else None), capacity, []
        if self.path is not None and self.path.exists():
            try:
                self.records = self.checked(read_json(self.path.read_bytes()))[-capacity:]
            except (ValueError, OSError) as e:   # not JSON, not UTF-8, nested too deep; a directory
                base = f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
                aside, copies = self.path.with_name(base), 1
                while aside.exists():   # one an earlier start moved aside this second
                    copies += 1
                    aside = self.path.with_name(f"{base}~{copies}")
                os.replace(self.path, aside)
                print(f"memory: {self.path} is corrupt ({printable(str(e)[:200])}); moved it to {aside}, "
                      "starting empty")

    @staticmethod
    def checked(records) -> list[dict]:
        """`records` as the memory keeps them, or ValueError: a list of RECORD_KEYS records whose texts are
        strings (lone surrogates replaced, the snippet capped) and whose win rate and regret are finite."""
        texts, numbers = ("game_file", "skill", "code_snippet"), ("actor_win_rate", "regret")

        def good(r):
            return (isinstance(r, dict) and set(RECORD_KEYS) <= set(r) and all(isinstance(r[k], str) for k in texts)
                    and all(type(r[k]) in (int, float) and math.isfinite(r[k]) for k in numbers))
        bad = [r for r in records if not good(r)] if isinstance(records, list) else [records]
        if bad:
            raise ValueError(f"expected a JSON list of records with keys {RECORD_KEYS}, not {str(bad[0])[:100]}")
        return [{**r, "game_file": clean_text(r["game_file"]), "skill": clean_text(r["skill"]),
                 "code_snippet": clean_text(r["code_snippet"][:SNIPPET_CHARS])} for r in records]

    def add(self, env_id: str, skill: str, code: str, actor_win_rate: float, regret: float,
            rollout_id: int, metadata: dict | None = None):
        self.records.append({"game_file": env_id, "skill": skill, "code_snippet": code[:SNIPPET_CHARS],
                             "actor_win_rate": float(actor_win_rate), "regret": float(regret),
                             "rollout_id": int(rollout_id), "metadata": metadata or {}})
        del self.records[:-self.capacity]            # FIFO: the oldest records go first

    def seed_from(self, environments):
        """Seed a fresh memory with hand-written environments at neutral stats: win rate 0.5, regret 0.0,
        rollout id -1 (METHOD.md 8)."""
        for env in environments:
            self.add(env.env_id, env.skill, env.code, 0.5, 0.0, -1, {"source": "seed"})

    def save(self):
        """Atomic rewrite: a temp file in the same directory, then os.replace (never half a file)."""
        assert self.path is not None, "this memory has no path to save to"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.records, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise

    def retrieve(self, skill: str, rng: random.Random, n: int = 2) -> tuple[list[dict], dict | None]:
        """Same-skill records only. Positives: win rate in [0.15, 0.85], the max(3n, 10) of highest
        regret, n sampled without replacement (shown in the order drawn). Negative: one record with win
        rate > 0.9 (too easy) or < 0.1 (too hard), or None."""
        same = [r for r in self.records if r["skill"] == skill]
        band = sorted((r for r in same if 0.15 <= r["actor_win_rate"] <= 0.85),
                      key=lambda r: r["regret"], reverse=True)[:max(3 * n, 10)]
        positives = rng.sample(band, min(n, len(band)))
        extremes = [r for r in same if r["actor_win_rate"] > 0.9 or r["actor_win_rate"] < 0.1]
        return positives, (rng.choice(extremes) if extremes else None)

    def render(self, skill: str, rng: random.Random) -> str:
        """retrieve() then render_memory(): the block for one designer call ('' when nothing fits)."""
        return render_memory(*self.retrieve(skill, rng))


# --- Skill schedule (METHOD 2.2) -----------------------------------------------------------------

def skills_for_epoch(skills: list[str], epoch: int, k: int) -> list[str]:
    """Round-robin window of k skills, starting at (epoch * k) mod len(skills).

    >>> s = ["M", "L", "S", "P", "O", "C"]
    >>> skills_for_epoch(s, 0, 3), skills_for_epoch(s, 1, 3), skills_for_epoch(s, 2, 3)
    (['M', 'L', 'S'], ['P', 'O', 'C'], ['M', 'L', 'S'])
    """
    start = (epoch * k) % len(skills)
    return [skills[(start + j) % len(skills)] for j in range(k)]


def slots_for_epoch(skills: list[str], epoch: int, k: int, num_envs: int) -> list[str]:
    """The skill of each of the epoch's num_envs designer calls: window[i % k] (8 per skill for 24/3).

    >>> slots_for_epoch(["M", "L", "S", "P"], 1, 2, 5)
    ['S', 'P', 'S', 'P', 'S']
    """
    window = skills_for_epoch(skills, epoch, k)
    return [window[i % k] for i in range(num_envs)]


# --- Prompts (METHOD 1.2, 1.3, 2; texts in prompts/) ----------------------------------------------

def game_messages(skill: str, document: str | None, memory_block: str, rng: random.Random, *,
                  max_turns: int, difficulty: str = "medium") -> list[dict]:
    """Games: system persona + user message, (A) grounded in a document, or (B) without one."""
    description = GAME_SKILLS[skill]
    if document is not None:
        footer = prompts.GAME_FOOTER.format(skill=skill, description=description, difficulty=difficulty,
                                            min_steps=2 if difficulty == "easy" else 3)
        parts = [prompts.CORPUS_GAME_HEADER, f"<REFERENCE_DOCUMENT>\n{document}\n</REFERENCE_DOCUMENT>",
                 prompts.CORPUS_GAME_CONTRACT, footer]
    else:  # the turn budget sentence stands in for the difficulty here, as officially (METHOD 2.2)
        ideas = rng.sample(prompts.GAME_SKILL_IDEAS[skill], 3)
        parts = [prompts.NO_CORPUS_GAME_CONTRACT.format(
            skill=skill, description=description, ideas="\n".join(f"- {i}" for i in ideas),
            max_turns=max_turns, min_turns=max_turns // 2, max_good_turns=max_turns * 3 // 4,
            reference_game=prompts.REFERENCE_GAME)]
    user = "\n\n".join(parts + ([memory_block] if memory_block else []))
    return [{"role": "system", "content": prompts.GAME_DESIGNER_SYSTEM}, {"role": "user", "content": user}]


def tool_messages(skill: str, snippet: str | None, memory_block: str, rng: random.Random, *,
                  max_turns: int, difficulty: str = "medium") -> list[dict]:
    """Tool use: one user message (no system message, METHOD 2.1) with a domain and variant drawn by the
    attempt's rng.
    The turn cap is not in its text (the base class's max_turns=10 is, as officially)."""
    domain, variant = rng.choice(prompts.TOOL_DOMAINS), rng.choice(prompts.TOOL_VARIANTS)
    ideas = "\n".join(f"- {t}" for t in prompts.TOOL_SKILL_TASKS[skill])
    parts = [prompts.TOOL_TASK.format(domain=domain)]
    if snippet is not None:
        parts += [prompts.TOOL_SNIPPET_NOTE, f"<REFERENCE_SNIPPET>\n{snippet}\n</REFERENCE_SNIPPET>"]
    parts += [prompts.TOOL_SKILL.format(skill=skill, description=TOOL_SKILLS[skill], ideas=ideas,
                                        variant=variant, variant_text=prompts.TOOL_VARIANT_TEXT[variant],
                                        difficulty=difficulty), prompts.TOOL_CONTRACT]
    return [{"role": "user", "content": "\n\n".join(parts + ([memory_block] if memory_block else []))}]


def encode_chat(tokenizer, messages: list[dict]) -> tuple[str, list[int]]:
    """The chat-templated prompt text and its token ids, ready for generation (non-thinking). What the
    messages quote (a document, memory, code) is kept `plain`."""
    text = chat.render(tokenizer, messages, None, True)
    return text, tokenizer.encode(text, add_special_tokens=False)


# --- design(): generate, validate, retry (METHOD 3.1, 3.4) ---------------------------------------

@dataclass
class DesignerSample:
    """One trained designer generation: prompt tokens (mask 0) + response tokens (mask 1)."""
    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]        # the engine's log-prob of each response token; 0.0 on the prompt
    env_id: str
    skill: str
    response_text: str
    prompt_text: str = ""
    corpus_doc_id: str | None = None
    attempt: int = 1             # which attempt of its slot produced it (1 = first try)
    code: str = ""               # the environment as the gate admitted it (from the response, repaired)


@dataclass
class _Attempt:
    slot: int
    skill: str
    prompt_text: str
    prompt_tokens: list[int]
    corpus_doc_id: str | None
    attempt: int
    completion: object = None     # engine.Completion
    response_text: str = ""


def _prepare(slot, skill, attempt, setting, corpus, memory, seed, rollout_id, max_turns, tokenizer) -> _Attempt:
    """A fresh prompt for one attempt: a new corpus document and a new memory sample. Its randomness
    is its own, from (seed, rollout, slot, attempt), so an attempt is the same whichever process makes it."""
    rng = random.Random(f"{seed}:{rollout_id}:{slot}:{attempt}")
    doc_id, document = corpus.sample(rng) if corpus is not None else (None, None)
    block = memory.render(skill, rng) if memory is not None else ""
    messages = setting.designer_messages(skill, document, block, rng, max_turns=max_turns)   # difficulty: medium
    return _Attempt(slot, skill, *encode_chat(tokenizer, messages), doc_id, attempt)   # prompt text and tokens


def design(engine, tokenizer, slots: dict[int, str], *, setting: Setting, corpus, memory, params, max_turns: int,
           seed: int, rollout_id: int, max_attempts: int = 5, audit_params=None, progress=None):
    """Write one environment per slot (slot index -> skill), each with up to `max_attempts` validated tries.

    Every round batches the attempts of all still-empty slots into one engine.generate call. Returns
    (environments, designer samples, stats); a slot whose attempts all fail is simply missing; stats
    hold each rejection ("failures"). `max_turns`: the agent's turn cap, which the gate constructs with and
    the no-corpus game prompt states (the corpus prompt asks for 12, tool use for 10). audit_params: the sampling parameters of the solvability audit, where the
    setting audits what passes the gate (METHOD 3.1 step 4). progress: a label for a bar of the valid
    environments, redrawn every second (on a terminal only).
    """
    assert set(slots.values()) <= set(setting.skills), f"unknown skills: {set(slots.values()) - set(setting.skills)}"
    accepted: dict[int, tuple[_Attempt, str]] = {}   # slot -> its attempt and the code the gate admitted
    failures = []
    with ticking_bar(len(slots), progress, unit="env") as bar:
        for attempt in range(1, max_attempts + 1):
            batch = [_prepare(i, slots[i], attempt, setting, corpus, memory, seed, rollout_id, max_turns, tokenizer)
                     for i in slots if i not in accepted]
            if not batch:
                break
            bar.set_postfix_str(f"attempt {attempt}/{max_attempts}")
            validations = _validated(engine, tokenizer, batch, params, max_turns,
                                     audit_params if setting.audit else None)
            for a, v in zip(batch, validations):
                if v.ok:
                    accepted[a.slot] = a, v.code
                    bar.update()
                    continue
                failures.append({"slot": a.slot, "skill": a.skill, "attempt": attempt, "stage": v.stage,
                                 "error": " ".join((v.error or "").split())[:300],
                                 "finish_reason": a.completion.finish_reason, "response": a.response_text[:2000]})
    samples = [_designer_sample(*accepted[slot], rollout_id) for slot in sorted(accepted)]
    envs = [Environment(s.env_id, s.skill, s.code) for s in samples]
    return envs, samples, {"num_slots": len(slots), "num_valid": len(envs), "num_attempts": len(failures) + len(envs),
                           "num_failed_by_stage": dict(Counter(f["stage"] for f in failures)), "failures": failures}


def _generate(engine, tokenizer, prompt_tokens, params):
    """(completions, their decoded texts) of one batched generate call."""
    completions = engine.generate(prompt_tokens, params) if prompt_tokens else []
    assert len(completions) == len(prompt_tokens), "the engine must answer every prompt"
    return completions, [tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]


def _validated(engine, tokenizer, batch, params, max_turns, audit_params):
    """One round: generate every attempt's response in one call, then the gate's verdict on each (and the
    audit's, with `audit_params`)."""
    completions, texts = _generate(engine, tokenizer, [a.prompt_tokens for a in batch], params)
    for a, completion, text in zip(batch, completions, texts):
        a.completion = completion
        a.response_text = text
    # Validation forks isolated children; a few (4) at a time hide each other's start-up latency.
    with ThreadPoolExecutor(max_workers=4) as pool:
        validations = list(pool.map(lambda a: validate_env(a.response_text, max_turns=max_turns), batch))
    return audited(engine, tokenizer, validations, audit_params) if audit_params is not None else validations


def rejection_line(failure: dict, max_attempts: int) -> str:
    return (f"designer: slot {failure['slot']} ({failure['skill']}) attempt {failure['attempt']}/{max_attempts} "
            f"rejected at {failure['stage']}: {failure['error'][:160]}")


def audited(engine, tokenizer, validations, params):
    """The list `validations`, where the solvability audit rejects a passed one, replaced by its rejection
    (METHOD 3.1 step 4): the policy reads each code and gives a verdict in one batched, untrained generate call."""
    passed = [i for i, v in enumerate(validations) if v.ok]
    chats = [[{"role": "user", "content": prompts.AUDIT_TOOL_USER.format(code=validations[i].code)}] for i in passed]
    prompts_ = [encode_chat(tokenizer, messages)[1] for messages in chats]
    for i, reply in zip(passed, _generate(engine, tokenizer, prompts_, params)[1]):
        if not accepts(reply):
            tail = " ".join(reply.split())[-240:]
            validations[i] = replace(validations[i], ok=False, stage="audit",
                                     error=printable(f"the solvability audit says no: ...{tail}"))   # model text
    return validations


def accepts(reply: str) -> bool:
    """The audit's verdict: its first box, yes/y/true accepts; a reply with no box accepts too.

    >>> accepts("criterion 2 is unreachable: \\\\boxed{no}"), accepts("\\\\boxed{ Yes }")
    (False, True)
    >>> accepts(""), accepts("\\\\boxed{maybe}")
    (True, False)
    """
    verdict = extract_boxed(after_thinking(reply))
    return verdict is None or verdict.strip().lower() in ("yes", "y", "true")


def _designer_sample(a: _Attempt, code: str, rollout_id: int) -> DesignerSample:
    """Exactly what the model saw and wrote: only the response tokens are trained (mask 1)."""
    response, logprobs = list(a.completion.token_ids), list(a.completion.logprobs)
    assert len(response) == len(logprobs), "one log-prob per generated token"
    return DesignerSample(tokens=a.prompt_tokens + response,
                          loss_mask=[0] * len(a.prompt_tokens) + [1] * len(response),
                          logprobs=[0.0] * len(a.prompt_tokens) + logprobs,
                          env_id=f"game_{rollout_id:05d}_{a.slot:03d}_{skill_slug(a.skill)}",   # official file naming
                          skill=a.skill, response_text=a.response_text, prompt_text=a.prompt_text,
                          corpus_doc_id=a.corpus_doc_id, attempt=a.attempt, code=code)


# --- Hints (METHOD 5, mode "self") ---------------------------------------------------------------

def hint_messages(code: str, setting: Setting) -> list[dict]:
    return [{"role": "system", "content": setting.hint_system}, {"role": "user", "content": prompts.HINT_USER.format(code=code)}]


def parse_hint(text: str) -> str:
    """The hint in a response: a ```json block's "hint" value if there is one, else the stripped text
    without its thinking (<think> blocks, and what comes before a last </think>).

    >>> parse_hint('<think>x=7</think> Probe the dials one by one.')
    'Probe the dials one by one.'
    >>> parse_hint('Here:\\n```json\\n{"hint": "Halve the range."}\\n```')
    'Halve the range.'
    """
    text = _without_thinking(after_thinking(text)).strip()
    value = json_or_text(_json_block(text) or "null")   # no block, or an empty one: null
    if isinstance(value, dict) and isinstance(value.get("hint"), str):
        return clean_text(value["hint"]).strip()   # JSON's "\ud800" is no text a tokenizer takes
    return text


# The two parts of a hint are found with str.find, linear in the reply, as re.sub(r"<think>.*?(</think>|$)",
# "", text) and re.search(r"```json\s*\n(.*?)```", text) find them (DOTALL; tests/test_trust.py checks both):
# the second regex is quadratic in a run of newlines after an opener that never closes (a second for 10 kB).
def _without_thinking(text):
    """`text` without its <think> blocks, an unclosed one running to the end."""
    kept, at = [], 0
    while (start := text.find("<think>", at)) >= 0:
        kept.append(text[at:start])
        end = text.find("</think>", start + len("<think>"))
        at = len(text) if end < 0 else end + len("</think>")
    return "".join(kept) + text[at:]


_SPACE = re.compile(r"\s*")


def _json_block(text):
    """The body of the first ```json block (the opener, whitespace through a newline, the body up to ```), or None."""
    at = 0
    while (start := text.find("```json", at)) >= 0:
        at = start + len("```json")
        newline = text.rfind("\n", at, _SPACE.match(text, at).end())
        if newline >= 0:
            end = text.find("```", newline + 1)
            return text[newline + 1:end] if end >= 0 else None
    return None


def write_hints(engine, tokenizer, envs, setting: Setting, params) -> list[str]:
    """One hint per environment, written by the policy from the environment's code, in one batched
    generate call (METHOD 5: T 0.3, top_p 0.9 in `params`). Not trained. May be empty."""
    prompt_tokens = [encode_chat(tokenizer, hint_messages(env.code, setting))[1] for env in envs]
    return [parse_hint(text) for text in _generate(engine, tokenizer, prompt_tokens, params)[1]]


# --- The grounding corpus (METHOD 9) -------------------------------------------------------------

BUILTIN_MODULES = ("math cmath statistics fractions decimal heapq bisect graphlib itertools functools "
                   "operator random collections string textwrap difflib calendar datetime re json "
                   "array queue sched zlib").split()
# English runs about 6 characters a word with its space; 8 leaves such text to the word count.
CHARS_PER_WORD = 8


def truncate_words(text: str, max_words: int) -> str:
    """Keep the first `max_words` whitespace-separated words (joined by single spaces), and at most
    CHARS_PER_WORD characters a word, and mark it: text without spaces (Chinese, minified JSON) is one
    "word" to split(), and would otherwise reach the prompt whole.

    >>> truncate_words("a  b\\nc d", 3)
    'a b c\\n[Document truncated at ~3 words]'
    >>> truncate_words("a  b", 3)              # short documents are kept verbatim
    'a  b'
    >>> truncate_words("x" * 100, 3)
    'xxxxxxxxxxxxxxxxxxxxxxxx\\n[Document truncated at ~3 words]'
    """
    words = text.split()
    kept = " ".join(words[:max_words])
    if len(words) <= max_words and len(kept) <= max_words * CHARS_PER_WORD:
        return text
    return kept[:max_words * CHARS_PER_WORD] + f"\n[Document truncated at ~{max_words} words]"


@dataclass
class Corpus:
    """Grounding documents, one drawn per designer attempt."""
    docs: list[str]
    doc_ids: list[str]
    num_skipped: int = 0                  # lines of the file that were blank, not JSON or had no text

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """(doc_id, text) drawn uniformly with `rng` (the attempt's): with replacement across calls."""
        i = rng.randrange(len(self.docs))
        return self.doc_ids[i], self.docs[i]


def _corpus_document(line: str, max_words: int, default_id: str) -> tuple[str, str] | None:
    """(doc_id, text) of a corpus line, or None: its text is the first of `orig_doc` and `text` that is a
    non-blank string, truncated to `max_words`; its id the first non-empty of `id` and `doc_id`, else
    `default_id`."""
    try:
        record = read_json(line)
    except ValueError:   # not JSON, an integer of 5,000 digits, nested too deep
        return None
    if not isinstance(record, dict):
        return None
    text = next((v for v in (record.get("orig_doc"), record.get("text")) if isinstance(v, str) and v.strip()), None)
    doc_id = next((v for v in (record.get("id"), record.get("doc_id")) if v is not None and v != ""), default_id)
    return None if text is None else (clean_text(str(doc_id)), clean_text(truncate_words(text, max_words)))


def load_corpus(path, max_words: int) -> Corpus:
    """Documents of a JSONL file (`orig_doc` or `text`; other keys are metadata never shown), each
    truncated to `max_words` words (6000 games, 4000 tool use). Bad lines are skipped and counted."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path} (expected JSONL with 'orig_doc' or 'text')")
    with open(path, encoding="utf-8-sig", errors="replace") as lines:     # streamed; a byte-order mark is dropped
        found = [_corpus_document(line, max_words, f"{path.stem}:{n}") for n, line in enumerate(lines, 1)]
    documents = [d for d in found if d is not None]
    skipped = len(found) - len(documents)
    if not documents:
        raise ValueError(f"corpus {path} has no usable documents ({skipped} lines skipped: blank, "
                         "not a JSON object, or without a non-empty 'orig_doc'/'text')")
    print(f"corpus: {len(documents)} documents from {path} ({skipped} lines skipped)")
    return Corpus([text for _, text in documents], [doc_id for doc_id, _ in documents], skipped)


def _module_text(module) -> str:
    """The module's docstring and those of its public functions and classes (like `help()`, minus
    file paths)."""
    parts = [f"Python module `{module.__name__}`\n\n{inspect.getdoc(module) or ''}"]
    names = getattr(module, "__all__", None) or sorted(n for n in vars(module) if not n.startswith("_"))
    for name in names:
        obj = getattr(module, name, None)
        if (inspect.isroutine(obj) or inspect.isclass(obj)) and inspect.getdoc(obj):
            try:
                signature = str(inspect.signature(obj))
            except (TypeError, ValueError):   # many builtins have none
                signature = ""
            parts.append(f"{name}{signature}\n    {inspect.getdoc(obj)}")
    return "\n\n".join(parts)


def builtin_corpus(max_words: int = 6000) -> Corpus:
    """A corpus made at start-up from the installed standard library's documentation: one document
    per module of BUILTIN_MODULES (no download). Modules missing from this Python are left out."""
    names = [name for name in BUILTIN_MODULES if importlib.util.find_spec(name) is not None]
    docs = [truncate_words(_module_text(importlib.import_module(name)), max_words) for name in names]
    print(f"corpus: {len(docs)} built-in documents (standard-library module documentation)")
    return Corpus(docs, [f"stdlib:{name}" for name in names])

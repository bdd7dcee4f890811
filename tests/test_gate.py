"""gate.py: the validation gate, each stage rejecting what it should (METHOD.md 3.1), the two
examples passing, a designer's prose around the code, and the criteria check of tool use."""
import pytest

from gate import validate_env
from test_sandbox import EXAMPLES, TIMEOUT, env_code


@pytest.mark.parametrize("name", ["vault_dial.py", "parcel_desk.py"])
def test_examples_validate(name):
    result = validate_env((EXAMPLES / name).read_text())
    assert result.ok, (result.stage, result.error)
    assert result.class_name.endswith("Env")


def test_validation_accepts_a_designer_response_with_prose():
    response = "Here is my game.\n```python\n" + (EXAMPLES / "vault_dial.py").read_text() + "\n```\nEnjoy!"
    assert validate_env(response).ok


@pytest.mark.parametrize("code, stage", [
    ("class BrokenEnv(:\n  pass", "syntax"),
    ("raise RuntimeError('boom')", "exec"),
    ("x = 1", "class"),
    (env_code(init="raise ValueError('no')"), "construct"),
    (env_code(reset="return '', {}"), "reset"),
    (env_code(step="return 'ok', 11.0, False, False, {}"), "step"),
    (env_code(step="return 'ok', 0.0, 0, False, {}"), "step"),
    (env_code(reset="if seed == 123:\n    raise KeyError(seed)\nreturn 'obs', {}"), "reseed"),
    (env_code(reset="return 'obs %d' % int.from_bytes(os.urandom(8), 'big'), {}"), "determinism"),
    (env_code(reset="return 'obs', {}") + "    def get_tools(self):\n        return [{'name': 'lookup'}]\n", "output"),
    (env_code(reset="return 'obs', {}") + "    def get_tools(self):\n        raise KeyError('no tools')\n", "tools"),
    (env_code(init="pass") + "    max_turns = property(lambda self: 1 / 0)\n", "construct"),   # as a play builds it
    (env_code(step="while True: pass"), "timeout"),
    (env_code(step="while 'boxed' not in action: pass\nreturn 'ok', 0.0, False, False, {}"), "timeout"),  # unboxed probes
])
def test_validation_rejects_at_the_right_stage(code, stage):
    result = validate_env(code, timeout_s=TIMEOUT)
    assert not result.ok and result.stage == stage, (result.stage, result.error)


def test_what_only_a_shared_process_would_break_passes():
    """Every play runs in a process of its own: class-level state (a game counter) and an instance of
    several hundred MB are fine there, so the gate judges them in processes of their own too."""
    counter = env_code(top="import itertools", init="self.number = next(HostileEnv.games)",
                       reset="return f'Game #{self.number}', {}") + "    games = itertools.count(1)\n"
    assert validate_env(counter).ok
    big = env_code(init="self.table = bytearray(100 << 20)")   # 100 MB an instance, 256 MB a process
    result = validate_env(big, memory_mb=256)
    assert result.ok, (result.stage, result.error)


def test_each_request_has_a_plays_deadline_and_the_gate_its_own():
    slow = validate_env(env_code(reset="time.sleep(5)\nreturn 'obs', {}"), call_timeout_s=1)
    assert (slow.stage, slow.error) == ("timeout", "reset did not finish within 1 s"), slow.error
    patient = validate_env(env_code(reset="time.sleep(0.4)\nreturn 'obs', {}"), timeout_s=1, call_timeout_s=30)
    assert patient.stage == "timeout" and "the gate's 1 s ran out" in patient.error, patient.error


@pytest.mark.parametrize("code", ["1+" * 100_000 + "1", "-" * 100_000 + "1", "x = '\\0'\x00", "x" + "[0]" * 100_000])
def test_code_the_parser_cannot_take_is_a_syntax_failure(code):
    result = validate_env(code)
    assert (result.ok, result.stage) == (False, "syntax"), result.error


def test_validation_criteria_gate_for_tool_use():
    code = (EXAMPLES / "parcel_desk.py").read_text().replace(
        'lambda s: s["looked_up"] == t', 'lambda s: s["missing_key"] == t')
    result = validate_env(code)
    assert not result.ok and result.stage == "criteria", (result.stage, result.error)


def test_a_game_whose_only_randomness_is_the_unseeded_global_random_passes_the_gate():
    """Plays seed `random` from their seed (contract.play_reset), and so does the gate's reset."""
    result = validate_env(env_code(reset="return 'secret %d' % random.randrange(10**9), {}"))
    assert result.ok, (result.stage, result.error)

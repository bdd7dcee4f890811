"""The fixed-RLVE baseline (METHOD.md 10): GRPO on 16 of RLVE's single-turn verifiable environments,
with RLVE's own adaptive difficulty, in place of the designer.

    python spade.py --rlve --model Qwen3-30B-A3B      # 16 environments x 16 plays, T 1.0

Every step each environment gets one new problem that all its plays answer; the reward is RLVE's
verifier on the `\\boxed{}` content (0 or 1), z-scored as for a game. Difficulty is RLVE's sliding
window (`Curriculum`, saved in checkpoints): a problem's level is drawn from the last WINDOW levels up
to the environment's top, and after MIN_ATTEMPTS top-level plays the top moves up if at least
PROMOTE_AT of them were right. The problems come from the `rlve-gym` package and run in the trainer
(RLVE's code, not model-written code); RLVE reseeds the global generators for every problem it makes,
and `problem()` puts them back.
"""
import contextlib
import dataclasses
import os
import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from agent import after_thinking, extract_boxed
from agent import CONTEXT_MARGIN, GAME_INSTRUCTION, Episode

ENVIRONMENTS = ("Division", "EuclidGame", "GCDOne_Counting", "HamiltonianPath", "LampChanging",
                "LargestConvexPolygon", "Multiplication", "PCPPermutation", "Path_NoGoingBack_Counting", "SAT",
                "ShortestPath", "Sorting", "SpiralMatrix", "SubsequenceReversalLNDS", "UndamagedSubmatrixCounting",
                "WYRLevelingGround")
WINDOW, MIN_ATTEMPTS, PROMOTE_AT = 4, 128, 0.9
SKILL = "RLVE"


def gym():
    """RLVE's two registries (name -> environment class, name -> parameter controller class)."""
    try:
        from Gym.environments import identifier2environment
        from Gym.parameter_controllers import identifier2controller
    except ImportError as e:
        raise ImportError(f"the RLVE baseline needs the rlve-gym package (pip install rlve-gym==0.0.1): {e}")
    return identifier2environment, identifier2controller


@dataclass
class Problem:
    name: str            # the RLVE environment
    level: int           # its difficulty
    seed: int
    prompt: str          # the problem text as RLVE writes it
    verifiable: object   # RLVE's VerifiableEnvironment holding the generated problem

    @property
    def group(self):
        """The plays' group for the z-scores (Episode.env_id)."""
        return f"{self.name}-level{self.level}-seed{self.seed}"

    def score(self, reply):
        """1 if RLVE's verifier accepts the reply's answer, else 0 (binary reward)."""
        reply = after_thinking(reply)
        answer = extract_boxed(reply)
        output = reply if answer is None else f"<answer>{answer}</answer>"
        return float(self.verifiable.verifier(output)["accuracy"])


@contextlib.contextmanager
def _global_rngs_kept():
    """RLVE's generator seeds Python's, numpy's and torch's global generators (and PYTHONHASHSEED)."""
    saved = random.getstate(), np.random.get_state(), os.environ.get("PYTHONHASHSEED")
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_initialized() else []):
        yield
    random.setstate(saved[0])
    np.random.set_state(saved[1])
    os.environ.pop("PYTHONHASHSEED", None)
    if saved[2] is not None:
        os.environ["PYTHONHASHSEED"] = saved[2]


@dataclass
class Curriculum:
    """Per environment: the top difficulty level and the [attempts, correct] counted at it."""
    top: dict = field(default_factory=lambda: {name: 0 for name in ENVIRONMENTS})
    counted: dict = field(default_factory=lambda: {name: [0, 0] for name in ENVIRONMENTS})
    next_seed: int = 0   # problem seeds run on, as in RLVE

    def problem(self, name, rng, max_tries=10) -> Problem:
        """A new problem of environment `name`, its level drawn from the window below the top."""
        environments, controllers = gym()
        level = rng.randint(max(0, self.top[name] - WINDOW + 1), self.top[name])
        controller = controllers[name]()
        for _ in range(level):
            controller.update()
        for _ in range(max_tries):   # RLVE skips a seed whose generation fails or times out
            parameter, seed = rng.choice(controller.get_parameter_list()), self.next_seed
            self.next_seed += 1
            verifiable = environments[name]()
            with _global_rngs_kept():
                made = verifiable.generator(seed=seed, parameter=parameter)
            if made:
                return Problem(name, level, seed, verifiable.prompt_generator(), verifiable)
        raise RuntimeError(f"RLVE could not generate a {name} problem at level {level} in {max_tries} seeds")

    def record(self, problem: Problem, rewards):
        """Count the plays of a top-level problem; move the top up after MIN_ATTEMPTS at PROMOTE_AT."""
        if problem.level != self.top[problem.name]:
            return
        counted = self.counted[problem.name]
        counted[0] += len(rewards)
        counted[1] += sum(rewards)
        if counted[0] >= MIN_ATTEMPTS:
            self.top[problem.name] += counted[1] / counted[0] >= PROMOTE_AT
            self.counted[problem.name] = [0, 0]

    def metrics(self):
        return {"rlve/mean_top_level": sum(self.top.values()) / len(self.top),
                "rlve/max_top_level": max(self.top.values())}


def play(problems, engine, tokenizer, plays, pairs=None, *, params, max_context=32768, max_new_tokens=8192,
         thinking=False, stats=None):
    """Each problem answered `plays` times, one turn each, in one engine call; returns agent.Episodes,
    problem-major, with env_id = the problem's group, the reward from `Problem.score`, and status
    "truncated" when a reply ran out of tokens (it is scored all the same). `pairs`: the indices of the
    (problem, play) pairs played, problem-major (all of them by default). RLVE's prompts are short, so the
    longest prompt of all `problems` sets the budget of every pair, whichever are played:
    min(max_new_tokens, context left - 64)."""
    started = time.perf_counter()
    messages, prompts = _prompts(problems, tokenizer, thinking)
    budget = min(max_new_tokens, max_context - max(map(len, prompts)) - CONTEXT_MARGIN)
    assert budget > 0, f"a problem's prompt leaves no room in --max-context {max_context}"
    pairs = range(len(problems) * plays) if pairs is None else pairs
    tick = time.perf_counter()
    completions = engine.generate([prompts[k // plays] for k in pairs],
                                  dataclasses.replace(params, max_new_tokens=budget))
    generate_s = time.perf_counter() - tick
    episodes = []
    for k, completion in zip(pairs, completions):
        problem, prompt = problems[k // plays], prompts[k // plays]
        ids, stop = list(completion.token_ids), completion.finish_reason == "stop"
        reply = tokenizer.decode(ids[:-1] if stop else ids, skip_special_tokens=False)
        episodes.append(Episode(
            problem.group, SKILL, hinted=False, seed=problem.seed, tokens=prompt + ids,
            loss_mask=[0] * len(prompt) + [1] * len(ids), logprobs=[0.0] * len(prompt) + list(completion.logprobs),
            reward=problem.score(reply), status="terminated" if stop else "truncated", num_turns=1,
            num_generated_tokens=len(ids), messages=messages[k // plays] + [{"role": "assistant", "content": reply}]))
    if stats is not None:
        stats.update(wall_s=time.perf_counter() - started, generate_s=generate_s, env_s=0.0, num_generate_calls=1,
                     num_episodes=len(episodes), num_generated_tokens=sum(e.num_generated_tokens for e in episodes))
    return episodes


def play_round(curriculum, names, rng, engine, tokenizer, plays, divide=None, **play_kwargs):
    """One step of the baseline: a new problem of each named environment (`Curriculum.problem`), each
    answered `plays` times (`play`, with `play_kwargs`); the curriculum counts the plays. Returns the
    episodes. `divide(sizes, work)`: where the (problem, play) pairs are played (backend/launch.py,
    `divide`); here by default. The round's longest prompt sets the budget, whichever pairs a rank plays."""
    problems = [curriculum.problem(name, rng) for name in names]

    def work(mine=None):
        return play(problems, engine, tokenizer, plays, mine, **play_kwargs)
    played = divide([1.0] * (len(problems) * plays), work) if divide else work()
    for i, problem in enumerate(problems):
        curriculum.record(problem, [e.reward for e in played[i * plays:(i + 1) * plays]])
    return played


def _prompts(problems, tokenizer, thinking):
    """(messages, token ids) of each problem's one user turn."""
    messages = [[{"role": "user", "content": f"{p.prompt}\n\n{GAME_INSTRUCTION}"}] for p in problems]
    texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
             for m in messages]
    return messages, tokenizer(texts, add_special_tokens=False)["input_ids"]

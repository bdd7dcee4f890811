"""One step's batch (METHOD 7.1): which plays train, with which advantage and weight, and the agent's line."""
import pytest

import agent
import regret
from agent import drop_failed
from grpo import agent_samples, num_trained_episodes
from harness.report import agent_metrics


def trained_agent_samples(episodes, compact_filter):
    return agent_samples(episodes, regret.episode_advantages(episodes), compact_filter)


def test_compact_filter_drops_truncated_plays_after_the_z_scores():

    def episode(reward, status):
        return agent.Episode("env", "Data Retrieval", hinted=False, seed=0, tokens=[5, 6, 7], loss_mask=[0, 1, 1],
                             logprobs=[0.0, -0.1, -0.2], reward=reward, status=status)
    episodes = [episode(1.0, "terminated"), episode(0.0, "truncated"), episode(0.0, "terminated"),
                episode(1.0, "terminated")]
    assert len(trained_agent_samples(episodes, compact_filter=False)) == 4
    # rewards [1, 0, 0, 1]: mean 0.5, std 0.5 -> z = [1, -1, -1, 1]; the truncated play is in the statistics
    # (without it: mean 2/3, and the z-scores would differ) but is not trained.
    compact = trained_agent_samples(episodes, compact_filter=True)
    assert [s.advantage for s in compact] == pytest.approx([1.0, -1.0, 1.0])


def test_a_thinking_episode_trains_each_turn_and_counts_once():
    # METHOD 4.2: one sample per turn, each with the episode's whole advantage, weighted by its share of
    # the episode's trained tokens (2, 2 and 1 of 5), so the episode counts once, as the token mean over
    # its turns (the official group denominator). A turn with nothing to train on (a masked malformed tool
    # call) is no sample and takes no share.
    turn = lambda *mask: ([7] * len(mask), list(mask), [-0.5 * m for m in mask])
    thinking = agent.Episode("env", "Logic", hinted=False, seed=0, reward=1.0, status="terminated",
                             turns=[turn(0, 1, 1), turn(0, 0, 0), turn(0, 0, 1, 1), turn(0, 1)])
    plain = agent.Episode("env", "Logic", hinted=False, seed=1, tokens=[5, 6], loss_mask=[0, 1], logprobs=[0.0, -0.1],
                          reward=0.0, status="terminated")
    samples = trained_agent_samples([thinking, plain], compact_filter=False)
    assert [(s.tokens, s.loss_mask) for s in samples] == [
        t[:2] for t in (thinking.turns[0], thinking.turns[2], thinking.turns[3])] + [([5, 6], [0, 1])]
    assert [s.advantage for s in samples] == pytest.approx([1.0] * 3 + [-1.0])      # z-scores of rewards [1, 0]
    assert [s.weight for s in samples] == pytest.approx([2 / 5, 2 / 5, 1 / 5, 1.0])
    # The role scale's N_agent counts it once too; an episode with nothing generated is not counted, and
    # a truncated one that the compact filter leaves out of training still is (METHOD 6.2 step 4).
    empty = agent.Episode("env", "Logic", hinted=False, seed=2, tokens=[5], loss_mask=[0], logprobs=[0.0], reward=0.0,
                          status="error")
    truncated = agent.Episode("env", "Logic", hinted=False, seed=3, tokens=[5, 6], loss_mask=[0, 1],
                              logprobs=[0.0, -0.1], reward=0.0, status="truncated")
    assert num_trained_episodes([thinking, plain, empty, truncated]) == 3


def test_failed_plays_are_dropped_and_hung_games_blacklisted():
    def episode(env_id, reward=0.0, error=None, failed=False, hung=False):
        return agent.Episode(env_id, "Logic", hinted=False, seed=0, reward=reward, error=error, failed=failed,
                             hung=hung, status="error" if error else "terminated")
    played = [episode("ok", 1.0), episode("raises", -1.0, "contract: step raised ValueError"),
              episode("hangs", -1.0, "timeout: step did not finish within 30 s", failed=True, hung=True),
              episode("tool", -1.0, "timeout: call_tool did not finish within 30 s", failed=True),
              episode("crashes", -1.0, "crash: the child died (signal 11)", failed=True)]
    blacklist = {"earlier"}
    kept, hung = drop_failed(played, blacklist)
    # An exception inside step() is a scored -1 play (METHOD 1.1); FAILED plays are not scored (3.3),
    # and only a hung load/reset/step blacklists the game (a hung tool call fails only its play).
    assert [e.env_id for e in kept] == ["ok", "raises"]
    assert hung == {"hangs"} and blacklist == {"earlier", "hangs"}
    # The agent's line counts errors and failures over every play, the reward over the scored ones, and
    # the band share over the environments with scored plays: only "flaky" (1 win of 2) is in the band 0.2-0.8.
    kept += [episode("flaky", 1.0), episode("flaky", -1.0, "contract: step raised ValueError")]
    assert agent_metrics(played, kept) == {
        "agent/reward": 0.0, "agent/error_rate": 0.8, "agent/failed_rate": 0.6, "agent/band_share": pytest.approx(1 / 3)}

"""One step's training batch (METHOD.md 6.1, 6.2, 7.1): from the plays and the finished designer
epochs to the samples of the update.

FAILED plays are dropped and hung games blacklisted (`drop_failed`); rewards are grouped per
environment and z-scored (`group_rewards`, `episode_advantages`); the agent's samples carry those
advantages (`trained_agent_samples`: the thinking-mode fan-out and the compact filter), and a
finished epoch's designer samples get their delayed rewards (`score_epoch`). spade.py calls these in
its loop; the reward math itself is regret.py.
"""
from collections import defaultdict

import regret


def drop_failed(episodes, blacklist):
    """(the scored episodes, the environments that hung). FAILED plays are dropped, not scored (METHOD
    3.3; without the official single retry: a sandboxed failure is rarely transient); an environment
    whose load, reset or step hung joins the blacklist: it is not played again this run, and the
    designer's regret_based reward flags it. A hung tool call fails only its play."""
    hung = {e.env_id for e in episodes if e.failed and e.hung}
    blacklist |= hung
    return [e for e in episodes if not e.failed], hung


def group_rewards(episodes):
    groups = defaultdict(list)
    for episode in episodes:
        groups[episode.env_id].append(episode.reward)
    return dict(groups)


def episode_advantages(episodes):
    """Per-environment z-scores (METHOD 6.1). An environment whose plays all scored the same gives
    zeros: GRPO learns nothing from a group without contrast, which is why the designer is paid to
    keep win rates inside the band."""
    advantages, order = {}, defaultdict(list)
    for i, episode in enumerate(episodes):
        order[episode.env_id].append(i)
    for indices in order.values():
        for i, a in zip(indices, regret.agent_advantages([episodes[i].reward for i in indices])):
            advantages[i] = a
    return [advantages[i] for i in range(len(episodes))]


def trained_agent_samples(episodes, compact_filter):
    """The agent's samples: every episode with generated tokens, with its z-scored advantage; a
    thinking episode gives one sample per turn, each with the whole advantage and weight 1/T, so it
    counts once (METHOD 4.2). The compact filter (tool use, METHOD 4.3) leaves truncated episodes out
    of training, after the z-scores: they still count in their environment's mean and std."""
    import grpo
    samples = []
    for e, a in zip(episodes, episode_advantages(episodes)):
        if not (compact_filter and e.status == "truncated"):
            sequences = e.sequences()
            samples += [grpo.Sample(*sequence, a, weight=1 / len(sequences)) for sequence in sequences]
    return samples


def num_agent_episodes(episodes):
    """N_agent of the role scale (METHOD 6.2 step 4): the episodes with tokens to train on, counted as the
    loss counts them: a thinking episode once, not once per turn; truncated ones left out by the compact
    filter count too."""
    return sum(bool(e.sequences()) for e in episodes)


def score_epoch(epoch, cfg, tracker, num_agent):
    """A finished epoch's designer samples with their advantages: [(grpo.Sample, raw x)]."""
    import grpo
    if epoch is None or not epoch.samples:
        return []
    raw, advantages = regret.score_designer_batch(cfg.designer_reward, epoch.outcomes(), num_agent=num_agent,
                                                            regen_interval=cfg.regen_interval, tracker=tracker,
                                                            **cfg.plateau())
    return [(grpo.Sample(s.tokens, s.loss_mask, s.logprobs, a), x)
            for s, x, a in zip(epoch.samples, raw, advantages) if a is not None]


def agent_metrics(played, episodes, rewards):
    """The agent's line of a step: `played` are all its plays, `episodes` the scored ones (FAILED plays
    dropped), `rewards` theirs per environment. The band is the learnable win rates 0.2-0.8."""
    win_rates = [regret.win_rate(rs) for rs in rewards.values() if rs]
    return {"agent/reward": sum(e.reward for e in episodes) / max(1, len(episodes)),
            "agent/error_rate": sum(e.status == "error" for e in played) / max(1, len(played)),
            "agent/failed_rate": sum(e.failed for e in played) / max(1, len(played)),
            "agent/band_share": sum(0.2 <= w <= 0.8 for w in win_rates) / max(1, len(win_rates))}


def designer_metrics(batch):
    return {"designer/reward": sum(x for _, x in batch) / len(batch), "designer/samples": len(batch)} if batch else {}

"""A warm start for PPO: behaviour cloning of the greedy rule over options (``expert_choice``).

Cloning first (cross-entropy on the teacher's option, under the env's mask) starts PPO at the
teacher's plans, with a critic fitted to the returns those plans get, so its updates start from
good advantages rather than a random critic. The teacher is only the start: no feature of the
observation holds its choice, and PPO trains on from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from autoshard.core.sharding import ShardingType
from autoshard.rl.env import ShardingEnv
from autoshard.rl.options import CONTEXT, KINDS, OPTION, expert_choice
from autoshard.rl.policy import OptionScoringPolicy


@dataclass(frozen=True, slots=True)
class Demonstrations:
    """The teacher's steps: observations, masks, its actions, and each step's return to go."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


Expert = Callable[[ShardingEnv, np.ndarray], int]
"""(the env mid-episode, indices of the devices its mask allows) -> the device to demonstrate."""


def teacher(env: ShardingEnv, allowed: np.ndarray) -> int:
    """The greedy rule's option (``expert_choice``) at the env's current step."""
    assert env.state is not None and env.found is not None
    return expert_choice(env.state, env.found)


Follower = Callable[[np.ndarray, np.ndarray], int]
"""(an observation, its action mask) -> the action a policy takes there."""


def demonstrations(
    env: ShardingEnv, episodes: int, seed: int, expert: Expert = teacher, follow: Follower | None = None
) -> Demonstrations:
    """``episodes`` of ``expert``'s choices (default the teacher's) in ``env``; with ``follow``, the
    episodes take ``follow``'s actions and ``expert`` labels the states they reach (DAgger: the
    clone learns the teacher's choice where its own choices lead, not only along the teacher's
    path),
    from tasks it draws with ``seed``; an episode that ends in a dead end keeps its steps (their
    returns include it)."""
    observations: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    actions: list[int] = []
    returns: list[float] = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        rewards, done = [], False
        while not done:
            mask = env.action_masks()
            action = expert(env, np.flatnonzero(mask))
            observations.append(obs)
            masks.append(mask)
            actions.append(action)
            obs, reward, done, _, _ = env.step(action if follow is None else follow(obs, mask))
            rewards.append(reward)
        returns.extend(np.cumsum(rewards[::-1])[::-1])  # gamma = 1: the sum of the rewards to come
    return Demonstrations(
        np.asarray(observations, np.float32), np.asarray(masks), np.asarray(actions), np.asarray(returns, np.float32)
    )


def joined(a: Demonstrations, b: Demonstrations) -> Demonstrations:
    """Both sets of steps, as one."""
    return Demonstrations(
        np.concatenate([a.observations, b.observations]),
        np.concatenate([a.masks, b.masks]),
        np.concatenate([a.actions, b.actions]),
        np.concatenate([a.returns, b.returns]),
    )


def argmax_follower(policy: OptionScoringPolicy) -> Follower:
    """The actor's best-scored allowed action."""

    def follow(obs: np.ndarray, mask: np.ndarray) -> int:
        with torch.no_grad():
            logits = policy.mlp_extractor.forward_actor(torch.as_tensor(obs[None]))[0].numpy()
        return int(np.argmax(np.where(mask, logits, -np.inf)))

    return follow


SPLIT_WEIGHT = 10.0
"""Cloning weighs a step whose teacher's option is not table_wise this much more: such steps are
few (a few percent) and decide the most (a table's type and shard count)."""
CLONE_LEARNING_RATE = 1e-3


def clone(
    policy: OptionScoringPolicy, demonstrations: Demonstrations, epochs: int = 10, batch_size: int = 256, seed: int = 0
) -> float:
    """Fit ``policy``'s actor to the teacher's actions (masked cross-entropy, ``SPLIT_WEIGHT`` on
    the steps that choose a type other than table_wise) and its critic to the returns (squared
    error), with an optimizer of its own; returns the share of steps on which the actor's argmax
    is the teacher's option afterwards."""
    rng = np.random.default_rng(seed)
    obs = torch.as_tensor(demonstrations.observations)
    masks = torch.as_tensor(demonstrations.masks)
    actions = torch.as_tensor(demonstrations.actions)
    returns = torch.as_tensor(demonstrations.returns)
    options = obs[:, CONTEXT:].reshape(len(obs), masks.shape[1], OPTION)
    table_wise = options[torch.arange(len(obs)), actions, 1 + KINDS.index(ShardingType.TABLE_WISE)]
    weights = torch.where(table_wise > 0, 1.0, SPLIT_WEIGHT)
    optimizer = torch.optim.Adam(policy.parameters(), lr=CLONE_LEARNING_RATE)
    policy.set_training_mode(True)
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(demonstrations)), max(len(demonstrations) // batch_size, 1)):
            values, log_prob, _ = policy.evaluate_actions(obs[batch], actions[batch], action_masks=masks[batch])
            w = weights[batch]
            critic = torch.nn.functional.mse_loss(values.flatten(), returns[batch])
            loss = -(w * log_prob).sum() / w.sum() + 0.5 * critic
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        features = policy.extract_features(obs, policy.pi_features_extractor)
        assert isinstance(features, torch.Tensor)  # one extractor shared by actor and critic
        logits = policy.mlp_extractor.forward_actor(features)
        chosen = torch.where(masks, logits, torch.full_like(logits, -torch.inf)).argmax(1)
    return float((chosen == actions).float().mean())

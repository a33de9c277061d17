"""A warm start for PPO: behaviour cloning of greedy placement.

PPO from a random policy learns greedy's rule and then drifts above it as it keeps exploring
(docs/decisions.md, 18). Cloning greedy first (cross-entropy on greedy's device, under the env's
mask) starts PPO at greedy's placements, with a critic fitted to the returns those placements
get, so its updates start from good advantages rather than a random critic.
Another expert's episodes clone the same way (``demonstrations(..., expert=...)``; the rollout
policy of ``lab/experiments/rollout_distillation.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from autoshard.planners.choosers import cheapest_after
from autoshard.rl.env import ShardingEnv
from autoshard.rl.policy import DeviceScoringPolicy


@dataclass(frozen=True, slots=True)
class Demonstrations:
    """Greedy's steps: observations, masks, greedy's actions, and each step's return to go."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


Expert = Callable[[ShardingEnv, np.ndarray], int]
"""(the env mid-episode, indices of the devices its mask allows) -> the device to demonstrate."""


def greedy_expert(env: ShardingEnv, allowed: np.ndarray) -> int:
    """Greedy placement's device; while repairing, the target of the change local search makes."""
    assert env.state is not None
    if env.repair is not None:
        return env.repair.changes[0].target
    return cheapest_after(env.state, allowed)


def demonstrations(env: ShardingEnv, episodes: int, seed: int, expert: Expert = greedy_expert) -> Demonstrations:
    """``episodes`` of ``expert``'s placement (default greedy's, ``cheapest_after``) in ``env``,
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
            obs, reward, done, _, _ = env.step(action)
            rewards.append(reward)
        returns.extend(np.cumsum(rewards[::-1])[::-1])  # gamma = 1: the sum of the rewards to come
    return Demonstrations(
        np.asarray(observations, np.float32), np.asarray(masks), np.asarray(actions), np.asarray(returns, np.float32)
    )


def clone(
    policy: DeviceScoringPolicy, demonstrations: Demonstrations, epochs: int = 10, batch_size: int = 256, seed: int = 0
) -> float:
    """Fit ``policy``'s actor to greedy's actions (masked cross-entropy) and its critic to the
    returns (squared error), with its own optimizer; returns the share of steps on which the
    actor's argmax is greedy's device afterwards."""
    rng = np.random.default_rng(seed)
    obs = torch.as_tensor(demonstrations.observations)
    masks = torch.as_tensor(demonstrations.masks)
    actions = torch.as_tensor(demonstrations.actions)
    returns = torch.as_tensor(demonstrations.returns)
    policy.set_training_mode(True)
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(demonstrations)), max(len(demonstrations) // batch_size, 1)):
            values, log_prob, _ = policy.evaluate_actions(obs[batch], actions[batch], action_masks=masks[batch])
            loss = -log_prob.mean() + 0.5 * torch.nn.functional.mse_loss(values.flatten(), returns[batch])
            policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            policy.optimizer.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        features = policy.extract_features(obs, policy.pi_features_extractor)
        assert isinstance(features, torch.Tensor)  # one extractor shared by actor and critic
        logits = policy.mlp_extractor.forward_actor(features)
        chosen = torch.where(masks, logits, torch.full_like(logits, -torch.inf)).argmax(1)
    return float((chosen == actions).float().mean())

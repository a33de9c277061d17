"""The policy placing a task: argmax or sampled, over the same ``PlacementState`` the env steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autoshard.planners.placement import CANDIDATES, PlacementState, candidates
from autoshard.rl.observation import observe, task_scale

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy


class PolicyChooser:
    """A ``Chooser`` that asks the policy: the best-scored allowed device, or, with ``rng``, one
    drawn from the softmax of the scores over the allowed devices (``temperature`` scales it).
    Only the ``candidates`` least-loaded allowed devices are scored (all of them in training,
    where tasks have at most 16 devices)."""

    def __init__(self, policy: DevicePolicy, rng: np.random.Generator | None = None,
                 temperature: float = 1.0, candidates: int = CANDIDATES) -> None:
        self.policy, self.rng, self.temperature, self.candidates = policy, rng, temperature, candidates
        self._state: PlacementState | None = None
        self._scale = 1.0

    def __call__(self, state: PlacementState, allowed: np.ndarray) -> int:
        if state is not self._state:  # a new placement: its scale is fixed for its duration
            self._state, self._scale = state, task_scale(state)
        allowed = candidates(state, allowed, self.candidates)
        if_added = state.costs_if_added(allowed)
        scores = self.policy.scores(observe(state, self._scale, allowed, if_added, np.ones(len(allowed), bool)))
        if self.rng is None:
            return int(allowed[np.argmax(scores)])
        logits = scores / self.temperature
        p = np.exp(logits - logits.max())
        return int(allowed[self.rng.choice(len(allowed), p=p / p.sum())])

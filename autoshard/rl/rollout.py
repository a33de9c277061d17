"""The policy placing a task: argmax or sampled, over the same ``PlacementState`` the env steps."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Sequence

import numpy as np

from autoshard.planners.placement import CANDIDATES, PlacementState, candidates, first_alike
from autoshard.rl.observation import observe_many

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy


class PolicyChooser:
    """A ``Chooser`` that asks the policy: the best-scored allowed device, or, with ``rng``, one
    drawn from the softmax of the scores over the allowed devices (``temperature`` scales it).
    Only the ``candidates`` least-loaded allowed devices are scored (all of them in training,
    where tasks have at most 16 devices). ``choose_many`` chooses for several placements in one
    pass of the policy (a ``BatchChooser``), drawing in their order as one call each would."""

    def __init__(self, policy: DevicePolicy, rng: np.random.Generator | None = None,
                 temperature: float = 1.0, candidates: int = CANDIDATES) -> None:
        self.policy, self.rng, self.temperature, self.candidates = policy, rng, temperature, candidates

    def __call__(self, state: PlacementState, allowed: np.ndarray) -> int:
        return self.choose_many([state], [allowed])[0]

    def choose_many(self, states: Sequence[PlacementState], allowed: Sequence[np.ndarray]) -> list[int]:
        # placements alike so far (sampled rollouts mostly follow the argmax) are observed and
        # scored once; each still draws its own device, in order
        like = first_alike(states, range(len(states)))
        scored = list(dict.fromkeys(like))
        rows = {k: candidates(states[k], allowed[k], self.candidates) for k in scored}
        # and placements alike at a history (a StepCosts') that another chooser of this policy
        # scored there already (the argmax rollout, before the sampled ones) read its scores
        kept = {k: (states[k].steps.scores(states[k].history), (id(self.policy), rows[k].tobytes()))
                for k in scored if states[k].steps is not None}
        mine = {k: kept[k][0][kept[k][1]] for k in kept if kept[k][1] in kept[k][0]}
        fresh = [k for k in scored if k not in mine]
        if fresh:
            if_added = [states[k].costs_if_added(rows[k]) for k in fresh]
            observed = observe_many([states[k] for k in fresh], [rows[k] for k in fresh], if_added, [None] * len(fresh))
            scores = self.policy.scores(observed)
            for k, (a, b) in zip(fresh, itertools.pairwise(observed.starts)):
                mine[k] = scores[a:b]
                if k in kept:
                    kept[k][0][kept[k][1]] = mine[k]
        chosen = []
        for k in like:
            if self.rng is None:
                chosen.append(int(rows[k][np.argmax(mine[k])]))
                continue
            chosen.append(int(rows[k][draw(self.rng, mine[k] / self.temperature)]))
        return chosen


def draw(rng: np.random.Generator, logits: np.ndarray) -> int:
    """An index drawn with probabilities softmax(``logits``): the same draw, from the same single
    uniform number, as ``rng.choice(len(logits), p=softmax)``, without its checks of ``p`` (ten
    times the cost of the draw itself on a step's handful of devices)."""
    p = np.exp(logits - logits.max())
    cdf = np.cumsum(p / p.sum())  # as numpy's choice computes it, so that the draw is its draw
    cdf /= cdf[-1]
    return int(cdf.searchsorted(rng.random(), side="right"))

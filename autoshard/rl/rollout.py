"""The policy placing a task: argmax or sampled, over the same ``PlacementState`` the env steps."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from autoshard.core.errors import PlannerError
from autoshard.planners.choosers import CANDIDATES, Chooser, candidates
from autoshard.planners.placement_state import PlacementState, first_alike
from autoshard.planners.recording import RecordedSteps, RecordingChooser
from autoshard.rl.observation import first_lowest, observe_many

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy

SPECULATIONS = 4
"""``argmax_rollout`` checks at most this many speculative runs before it steps the policy."""


class PolicyChooser:
    """A ``Chooser`` that asks the policy: the best-scored allowed device, or, with ``rng``, one
    drawn from the softmax of the scores over the allowed devices (``temperature`` scales it).
    Only the ``candidates`` least-loaded allowed devices are scored (all of them in training,
    where tasks have at most 16 devices). ``choose_many`` chooses for several placements in one
    pass of the policy (a ``BatchChooser``), drawing in their order as one call each would."""

    def __init__(
        self,
        policy: DevicePolicy,
        rng: np.random.Generator | None = None,
        temperature: float = 1.0,
        candidates: int = CANDIDATES,
    ) -> None:
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
        kept = {
            k: (steps.scores(states[k].history), _score_key(self.policy, rows[k]))
            for k in scored
            if (steps := states[k].steps) is not None
        }
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


def _score_key(policy: DevicePolicy, rows: np.ndarray) -> Hashable:
    """Where a policy's scores of the candidate devices ``rows`` are kept in a ``StepCosts``
    history: the argmax rollout writes them, the sampled rollouts at that history read them."""
    return id(policy), rows.tobytes()


def draw(rng: np.random.Generator, logits: np.ndarray) -> int:
    """An index drawn with probabilities softmax(``logits``): the same draw, from the same single
    uniform number, as ``rng.choice(len(logits), p=softmax)``, without its checks of ``p`` (ten
    times the cost of the draw itself on a step's handful of devices)."""
    p = np.exp(logits - logits.max())
    cdf = np.cumsum(p / p.sum())  # as numpy's choice computes it, so that the draw is its draw
    cdf /= cdf[-1]
    return int(cdf.searchsorted(rng.random(), side="right"))


class _Departed(Exception):
    """A speculative run left the policy's path in an earlier attempt of ``place_workload``."""

    def __init__(self, path: dict[int, list[int]]) -> None:
        super().__init__("the policy departs from the speculative run")
        self.path = path


class _Speculation(RecordingChooser):
    """A ``Chooser`` for one run of ``place_workload``: on each attempt (a fresh placement; an
    attempt that ran into a dead end is retried with smaller shards) it takes the devices of
    ``path[attempt]``, then greedy's device at each step (the cheapest after: the cloned policy's
    choice almost always), recording what the policy would observe there. ``departure`` scores
    every recorded step in one pass of the policy."""

    def __init__(self, policy: DevicePolicy, path: dict[int, list[int]], limit: int) -> None:
        super().__init__(limit)
        self.policy, self.path = policy, path

    @classmethod
    def of(cls, record: RecordedSteps, policy: DevicePolicy) -> _Speculation:
        """The speculation whose one attempt recorded ``record``'s steps."""
        speculation = cls(policy, {}, CANDIDATES)
        speculation.attempt = 0
        speculation.views, speculation.rows = list(record.views), list(record.rows)
        speculation.added, speculation.taken = list(record.added), list(record.taken)
        return speculation

    def begin(self, state: PlacementState) -> None:
        if self.state is not None and (path := self.departure()) is not None:
            raise _Departed(path)  # ... on the speculative path, not necessarily on the policy's
        super().begin(state)

    def forced(self, state: PlacementState) -> int | None:
        prefix = self.path.get(self.attempt, [])
        return prefix[state.position] if state.position < len(prefix) else None

    def departure(self) -> dict[int, list[int]] | None:
        """None if the policy's argmax is the device taken at every recorded step of this
        attempt; else the path to replay: this attempt's devices up to the first step where it
        is not, and the policy's device there. The scores go to the steps' ``StepCosts``, where
        the policy's sampled rollouts read them."""
        if not self.views:
            return None
        observed = observe_many(self.views, self.rows, self.added, [None] * len(self.views))
        scores = self.policy.scores(observed)
        for view, rows, (a, b) in zip(self.views, self.rows, itertools.pairwise(observed.starts)):
            if view.steps is not None:  # a pure function of the step's state: kept for every step
                view.steps.scores(view.history)[_score_key(self.policy, rows)] = scores[a:b]
        chosen = np.concatenate(self.rows)[first_lowest(-scores, observed.placement_of_row, len(self.views))]
        departs = np.flatnonzero(chosen != np.asarray(self.taken))
        if not len(departs):
            return None
        k = int(departs[0])
        return {**self.path, self.attempt: self.path.get(self.attempt, []) + self.taken[:k] + [int(chosen[k])]}


def recorded_departure(record: RecordedSteps, policy: DevicePolicy) -> dict[int, list[int]] | None:
    """Where the policy's argmax leaves greedy placement's recorded steps (``departure``: None if
    nowhere; else the path for ``argmax_rollout`` to start from), checked in one pass of the
    policy. The record must be of the placement the policy's rollout makes (the same units in the
    same order, under the same mask, ``RecordedSteps.same_under_cap``)."""
    return _Speculation.of(record, policy).departure()


def argmax_rollout(
    run: Callable[[Chooser], PlacementState],
    policy: DevicePolicy,
    limit: int = CANDIDATES,
    path: dict[int, list[int]] | None = None,
) -> PlacementState:
    """``run(PolicyChooser(policy))`` (a ``place_workload`` with that chooser), computed
    speculatively: the policy is a clone of greedy placement, so greedy's device is run at every
    step and the policy then scores all the steps in one pass instead of one pass a step. Where
    the policy departs, the run restarts on the path up to there plus the policy's device (the
    costs of that path come from its ``StepCosts``, where there are some), at most
    ``SPECULATIONS`` times before stepping the policy one pass a step. ``path``: the first run's
    (``recorded_departure``'s), default greedy's all the way."""
    path = {} if path is None else path
    for _ in range(SPECULATIONS):
        chooser = _Speculation(policy, path, limit)
        try:
            state = run(chooser)
        except _Departed as departed:
            path = departed.path
            continue
        except PlannerError:
            if (departed_at := chooser.departure()) is None:
                raise  # the policy's own path ends there too
            path = departed_at
            continue
        if (departed_at := chooser.departure()) is None:
            return state
        path = departed_at
    return run(PolicyChooser(policy, candidates=limit))

"""Greedy placement's steps, recorded: what the policy would observe at each step of greedy's path.

The shipped policy is greedy placement's clone, so ``rl``'s argmax rollout (``rl.rollout``) runs
greedy's device at every step and then checks all the steps in one pass of the policy. When
cost_greedy has placed the same units under the same mask already, its recorded steps are
those steps: ``rl`` checks them without stepping a placement again (``TaskCache.recorded``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.core.types import Topology
from autoshard.planners.choosers import CANDIDATES, candidates
from autoshard.planners.device_state import DeviceState
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit
from autoshard.planners.step_costs import StepCosts


@dataclass(frozen=True, slots=True)
class StepView:
    """What ``observe_many`` reads of a placement, as it was at one step (copies of its arrays),
    and where the step sits in its ``StepCosts`` (if any)."""

    topology: Topology
    units: Sequence[Unit]
    position: int
    cost_bound: float
    remaining_cost: float
    remaining_bytes: int
    loads: np.ndarray
    free: np.ndarray
    count: np.ndarray
    steps: StepCosts | None
    history: int

    @property
    def current(self) -> Unit:
        return self.units[self.position]

    @classmethod
    def of(cls, state: PlacementState) -> StepView:
        return cls(
            state.topology,
            state.units,
            state.position,
            state.cost_bound,
            state.remaining_cost,
            state.remaining_bytes,
            state.loads.copy(),
            state.free.copy(),
            state.count.copy(),
            state.steps,
            state.history,
        )


@dataclass(frozen=True, slots=True)
class RecordedSteps:
    """A finished greedy placement, step by step: its units in order, and at each step the
    placement's view, the candidate devices, their costs with the unit added and the device
    taken; then the finished devices (copies, before any local search)."""

    units: tuple[Unit, ...]
    views: tuple[StepView, ...]
    rows: tuple[np.ndarray, ...]
    added: tuple[np.ndarray, ...]
    taken: tuple[int, ...]
    devices: tuple[DeviceState, ...]

    def same_under_cap(self, cap: int | None) -> bool:
        """Whether a placement that may put at most ``cap`` units on a device (the
        extrapolation guard) had the same devices to choose from at every step: no device held
        ``cap`` units before the last step."""
        return cap is None or all(int(view.count.max()) < cap for view in self.views)


class RecordingChooser:
    """``cheapest_after`` (of the ``limit`` candidates, the device whose cost with the unit added
    is lowest) that records every step of the placement it chooses for. A new placement
    (``place_workload`` retries with smaller shards after a dead end) starts a new attempt."""

    def __init__(self, limit: int = CANDIDATES) -> None:
        self.limit = limit
        self.state: PlacementState | None = None
        self.attempt = -1
        self.views: list[StepView] = []
        self.rows: list[np.ndarray] = []
        self.added: list[np.ndarray] = []
        self.taken: list[int] = []

    def __call__(self, state: PlacementState, allowed: np.ndarray) -> int:
        if state is not self.state:
            self.begin(state)
        rows = candidates(state, allowed, self.limit)
        added = state.costs_if_added(rows)  # as a policy's step scores them (and ``apply`` reads them)
        forced = self.forced(state)
        if forced is not None:
            return forced
        self.views.append(StepView.of(state))
        self.rows.append(rows)
        self.added.append(added)
        self.taken.append(int(rows[np.argmin(added)]))
        return self.taken[-1]

    def begin(self, state: PlacementState) -> None:
        """A new attempt, on ``state``: the record starts anew."""
        self.state, self.attempt = state, self.attempt + 1
        self.views, self.rows, self.added, self.taken = [], [], [], []

    def forced(self, state: PlacementState) -> int | None:
        """A device to take at this step instead of greedy's, unrecorded (none here)."""
        return None

    def recorded(self, state: PlacementState) -> RecordedSteps | None:
        """The record of ``state``, the finished placement, if this chooser placed all of it in
        one attempt."""
        if state is not self.state or self.attempt != 0 or not state.done:
            return None
        return RecordedSteps(
            tuple(state.units),
            tuple(self.views),
            tuple(self.rows),
            tuple(self.added),
            tuple(self.taken),
            tuple(d.copy() for d in state.devices),
        )

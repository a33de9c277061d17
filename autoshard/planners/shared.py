"""Work that several planners of one comparison do alike, done once.

``rl+refine`` starts from cost_greedy's searched placement and from the policy's argmax rollout,
which are ``cost_greedy``'s and ``rl``'s own plans: when the three plan one task side by side
(``compare_planners``, the service's model task), each placement is computed by the first planner
that needs it and handed to the others as copies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from autoshard.core.types import CostModel, Topology, Workload
from autoshard.planners.device_state import Assignment, DeviceState
from autoshard.planners.local_search import SearchRound
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.recording import RecordedSteps
from autoshard.planners.step_costs import StepCosts
from autoshard.planners.unit_preparation import TaskUnits


@dataclass(frozen=True, slots=True)
class Placement:
    """A finished placement: its units in the order they were placed, its devices, and, for a
    placement local search improved, the ``assignment`` the search started from and, where it
    was recorded and ran to its end, its rounds (read-only). ``seconds``: the time it took to
    compute; ``reused``: handed out by a ``SharedWork``, not computed by the planner that holds it."""

    units: tuple[Unit, ...]
    devices: tuple[DeviceState, ...]
    searched_from: Assignment | None = None
    rounds: tuple[SearchRound, ...] | None = None
    seconds: float = 0.0
    reused: bool = False

    @property
    def reused_s(self) -> float:
        """The planning time this placement saved its holder (0 if it computed it)."""
        return self.seconds if self.reused else 0.0

    def copy(self, reused: bool = False) -> Placement:
        return replace(self, devices=tuple(d.copy() for d in self.devices), reused=reused)


class SharedWork:
    """Placements of one task (``workload`` on ``topology``, with one cost model and context),
    by key (what computed it, with the settings it depends on), the ``StepCosts`` of its
    placements, by unit order, and greedy placement's recorded steps (``RecordedSteps``). Only a
    placement computed within its planner's budget is kept: one cut short stays that planner's
    own. A planner asking about another task computes on its own."""

    def __init__(self, workload: Workload, topology: Topology) -> None:
        self.workload, self.topology = workload, topology
        self._kept: dict[Hashable, Placement] = {}
        self._steps: dict[Hashable, StepCosts] = {}
        self._records: dict[Hashable, RecordedSteps] = {}
        self._units: dict[int, tuple[CostModel, TaskUnits]] = {}  # by the cost model's id (it is kept alive)
        self.reused = 0  # how many placements were handed out instead of computed (for tests)

    @property
    def kept(self) -> int:
        """How many placements are kept to hand out (for tests)."""
        return len(self._kept)

    def placement(
        self, workload: Workload, topology: Topology, key: Hashable, compute: Callable[[], tuple[Placement, bool]]
    ) -> Placement:
        """The placement kept under ``key`` (a copy), or ``compute()``'s: (placement, whether
        it ran to completion, so that it may be kept)."""
        if workload is not self.workload or topology != self.topology:
            return compute()[0]
        kept = self._kept.get(key)
        if kept is not None:
            self.reused += 1
            return kept.copy(reused=True)
        found, complete = _timed(compute)
        if complete:
            self._kept[key] = found.copy()
        return found

    def record(self, workload: Workload, topology: Topology, key: Hashable, steps: RecordedSteps | None) -> None:
        """Keep a placement's recorded steps under ``key`` (nothing for another task, or None)."""
        if steps is not None and workload is self.workload and topology == self.topology:
            self._records[key] = steps

    def recorded(self, workload: Workload, topology: Topology, key: Hashable) -> RecordedSteps | None:
        """The recorded steps kept under ``key`` (read-only), if any."""
        if workload is not self.workload or topology != self.topology:
            return None
        return self._records.get(key)

    def units(self, workload: Workload, topology: Topology, cost_model: CostModel) -> TaskUnits:
        """The task's units costed alone by ``cost_model`` (``model_costs``), one ``TaskUnits``
        for all its planners; a new one for another task."""
        if workload is not self.workload or topology != self.topology:
            return _model_units(workload, topology, cost_model)
        if id(cost_model) not in self._units:
            self._units[id(cost_model)] = cost_model, _model_units(workload, topology, cost_model)
        return self._units[id(cost_model)][1]

    def steps(self, workload: Workload, topology: Topology, units: Sequence[Unit]) -> StepCosts | None:
        """The step costs of placements of ``units`` (of this task), in this order; None for
        another task."""
        if workload is not self.workload or topology != self.topology:
            return None
        return self._steps.setdefault(tuple(u.name for u in units), StepCosts())


def steps_of(
    shared: SharedWork | None, workload: Workload, topology: Topology, units: Sequence[Unit]
) -> StepCosts | None:
    """``shared.steps(...)``, or None without a ``SharedWork``."""
    return None if shared is None else shared.steps(workload, topology, units)


def units_of(shared: SharedWork | None, workload: Workload, topology: Topology, cost_model: CostModel) -> TaskUnits:
    """``shared.units(...)``, or a new ``TaskUnits`` of ``model_costs`` without a ``SharedWork``."""
    return (
        _model_units(workload, topology, cost_model) if shared is None else shared.units(workload, topology, cost_model)
    )


def _model_units(workload: Workload, topology: Topology, cost_model: CostModel) -> TaskUnits:
    return TaskUnits(workload, topology, model_costs(cost_model, workload.batch_size))


def placement_of(
    shared: SharedWork | None,
    workload: Workload,
    topology: Topology,
    key: Hashable,
    compute: Callable[[], tuple[Placement, bool]],
) -> Placement:
    """``shared.placement(...)``, or ``compute()``'s placement without a ``SharedWork``."""
    return _timed(compute)[0] if shared is None else shared.placement(workload, topology, key, compute)


def _timed(compute: Callable[[], tuple[Placement, bool]]) -> tuple[Placement, bool]:
    started = time.perf_counter()
    found, complete = compute()
    return replace(found, seconds=time.perf_counter() - started), complete

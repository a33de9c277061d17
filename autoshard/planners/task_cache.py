"""Work that the planners of one task do alike, done once: the task's ``TaskCache``.

``rl+refine`` compares its search with cost_greedy's plan, and ``rl+refine_raw`` returns that same
search: when they plan one task side by side (``compare_planners``, the service's model task),
each placement and search is computed by the first planner that needs it and handed to the others.
The caller that plans a task owns its cache (``PlannerContext.cache``); a planner given none makes
its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from autoshard.core.types import CostModel, Topology, Workload
from autoshard.planners.device_state import DeviceState
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.step_costs import StepCosts
from autoshard.planners.unit_preparation import TaskUnits

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Placement:
    """A finished placement: its units in the order they were placed, and its devices.
    ``seconds``: the time it took to compute; ``reused``: handed out by a ``TaskCache``, not
    computed by the planner that holds it."""

    units: tuple[Unit, ...]
    devices: tuple[DeviceState, ...]
    seconds: float = 0.0
    reused: bool = False

    @property
    def reused_s(self) -> float:
        """The planning time this placement saved its holder (0 if it computed it)."""
        return self.seconds if self.reused else 0.0

    def copy(self, reused: bool = False) -> Placement:
        return replace(self, devices=tuple(d.copy() for d in self.devices), reused=reused)


class TaskCache:
    """What the planners of one task (``workload`` on ``topology``, one cost model) compute alike:
    the task's units as each cost model costs them alone (``units``), the ``StepCosts`` of
    placements of the same units in the same order (``steps``), finished placements by key (what
    computed them, with the settings they depend on: ``placement``), and other derived results
    (``derived``). ``fixed``: shards on their devices before the
    task's units are placed (``PlacementState(fixed=...)``), for the tables of a workload that a
    sharding option spread (the task is then the rest of the workload around them). Only a
    placement computed within its planner's budget is kept: one cut short stays that planner's
    own. ``for_task`` hands a planner the cache of the task it plans."""

    def __init__(self, workload: Workload, topology: Topology, fixed: tuple[tuple[int, Unit], ...] = ()) -> None:
        self.workload, self.topology, self.fixed = workload, topology, fixed
        self._kept: dict[Hashable, Placement] = {}
        self._steps: dict[Hashable, StepCosts] = {}
        self._units: dict[int, tuple[CostModel, TaskUnits]] = {}  # by the cost model's id (it is kept alive)
        self.reused = 0  # how many placements were handed out instead of computed (for tests)
        self._derived: dict[Hashable, Any] = {}

    @classmethod
    def for_task(cls, cache: TaskCache | None, workload: Workload, topology: Topology) -> TaskCache:
        """``cache`` if it is the cache of ``workload`` on ``topology``; else a new one for them
        (a planner given none, or one made for another task, computes on its own)."""
        if cache is not None and cache.workload is workload and cache.topology == topology:
            return cache
        return cls(workload, topology)

    @property
    def rules(self) -> PlacementRules:
        """The workload's constraints on the topology, as the placements apply them."""
        return self.derived("rules", lambda: PlacementRules(self.workload.constraints, self.topology))

    @property
    def kept(self) -> int:
        """How many placements are kept to hand out (for tests)."""
        return len(self._kept)

    def units(self, cost_model: CostModel) -> TaskUnits:
        """The task's units costed alone by ``cost_model`` (``model_costs``), one ``TaskUnits``
        for all its planners."""
        if id(cost_model) not in self._units:
            costs = model_costs(cost_model, self.workload.batch_size)
            self._units[id(cost_model)] = cost_model, TaskUnits(self.workload, self.topology, costs)
        return self._units[id(cost_model)][1]

    def held(self, cost_model: CostModel) -> PlacementState | None:
        """A state holding the task's ``fixed`` units under ``cost_model`` and no other (None
        without fixed units), for its placements to start from (``PlacementState``'s ``held``):
        each start copies its devices, not the thousands of spread shards one by one."""
        if not self.fixed:
            return None

        def make() -> tuple[CostModel, PlacementState]:
            accumulator = cost_model.accumulator(self.topology.num_devices, self.workload.batch_size)
            return cost_model, PlacementState([], self.topology, accumulator, fixed=self.fixed)

        return self.derived(("held", id(cost_model)), make)[1]  # the model kept alive: its id holds

    def steps(self, units: Sequence[Unit]) -> StepCosts:
        """The step costs of placements of ``units`` (of this task), in this order."""
        return self._steps.setdefault(tuple(u.name for u in units), StepCosts())

    def placement(self, key: Hashable, compute: Callable[[], tuple[Placement, bool]]) -> Placement:
        """The placement kept under ``key`` (a copy), or ``compute()``'s: (placement, whether
        it ran to completion, so that it may be kept)."""
        kept = self._kept.get(key)
        if kept is not None:
            self.reused += 1
            return kept.copy(reused=True)
        started = time.perf_counter()
        found, complete = compute()
        found = replace(found, seconds=time.perf_counter() - started)
        if complete:
            self._kept[key] = found.copy()
        return found

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """What ``make()`` derives from the task (such as its spread tasks), once under ``key``."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

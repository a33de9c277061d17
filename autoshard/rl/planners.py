"""Planners driven by the trained policy: ``rl`` (argmax) and ``rl+refine`` (policy-guided search)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autoshard.core.costing import AccumulatorView
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.choosers import CANDIDATES, Chooser
from autoshard.planners.context import DEPARTURE_MARGIN
from autoshard.planners.cost_greedy import greedy_steps_key, searched_greedy
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import (
    DeviceState,
    assignment,
    build_plan,
    max_load,
)
from autoshard.planners.local_search import MAX_ROUNDS, REL_TOL, improve, lower_bound
from autoshard.planners.place_loop import place_together, place_workload
from autoshard.planners.placement_state import SET_SIZE_HEADROOM, PlacementState, unit_cap
from autoshard.planners.placement_unit import Unit
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.split_cap_choice import best_over_split_caps, chosen_over_split, clearly_lower
from autoshard.planners.spread_stage import best_of_tasks, spread_tasks
from autoshard.planners.task_cache import Placement, TaskCache
from autoshard.rl.env import guarded_state
from autoshard.rl.repair import follow_recorded, policy_repair
from autoshard.rl.rollout import PolicyChooser, argmax_rollout, recorded_departure

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy

SAMPLED_CANDIDATES = 32  # sampled rollouts score more devices than the argmax one: diversity for the search

OWN_TOTAL_SLACK = 0.03
"""rl+refine samples only where a plan could clear the departure margin while its devices' total
predicted cost is at most this much below that of cost_greedy's plan (the cost model is not
additive: grouping tables otherwise changes the total). Beyond cost_greedy's and rl's plans it
can return only its own placements: its samples, and local search from them and from its
starts, whose totals stay within a few percent of cost_greedy's (chosen by measurement:
docs/decisions.md, 16)."""


@dataclass(frozen=True)
class RLPlanner:
    """The policy places units largest predicted cost first, each on its best-scored device
    among those the mask allows (room, the extrapolation guard, the packing lookahead: as in
    ``ShardingEnv``); deterministic. With column splitting, the policy places the units without
    splits and, where splitting could pay, those of the split cap that balances best
    (``best_over_split_caps``); the split placement is kept only if it is predicted more than
    ``departure_margin`` lower.

    ``samples`` > 0 makes it ``rl+refine``, a policy-guided search: besides the argmax rollout,
    ``samples`` rollouts drawn from the policy's softmax at ``temperature`` (seeded; of the
    argmax rollout's units, stepped side by side so that one head call scores a step of all of
    them and one pass of the policy chooses for all; one that runs into a dead end is dropped);
    local search (moves and swaps, as cost_greedy) on the ``refine_top`` best of them, except one
    it has searched from already (greedy's placement, or a sample drawn twice), and on
    cost_greedy's own placement (without the extrapolation guard, as cost_greedy places), so
    that it is never worse than cost_greedy either. With column splitting, each split cap that
    ``best_over_split_caps`` plans (no split, and the best-balanced cap where splitting could
    pay, as for cost_greedy) gets its argmax rollout, cost_greedy's placement, the samples and
    their local search. The lowest predicted max wins, but a plan that is not
    cost_greedy's must be predicted more than ``departure_margin`` below cost_greedy's to be
    returned (smaller predicted gains are within the model's error: ``DEPARTURE_MARGIN``); so it is
    never predicted worse than cost_greedy, and never worse than ``rl`` by more than the margin.
    It samples only where such a plan can be expected (``_floor``: not at the lower bound, and
    not where cost_greedy's plan is so even that the plan would need a total ``OWN_TOTAL_SLACK``
    lower than its).
    Past ``time_budget_s`` the search stops and the best plan so far comes back ``partial``
    (the argmax rollout always completes, past the budget without the packing lookahead:
    ``place``). ``cache``: the task's (``TaskCache``; without one, or one of another task, it
    makes its own): the argmax rollout and cost_greedy's searched placement come from the
    planners of the task that computed them first (``rl``, ``cost_greedy``).
    """

    cost_model: CostModel
    policy: DevicePolicy
    allow_column_split: bool = False
    samples: int = 0
    refine_top: int = 2
    temperature: float = 1.0
    seed: int = 0
    set_size_headroom: float = SET_SIZE_HEADROOM
    departure_margin: float = DEPARTURE_MARGIN
    max_rounds: int = MAX_ROUNDS
    time_budget_s: float | None = None
    name: str = "rl"
    cache: TaskCache | None = None
    sharding_types: frozenset[ShardingType] = ALL_TYPES

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        deadline = Deadline(started, self.time_budget_s)
        cache = TaskCache.for_task(self.cache, workload, topology)
        tasks = spread_tasks(cache, self.cost_model, self.allow_column_split, self.sharding_types)
        reused: list[float] = []

        def plan_task(task: TaskCache) -> list[DeviceState]:
            planning = _Planning(self, task, deadline)
            try:
                return planning.best()
            finally:
                reused.extend(planning.reused)

        best = best_of_tasks(tasks, plan_task, self.departure_margin, deadline, self.cost_model)
        return build_plan(self.name, best, started, workload.batch_size, partial=deadline.hit, reused_s=sum(reused))


class _Planning:
    """One ``RLPlanner.plan`` call: the planner, the task's ``cache``, the ``deadline``, the
    samples' random generator, per planned split cap its starts (``starts``: the argmax rollout
    and, for rl+refine, cost_greedy's searched placement), and the seconds of the placements it
    took from the task's other planners (``reused``)."""

    def __init__(self, planner: RLPlanner, cache: TaskCache, deadline: Deadline) -> None:
        self.planner, self.cache, self.deadline = planner, cache, deadline
        self.model, self.policy = planner.cost_model, planner.policy
        self.topology, self.batch = cache.topology, cache.workload.batch_size
        self.rng = np.random.default_rng(planner.seed)
        self.starts: dict[int | None, tuple[Placement, Placement | None]] = {}
        self.reused: list[float] = []

    def best(self) -> list[DeviceState]:
        """The plan's devices: the lower start of the split caps ``best_over_split_caps`` plans;
        for rl+refine, the lowest of that and each cap's ``refined`` (the lowest start first),
        returned only where it is clearly lower than cost_greedy's plan."""
        planner = self.planner
        units_at = self.cache.units(self.model).at_cap
        best = best_over_split_caps(
            self.topology, planner.allow_column_split, self.start_at, units_at, planner.departure_margin, self.deadline
        )
        if planner.samples:
            ranked = sorted(self.starts, key=lambda cap: max_load(self.lower_start(cap)))
            best = min([best, *(self.refined(cap) for cap in ranked)], key=max_load)
            greedy = _greedy_best(self.starts, planner.departure_margin)
            best = _kept_unless_clearly_lower(best, greedy, planner.departure_margin)
        return best

    def start_at(self, cap: int | None) -> list[DeviceState]:
        """The argmax rollout of a split cap and, for rl+refine, cost_greedy's own searched
        placement (so that it is never worse than cost_greedy either): the lower of the two."""
        argmax = self.argmax_at(cap)
        self.starts[cap] = (argmax, self.greedy_at(cap) if self.planner.samples else None)
        return self.lower_start(cap)

    def lower_start(self, cap: int | None) -> list[DeviceState]:
        return min([list(p.devices) for p in self.starts[cap] if p is not None], key=max_load)

    def greedy_at(self, cap: int | None) -> Placement:
        """cost_greedy's searched placement of split cap ``cap`` (the task's, if computed)."""
        greedy = searched_greedy(self.cache, self.model, cap, self.planner.max_rounds, self.deadline)
        self.reused.append(greedy.reused_s)
        return greedy

    def argmax_at(self, cap: int | None) -> Placement:
        """The policy's argmax placement of split cap ``cap``, repaired (the task's, if computed)."""
        key = ("rl argmax", cap, id(self.policy), self.planner.set_size_headroom)
        found = self.cache.placement(key, lambda: (self._argmax_placed(cap), True))
        self.reused.append(found.reused_s)
        return found

    def _argmax_placed(self, cap: int | None) -> Placement:
        """``argmax_at``, computed: where greedy placed these units already (its recorded steps)
        and the policy's argmax takes greedy's device at every step, greedy's placement; else
        the argmax rollout, from where the policy departs from greedy's steps if it does."""
        path = None
        record = self.cache.recorded(greedy_steps_key(cap))
        if record is not None and record.same_under_cap(self.guard(record.units)):
            path = recorded_departure(record, self.policy)  # checked in one pass of the policy
            if path is None:
                greedys = Placement(record.units, tuple(d.copy() for d in record.devices))
                return self.repaired(greedys, cap, True)
        state = argmax_rollout(lambda choose: self.rollout(cap, choose), self.policy, path=path)
        return self.repaired(Placement(tuple(state.units), tuple(state.devices)), cap, False)

    def rollout(self, cap: int | None, choose: Chooser) -> PlacementState:
        """A placement of split cap ``cap``'s units by ``choose``, with the agent's mask."""
        units = self.cache.units(self.model)
        return place_workload(
            units, cap is not None, choose, self.fresh_state, max_ways=cap, scope=CANDIDATES, deadline=self.deadline
        )  # argmax_rollout's choosers score that many

    def fresh_state(self, units: list[Unit]) -> PlacementState:
        """A fresh placement of ``units`` as the agent sees it, on the task's ``StepCosts``."""
        planner = self.planner
        steps = self.cache.steps(units)
        headroom, fixed, rules = planner.set_size_headroom, self.cache.fixed, self.cache.rules
        return guarded_state(
            units, self.topology, self.model, self.batch, headroom, steps=steps, fixed=fixed, rules=rules
        )

    def guard(self, units: Sequence[Unit]) -> int | None:
        """The extrapolation guard of a placement of ``units`` (``unit_cap``)."""
        count = len(units) + len(self.cache.fixed)
        return unit_cap(self.model, count, self.topology.num_devices, self.planner.set_size_headroom)

    def repaired(self, placed: Placement, cap: int | None, from_greedy: bool) -> Placement:
        """The policy's repair steps on its placement of split cap ``cap`` (its devices, in
        place), if it was trained to repair. Where the placement is greedy's (``from_greedy``),
        they start by following the rounds of cost_greedy's local search from it."""
        if not self.policy.info.repair_rounds:
            return placed
        devices, guard = list(placed.devices), self.guard(placed.units)
        made = self._followed_greedy_search(devices, cap, guard) if from_greedy else 0
        if made is None:  # the search stopped where the rounds end, and so would the policy's
            return placed
        rounds = self.planner.max_rounds - made
        policy_repair(devices, self.policy, self.model, self.batch, guard, rounds, self.deadline)
        return placed

    def _followed_greedy_search(self, devices: list[DeviceState], cap: int | None, guard: int | None) -> int | None:
        """The repair steps that follow the rounds of cost_greedy's local search from greedy's
        placement ``devices`` (checked in one pass of the policy): how many it made, or None
        where it made them all."""
        greedy = self.greedy_at(cap)
        if greedy.rounds is None or greedy.searched_from != assignment(devices):
            return 0
        made = follow_recorded(devices, greedy.rounds, self.policy, guard)
        return None if made == len(greedy.rounds) else made

    def refined(self, cap: int | None) -> list[DeviceState]:
        """The sampled rollouts of the split cap where they may pay (``may_pay``), and local
        search from the best of them and the argmax rollout (on copies: the starts stay as they
        were); the lowest of them."""
        argmax, greedy = self.starts[cap]
        assert greedy is not None
        found = [[d.copy() for d in argmax.devices]]
        if self.may_pay(found[0], list(greedy.devices)):
            found += self.sampled(list(argmax.units))
        found.sort(key=max_load)
        self.search_best(found, greedy, self.guard(argmax.units))
        return min(found, key=max_load)

    def may_pay(self, argmax: list[DeviceState], greedy: list[DeviceState]) -> bool:
        """Whether samples could find a plan that rl+refine would return: one below the
        argmax rollout and clearly below cost_greedy's placement (``greedy``), and above
        ``_floor``; and the deadline has not expired."""
        returnable = min(max_load(greedy) * (1 - self.planner.departure_margin), max_load(argmax))
        return not self.deadline.expired and returnable > _floor(argmax, greedy, OWN_TOTAL_SLACK)

    def sampled(self, units: list[Unit]) -> list[list[DeviceState]]:
        """``samples`` rollouts of ``units`` side by side (one head call per step for all of
        them); a rollout into a dead end is dropped, the others stand."""
        planner, devices = self.planner, self.topology.num_devices
        together = self.model.accumulator(planner.samples * devices, self.batch)
        steps = self.cache.steps(units)
        states = [
            guarded_state(
                units,
                self.topology,
                self.model,
                self.batch,
                planner.set_size_headroom,
                AccumulatorView(together, k * devices, devices),
                steps,
                self.cache.fixed,
                self.cache.rules,
            )
            for k in range(planner.samples)
        ]
        choose = PolicyChooser(self.policy, self.rng, planner.temperature, SAMPLED_CANDIDATES).choose_many
        placed = place_together(states, choose, together, SAMPLED_CANDIDATES, self.deadline)
        return [s.devices for s in placed if s is not None]

    def search_best(self, found: list[list[DeviceState]], greedy: Placement, guard: int | None) -> None:
        """Local search (in place) from the ``refine_top`` lowest of ``found``, but from none it
        ends where it did already: greedy's start (the policy is its clone), the end of greedy's
        search where it stopped by itself, or a placement sampled twice."""
        planner = self.planner
        searched = {greedy.searched_from}
        if greedy.rounds is not None and len(greedy.rounds) < planner.max_rounds:  # its search stopped by itself:
            searched.add(assignment(list(greedy.devices)))  # from its end, a search ends there (rl's repair's)
        for states in found[: planner.refine_top]:
            start = assignment(states)
            if start in searched:
                continue
            searched.add(start)
            improve(states, self.model, self.batch, planner.max_rounds, self.deadline, max_units=guard)


def _floor(argmax: list[DeviceState], greedy: list[DeviceState], slack: float) -> float:
    """Below what no plan of these units is expected: the lower bound (the costliest unit alone),
    and cost_greedy's mean device cost less ``slack`` (a plan's max is at least its mean)."""
    mean = sum(s.load for s in greedy) / len(greedy)
    return max(lower_bound(argmax) * (1 + REL_TOL), (1 - slack) * mean)


def _greedy_best(starts: dict[int | None, tuple[Placement, Placement | None]], margin: float) -> list[DeviceState]:
    """cost_greedy's plan: of its searched placements at the planned split caps, the one it
    returns (``chosen_over_split``)."""
    return chosen_over_split([list(greedy.devices) for _, greedy in starts.values() if greedy is not None], margin)


def _kept_unless_clearly_lower(found: list[DeviceState], greedy: list[DeviceState], margin: float) -> list[DeviceState]:
    """``found`` if it is cost_greedy's placement or predicted more than ``margin`` below it; else
    cost_greedy's."""
    if assignment(found) == assignment(greedy) or clearly_lower(found, greedy, margin):
        return found
    return greedy

"""Planners driven by the trained policy: ``rl`` (argmax) and ``rl+refine`` (policy-guided search)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autoshard.core.costing import AccumulatorView
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
from autoshard.planners.split_cap_choice import best_over_split_caps, chosen_over_split, clearly_lower
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

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        batch = workload.batch_size
        cache = TaskCache.for_task(self.cache, workload, topology)
        task_units = cache.units(self.cost_model)
        rng = np.random.default_rng(self.seed)

        def guard(units: Sequence[Unit]) -> int | None:
            """The extrapolation guard of a placement of ``units`` (``unit_cap``)."""
            return unit_cap(self.cost_model, len(units), topology.num_devices, self.set_size_headroom)

        def start(units: list[Unit]) -> PlacementState:
            return guarded_state(
                units,
                topology,
                self.cost_model,
                batch,
                self.set_size_headroom,
                steps=cache.steps(units),
            )

        def rollout(cap: int | None, choose: Chooser) -> PlacementState:
            return place_workload(
                task_units, cap is not None, choose, start, max_ways=cap, scope=CANDIDATES, deadline=deadline
            )  # argmax_rollout's choosers score that many

        def sampled(units: list[Unit]) -> list[list[DeviceState]]:
            """``samples`` rollouts side by side (one head call per step for all of them)."""
            devices = topology.num_devices
            shared = self.cost_model.accumulator(self.samples * devices, batch)
            steps = cache.steps(units)
            states = [
                guarded_state(
                    units,
                    topology,
                    self.cost_model,
                    batch,
                    self.set_size_headroom,
                    AccumulatorView(shared, k * devices, devices),
                    steps,
                )
                for k in range(self.samples)
            ]
            choose = PolicyChooser(self.policy, rng, self.temperature, SAMPLED_CANDIDATES).choose_many
            placed = place_together(states, choose, shared, SAMPLED_CANDIDATES, deadline)
            return [s.devices for s in placed if s is not None]  # a rollout into a dead end: the others stand

        reused: list[float] = []  # seconds of the placements taken from the task's other planners

        def repaired(placed: Placement, cap: int | None, from_greedy: bool) -> Placement:
            """The policy's repair steps on its placement of split cap ``cap``, if it was trained
            to repair. Where the placement is greedy's (``from_greedy``), they start by following
            the rounds of cost_greedy's local search from it, checked in one pass of the policy."""
            if not self.policy.info.repair_rounds:
                return placed
            devices = list(placed.devices)
            cap_units = guard(placed.units)
            made = 0
            if from_greedy:
                greedy = searched_greedy(cache, self.cost_model, cap, self.max_rounds, deadline)
                reused.append(greedy.reused_s)
                if greedy.rounds is not None and greedy.searched_from == assignment(devices):
                    made = follow_recorded(devices, greedy.rounds, self.policy, cap_units)
                    if made == len(greedy.rounds):  # the search stopped there, and so would the policy's
                        return placed
            policy_repair(devices, self.policy, self.cost_model, batch, cap_units, self.max_rounds - made, deadline)
            return placed

        def argmax_at(cap: int | None) -> Placement:
            def place() -> tuple[Placement, bool]:
                path = None
                record = cache.recorded(greedy_steps_key(cap))
                if record is not None and record.same_under_cap(guard(record.units)):
                    path = recorded_departure(record, self.policy)  # greedy placed these units already
                    if path is None:  # ... and the policy's argmax takes greedy's device at every step
                        greedys = Placement(record.units, tuple(d.copy() for d in record.devices))
                        return repaired(greedys, cap, True), True
                state = argmax_rollout(lambda choose: rollout(cap, choose), self.policy, path=path)
                return repaired(Placement(tuple(state.units), tuple(state.devices)), cap, False), True

            key = ("rl argmax", cap, id(self.policy), self.set_size_headroom)
            found = cache.placement(key, place)
            reused.append(found.reused_s)
            return found

        starts: dict[int | None, tuple[Placement, Placement | None]] = {}  # per split cap: argmax, greedy's

        def start_at(cap: int | None) -> list[DeviceState]:
            """The argmax rollout of a split cap and, for rl+refine, cost_greedy's own searched
            placement (so that it is never worse than cost_greedy either): the lower of the two."""
            argmax = argmax_at(cap)
            greedy = None
            if self.samples:
                greedy = searched_greedy(cache, self.cost_model, cap, self.max_rounds, deadline)
                reused.append(greedy.reused_s)
            starts[cap] = (argmax, greedy)
            return lower_start(cap)

        def lower_start(cap: int | None) -> list[DeviceState]:
            return min([list(p.devices) for p in starts[cap] if p is not None], key=max_load)

        def refined(cap: int | None) -> list[DeviceState]:
            """The sampled rollouts of the split cap, and local search from the best of them and
            the argmax rollout (on copies: the starts stay as they were); no samples where
            ``_floor`` leaves no room for a plan it would return (the argmax rollout at the floor,
            or cost_greedy's plan within the departure margin of it)."""
            argmax, greedy = starts[cap]
            assert greedy is not None
            found = [[d.copy() for d in argmax.devices]]
            returnable = min(max_load(list(greedy.devices)) * (1 - self.departure_margin), max_load(found[0]))
            if not deadline.expired and returnable > _floor(found[0], list(greedy.devices), OWN_TOTAL_SLACK):
                found += sampled(list(argmax.units))  # else no plan it could return is lower than the floor
            found.sort(key=max_load)
            searched = {greedy.searched_from}
            if greedy.rounds is not None and len(greedy.rounds) < self.max_rounds:  # its search stopped by itself:
                searched.add(assignment(list(greedy.devices)))  # from its end, a search ends there (rl's repair's)
            for states in found[: self.refine_top]:
                start = assignment(states)
                if start in searched:  # the search from here ends where it did: greedy's (the policy is
                    continue  # its clone), or one of these placements sampled twice
                searched.add(start)
                improve(states, self.cost_model, batch, self.max_rounds, deadline, max_units=guard(argmax.units))
            return min(found, key=max_load)

        deadline = Deadline(started, self.time_budget_s)
        best = best_over_split_caps(
            topology, self.allow_column_split, start_at, task_units.at_cap, self.departure_margin, deadline
        )
        if self.samples:  # the samples and their local search at each planned cap, the lowest start first
            ranked = sorted(starts, key=lambda cap: max_load(lower_start(cap)))
            best = min([best, *(refined(cap) for cap in ranked)], key=max_load)
        if self.samples:
            best = _kept_unless_clearly_lower(best, _greedy_best(starts, self.departure_margin), self.departure_margin)
        return build_plan(self.name, best, started, batch, partial=deadline.hit, reused_s=sum(reused))


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

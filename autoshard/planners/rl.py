"""Planners driven by the trained policy: ``rl`` (argmax) and ``rl+refine`` (policy-guided search)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autoshard.costing import AccumulatorView
from autoshard.planners.cost_greedy import searched_greedy
from autoshard.planners.local_search import REL_TOL, improve, lower_bound
from autoshard.planners.placement import (Chooser, Deadline, DeviceState, PlacementState, assignment,
                                          best_over_split_caps, build_plan, place_together, place_workload)
from autoshard.planners.ruin_recreate import RuinRecreateConfig, ruin_and_recreate
from autoshard.planners.shared import Placement, SharedWork, placement_of, steps_of
from autoshard.planners.units import Unit, model_costs
from autoshard.rl.env import guarded_state
from autoshard.rl.rollout import PolicyChooser
from autoshard.types import CostModel, ShardingPlan, Topology, Workload

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy

SAMPLED_CANDIDATES = 32  # sampled rollouts score more devices than the argmax one: diversity for the search


@dataclass(frozen=True)
class RLPlanner:
    """The policy places units largest predicted cost first, each on its best-scored device
    among those the mask allows (room, the extrapolation guard, the packing lookahead: as in
    ``ShardingEnv``); deterministic. With column splitting, the policy places the shards of
    every split cap (none, 2, 4, ... D ways) and the lowest predicted max is kept.

    ``samples`` > 0 makes it ``rl+refine``, a policy-guided search: besides the argmax rollout,
    ``samples`` rollouts drawn from the policy's softmax at ``temperature`` (seeded; of the
    argmax rollout's units, stepped side by side so that one head call scores a step of all of
    them and one pass of the policy chooses for all; one that runs into a dead end is dropped);
    local search (moves and swaps, as cost_greedy) on the ``refine_top`` best of them, except one
    it has searched from already (greedy's placement, or a sample drawn twice), and on
    cost_greedy's own placement (without the extrapolation guard, as cost_greedy places), so
    that it is never worse than cost_greedy either; then ``search`` (``ruin_recreate``) from
    the best of them (of every split cap's), the policy, sampling, re-placing the ruined
    devices' units. The lowest predicted max wins, so it is never worse than ``rl``.
    Past ``time_budget_s`` the search stops and the best plan so far comes back ``partial``
    (the argmax rollout always completes). With ``shared``, the argmax rollout and cost_greedy's
    searched placement come from the planners of the task that computed them first (``rl``,
    ``cost_greedy``).
    """

    cost_model: CostModel
    policy: DevicePolicy
    allow_column_split: bool = False
    samples: int = 0
    refine_top: int = 2
    temperature: float = 1.0
    seed: int = 0
    set_size_headroom: float = 1.25
    max_rounds: int = 50
    search: RuinRecreateConfig = RuinRecreateConfig()
    time_budget_s: float | None = None
    name: str = "rl"
    shared: SharedWork | None = None

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        batch = workload.batch_size
        cost_fn = model_costs(self.cost_model, batch)
        rng = np.random.default_rng(self.seed)

        def start(units: list[Unit], devices: Topology = topology) -> PlacementState:
            return guarded_state(units, devices, self.cost_model, batch, self.set_size_headroom,
                                 steps=steps_of(self.shared, workload, devices, units))

        def rollout(cap: int | None, choose: Chooser) -> PlacementState:
            return place_workload(workload, topology, cost_fn, cap is not None, choose, start, max_ways=cap)

        def sampled(units: list[Unit]) -> list[list[DeviceState]]:
            """``samples`` rollouts side by side (one head call per step for all of them)."""
            devices = topology.num_devices
            shared = self.cost_model.accumulator(self.samples * devices, batch)
            steps = steps_of(self.shared, workload, topology, units)
            states = [guarded_state(units, topology, self.cost_model, batch, self.set_size_headroom,
                                    AccumulatorView(shared, k * devices, devices), steps) for k in range(self.samples)]
            choose = PolicyChooser(self.policy, rng, self.temperature, SAMPLED_CANDIDATES).choose_many
            placed = place_together(states, choose, shared, SAMPLED_CANDIDATES, deadline)
            return [s.devices for s in placed if s is not None]  # a rollout into a dead end: the others stand

        reused: list[float] = []  # seconds of the placements taken from the task's other planners

        def argmax_at(cap: int | None) -> Placement:
            def place() -> tuple[Placement, bool]:
                state = rollout(cap, PolicyChooser(self.policy))
                return Placement(tuple(state.units), tuple(state.devices)), True

            key = ("rl argmax", cap, id(self.policy), self.set_size_headroom)
            found = placement_of(self.shared, workload, topology, key, place)
            reused.append(found.reused_s)
            return found

        def plan_at(cap: int | None) -> list[DeviceState]:
            argmax = argmax_at(cap)
            found = [list(argmax.devices)]
            if not self.samples:
                return found[0]
            # cost_greedy's own searched placement: rl+refine is never worse than it
            greedy = searched_greedy(workload, topology, self.cost_model, cap, self.max_rounds, deadline, self.shared)
            reused.append(greedy.reused_s)
            seed = list(greedy.devices)
            bound = lower_bound(found[0]) * (1 + REL_TOL)
            if not deadline.expired and min(_max_load(s) for s in (seed, *found)) > bound:
                found += sampled(list(argmax.units))  # else at the lower bound: no plan can be better
            found.sort(key=_max_load)
            searched = {greedy.searched_from}
            for states in found[:self.refine_top]:
                start = assignment(states)
                if start in searched:  # the search from here ends where it did: greedy's (the policy is
                    continue  # its clone), or one of these placements sampled twice
                searched.add(start)
                improve(states, self.cost_model, batch, self.max_rounds, deadline)
            return min([seed, *found], key=_max_load)

        def sampler() -> PolicyChooser:
            return PolicyChooser(self.policy, rng, self.temperature, SAMPLED_CANDIDATES)

        deadline = Deadline(started, self.time_budget_s)
        best = best_over_split_caps(topology, self.allow_column_split, plan_at, deadline)
        if self.samples and self.search.iterations:  # once, from the best split cap's plan: not once per cap
            best = ruin_and_recreate(best, self.cost_model, batch, topology, start, sampler, rng, self.search,
                                     deadline)
        return build_plan(self.name, best, started, batch, partial=deadline.hit, reused_s=sum(reused))


def _max_load(states: list[DeviceState]) -> float:
    return max(s.load for s in states)

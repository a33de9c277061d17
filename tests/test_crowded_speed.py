"""What cost_greedy computes once for the many placements of one spread task (decision 68's
crowded tasks made a TorchRec task plan 5 passes of a dozen of them): each start copies the
fixed shards' holding (``TaskCache.held``), a unit order that dead-ended is not placed again
(``place_workload``'s ``dead_ends``), a split's shards are made once (``split_units``'
``memo``) and a spread run's units are taken whole from ``spread_option_memo``. Each must leave
the numbers as they were."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from autoshard.core.errors import PlannerError
from autoshard.core.types import Table, TableShard, Topology, Workload
from autoshard.planners.column_split import split_units
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.deadline import Deadline
from autoshard.planners.place_loop import place_workload
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.sharding_options import ALL_TYPES, place_spread, spread_costs, spread_option_memo
from autoshard.planners.spread_variants import SpreadVariant
from autoshard.planners.task_cache import TaskCache
from autoshard.planners.unit_preparation import TaskUnits
from tests.cost_models import AnalyticalTestCostModel, FixedCostTestModel
from tests.test_crowded_out import crowded_workload

GIB = 2**30


def spread_task(model: object) -> TaskCache:
    """crowded_workload's rest around ``huge`` row-split (its fixed shards), as a variant's task."""
    workload, topology = crowded_workload(), Topology.cluster(1, 4, 1.0)
    huge = workload.tables[0]
    options_of = SpreadVariant("needed", (huge,), frozenset()).options_of(topology, ALL_TYPES)
    fixed = place_spread([huge], options_of, topology, model_costs(model, workload.batch_size))  # type: ignore[arg-type]
    return TaskCache(replace(workload, tables=workload.tables[1:]), topology, fixed)


def snapshot(state: PlacementState, probe: Table) -> tuple:
    return (
        [[u.name for u in d.units] for d in state.devices],
        [(d.memory_bytes, d.load, sorted(d.parents)) for d in state.devices],
        state.free.tolist(),
        state.count.tolist(),
        state.loads.tolist(),
        sorted(state._placed_parents),
        None if state.accumulator is None else state.accumulator.costs_if_added(probe).tolist(),
    )


@pytest.mark.parametrize("model", [FixedCostTestModel(), AnalyticalTestCostModel()])
def test_a_start_from_the_held_state_is_the_state_holding_the_fixed_shards_itself(model):
    task = spread_task(model)
    held = task.held(model)
    assert held is not None and held is task.held(model)  # made once a task and model
    units = sorted(task.units(model).at_cap(None), key=lambda u: u.memory_bytes)  # a small table first
    topology, batch = task.topology, task.workload.batch_size
    own = PlacementState(units, topology, model.accumulator(4, batch), fixed=task.fixed, max_units_per_device=2)
    copied = PlacementState(
        units, topology, model.accumulator(4, batch), fixed=task.fixed, max_units_per_device=2, held=held
    )
    probe = units[0].table
    assert snapshot(copied, probe) == snapshot(own, probe)
    assert copied._capped == own._capped
    copied.apply(int(copied.allowed()[0]))  # its devices are its own
    assert [len(d.units) for d in held.devices] == [len(d.units) for d in own.devices]
    other = PlacementState(units, topology, model.accumulator(4, batch), fixed=tuple(task.fixed), held=held)
    assert snapshot(other, probe) == snapshot(own, probe)  # other fixed units than held's: held itself


def test_cost_greedy_plans_the_crowded_workload_as_before():
    """decision 68's by-hand plan (tests/test_crowded_out.py), through the held starts."""
    plan = CostGreedyPlanner(FixedCostTestModel(fixed=1.0, per_table=0.1)).plan(
        crowded_workload(), Topology.cluster(1, 4, 1.0)
    )
    assert abs(plan.max_cost_ms - 1.3) < 1e-9


def test_a_unit_order_known_to_dead_end_fails_again_without_being_placed():
    """Three 6 GiB tables on two 10 GiB devices: no order packs. The second placement of the
    same order raises the first one's error and starts no state; past the deadline it is placed."""
    topology = Topology(2, 10.0)
    tables = [Table(f"t{i}", 6 * GIB // 64, 16) for i in range(3)]
    units = TaskUnits(Workload(tuple(tables)), topology, lambda ts: [1.0 for _ in ts])
    started: list[int] = []

    def start(us: list[Unit]) -> PlacementState:
        started.append(len(us))
        return PlacementState(us, topology, lookahead=True)

    def first(state: PlacementState, allowed: np.ndarray) -> int:
        return int(allowed[0])

    dead_ends: dict[tuple[str, ...], PlannerError] = {}
    with pytest.raises(PlannerError) as failed:
        place_workload(units, False, first, start, dead_ends=dead_ends)
    assert started == [3] and list(dead_ends) == [("t0", "t1", "t2")]
    with pytest.raises(PlannerError) as again:
        place_workload(units, False, first, start, dead_ends=dead_ends)
    assert again.value is failed.value and started == [3]
    expired = Deadline(time.perf_counter() - 10.0, 1.0)
    with pytest.raises(PlannerError):
        place_workload(units, False, first, start, deadline=expired, dead_ends=dead_ends)
    assert started[1:] == [3, 3]  # placed without the lookahead, then again with it


def test_split_units_with_a_memo_splits_alike_and_makes_each_shard_once():
    topology = Topology(8, 10.0)
    tables = [Table("wide", 1000, 128, pooling_factor=20.0), *(Table(f"t{i}", 100, 16) for i in range(6))]
    cost_fn = model_costs(AnalyticalTestCostModel(), 512)
    whole = [Unit.of(TableShard(t), c) for t, c in zip(tables, cost_fn(tables))]
    memo: dict = {}
    for ways in (None, 8, 4, 2):
        plain = split_units(whole, cost_fn, topology, max_ways=ways)
        kept = split_units(whole, cost_fn, topology, max_ways=ways, memo=memo)
        assert kept == plain and [u.cost for u in kept] == [u.cost for u in plain]
        assert len(kept) > len(whole) or ways == 2  # the wide table splits
    again = split_units(whole, cost_fn, topology, max_ways=8, memo=memo)
    assert all(a is b for a, b in zip(again, split_units(whole, cost_fn, topology, max_ways=8, memo=memo)))


def test_place_spread_takes_a_run_it_priced_from_the_memo_with_the_same_result():
    model = AnalyticalTestCostModel()
    workload, topology = crowded_workload(), Topology.cluster(1, 4, 1.0)
    huge, big = workload.tables[:2]
    options_of = SpreadVariant("needed", (huge, big), frozenset()).options_of(topology, ALL_TYPES)
    plain = place_spread([huge, big], options_of, topology, model_costs(model, 512))
    with spread_option_memo():
        cost_fn = spread_costs(model, 512)
        first = place_spread([huge, big], options_of, topology, cost_fn)
        calls = model.calls
        second = place_spread([huge, big], options_of, topology, cost_fn)
        assert model.calls == calls + 1  # the tables whole (their order) alone: no shard priced again
    assert second == first == plain

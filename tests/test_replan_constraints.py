"""Re-planning honours the workload's constraints: new tables take the types, pins and groups
their constraints allow; kept shards a constraint no longer allows are placed anew; a table whose
types re-planning does not place is refused by name."""

from __future__ import annotations

import pytest

from autoshard.core.constraints import Apart, Constraints, Pin, TableConstraints
from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload
from autoshard.planners.incremental import CurrentPlacement, KeptShard, MoveBudget, replan
from autoshard.planners.validate import validate_plan
from tests.cost_models import AnalyticalTestCostModel

MODEL = AnalyticalTestCostModel()
CW, TW, TCW, RW = (
    ShardingType.COLUMN_WISE,
    ShardingType.TABLE_WISE,
    ShardingType.TABLE_COLUMN_WISE,
    ShardingType.ROW_WISE,
)


def _kinds(plan) -> dict[str, set[ShardingType]]:
    out: dict[str, set[ShardingType]] = {}
    for device in plan.devices:
        for shard in device.shards:
            out.setdefault(shard.table.name, set()).add(shard.sharding_type)
    return out


def _ranks(plan, name: str) -> set[int]:
    return {r for r, d in enumerate(plan.devices) for s in d.shards if s.table.name == name}


def _task(constraints: Constraints) -> tuple[Workload, CurrentPlacement]:
    tables = tuple(Table(f"t{i}", 1000, 32, 10.0 * (i + 1)) for i in range(6))
    current = CurrentPlacement((KeptShard("t0", 0, 0, 32), KeptShard("t1", 1, 0, 16), KeptShard("t1", 2, 16, 16)), 4)
    return Workload(tables, 512, "r", constraints), current


@pytest.mark.parametrize("moves", [0, 4])
def test_new_and_kept_tables_take_the_types_pins_and_groups_they_allow(moves):
    constraints = Constraints(
        (
            ("t0", TableConstraints(frozenset({CW}))),  # kept whole: one column_wise block
            ("t2", TableConstraints(frozenset({CW}), min_partition=16)),
            ("t3", TableConstraints(frozenset({TCW, TW}))),
        ),
        (Pin("t4", (3,)), Apart(("t4", "t5"))),
    )
    workload, current = _task(constraints)
    topology = Topology.cluster(2, 2, 1.0)
    found = replan(workload, topology, MODEL, current, MoveBudget(moves))
    validate_plan(found.plan, workload, topology)
    kinds = _kinds(found.plan)
    assert kinds["t0"] == {CW} and kinds["t1"] == {CW} and kinds["t2"] == {CW}
    assert kinds["t3"] <= {TW, TCW}
    assert all(s.width >= 16 for d in found.plan.devices for s in d.shards if s.table.name == "t2")
    if kinds["t3"] == {TCW}:
        assert len({topology.host_of(r) for r in _ranks(found.plan, "t3")}) == 1
    assert _ranks(found.plan, "t4") == {3} and not _ranks(found.plan, "t4") & _ranks(found.plan, "t5")


def test_kept_column_blocks_a_constraint_no_longer_allows_are_placed_anew():
    constraints = Constraints((("t1", TableConstraints(frozenset({TW}))),))
    workload, current = _task(constraints)
    found = replan(workload, Topology(4, 1.0), MODEL, current, MoveBudget(0))
    assert found.replaced == ("t1",) and _kinds(found.plan)["t1"] == {TW}


def test_a_table_replan_cannot_place_is_refused_by_name():
    constraints = Constraints((("t2", TableConstraints(frozenset({RW}))),))
    workload, current = _task(constraints)
    with pytest.raises(PlannerError) as refused:
        replan(workload, Topology(4, 1.0), MODEL, current, MoveBudget(0))
    assert refused.value.kind is PlannerErrorKind.CONSTRAINTS_CONFLICT and "'t2'" in refused.value.message

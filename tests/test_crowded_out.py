"""Tables crowded out by spread shards (``spread_variants.crowded_out``): where row-splitting the
tables that fit no device leaves no device room for another table whole, cost_greedy also plans
the variant with that table row-split and the rest placed whole, which beats spreading every
table when each shard a device holds costs as much as a whole table (TorchRec's estimator with
few tables a device; criteo_tb_uncapped_1x8 at half memory)."""

from __future__ import annotations

from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.spread_variants import crowded_out
from tests.cost_models import FixedCostTestModel

GIB = 2**30
ROW_BYTES = 128 * 4  # 128 dims of fp32, SGD (no optimizer state)


def crowded_workload() -> Workload:
    """On 4 devices of 1 GiB: ``huge`` (3 GiB) fits none and is row-split, 0.75 GiB a device;
    ``big`` (0.5 GiB) then fits no device whole (0.25 GiB left), but its row split (0.125 GiB a
    device) does; four small tables fit anywhere."""
    tables = [Table("huge", 3 * GIB // ROW_BYTES, 128), Table("big", GIB // 2 // ROW_BYTES, 128)]
    tables += [Table(f"small{i}", 1000, 128) for i in range(4)]
    return Workload(tuple(tables), 512, "crowded")


def test_a_table_with_no_room_beside_the_spread_shards_is_crowded_out():
    workload, topology = crowded_workload(), Topology.cluster(1, 4, 1.0)
    huge, big, *small = workload.tables
    free = [topology.device_memory_bytes - huge.memory_bytes // 4] * 4
    assert crowded_out([big, *small], free, topology, ALL_TYPES) == [big]
    assert crowded_out([big, *small], [topology.device_memory_bytes] * 4, topology, ALL_TYPES) == []
    table_wise_only = frozenset({ShardingType.TABLE_WISE})
    assert crowded_out([big], free, topology, table_wise_only) == []  # may not be spread


def test_cost_greedy_row_splits_the_crowded_table_and_keeps_the_rest_whole():
    """A device costs 1 + 0.1 per shard it holds. Spreading every table puts a shard of each of
    the 6 on every device: 1 + 0.1 x 6 = 1.6 ms. Row-splitting huge and big (2 shards a device)
    and one small table whole on each device: 1 + 0.1 x 3 = 1.3 ms, the lowest max there is
    (huge must be spread; big fits nowhere whole beside it)."""
    workload, topology = crowded_workload(), Topology.cluster(1, 4, 1.0)
    plan = CostGreedyPlanner(FixedCostTestModel(fixed=1.0, per_table=0.1)).plan(workload, topology)
    assert abs(plan.max_cost_ms - 1.3) < 1e-9
    kinds = {s.table.name: s.sharding_type for d in plan.devices for s in d.shards}
    assert kinds["huge"] in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
    assert kinds["big"] in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
    assert all(kinds[f"small{i}"] == ShardingType.TABLE_WISE for i in range(4))

"""TorchRec's sharding types: each type's memory and communication by hand on tiny tasks, the
planners' choice of options, the exact cover of every plan (property test), and the errors."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType, row_block_shares, row_blocks
from autoshard.core.types import GIB, Optimizer, Table, TableShard, Topology, Workload, replica, row_shards
from autoshard.planners.context import PlannerContext
from autoshard.planners.sharding_options import PLACED_TYPES, spread_options
from autoshard.planners.validate import validate_plan
from autoshard.planning.registry import make_planner
from tests.cost_models import AnalyticalTestCostModel

# 1,000 rows x 16 columns, fp32, row-wise Adagrad: 64,000 bytes of weights + 4,000 of state
T = Table("t", 1000, 16, pooling_factor=8.0, optimizer=Optimizer.ROWWISE_ADAGRAD)
CLUSTER = Topology.cluster(2, 2, 1.0)  # 2 hosts x 2 devices


def test_each_types_memory_by_hand():
    assert TableShard(T).memory_bytes == 68_000  # table_wise: all of it
    assert TableShard(T, 0, 8).memory_bytes == 1000 * 8 * 4 + 1000 * 4  # column_wise: half the columns, all the state
    assert [s.memory_bytes for s in row_shards(T, 4, ShardingType.ROW_WISE)] == [17_000] * 4  # 250 rows each
    assert [s.memory_bytes for s in row_shards(T, 2, ShardingType.TABLE_ROW_WISE)] == [34_000] * 2
    grid = row_shards(T, 2, ShardingType.GRID_SHARD, 8, 8)
    assert [(s.row_offset, s.height, s.column_offset, s.width, s.memory_bytes) for s in grid] == [
        (0, 500, 8, 8, 500 * 8 * 4 + 500 * 4),
        (500, 500, 8, 8, 18_000),
    ]
    assert replica(T, 4).memory_bytes == 68_000  # data_parallel: a full replica on every device


def test_row_blocks_follow_torchrecs_sizes_and_shares_follow_the_lookups():
    assert row_blocks(10, 4) == ((0, 3), (3, 3), (6, 3), (9, 1))
    assert row_blocks(9, 4) == ((0, 3), (3, 3), (6, 3), (9, 0))  # TorchRec leaves the last rank empty
    uniform = row_block_shares(10, 0.0, row_blocks(10, 4))
    assert uniform == pytest.approx((0.3, 0.3, 0.3, 0.1))
    skewed = row_block_shares(1000, 1.2, row_blocks(1000, 4))
    assert sum(skewed) == pytest.approx(1.0)
    assert max(skewed) > 0.3  # the hottest row is indivisible: its block serves more than 1/4
    shards = row_shards(Table("z", 1000, 8, pooling_factor=4.0, zipf_alpha=1.2), 4, ShardingType.ROW_WISE)
    assert [s.as_table.pooling_factor for s in shards] == pytest.approx([4.0 * x for x in skewed])
    assert replica(T, 4).as_table.pooling_factor == 2.0  # its device's quarter of the samples


def test_each_types_communication_by_hand():
    # 1 GB/s measured, 0.01 ms latency; 2 hosts x 2 devices, 0.5 GiB/s between hosts; batch 100
    # per rank: a sharded shard serves every rank's 400 bags
    comm = CommunicationModel(1.0, 0.01)
    cluster = Topology.cluster(2, 2, 1.0, inter_host_bw_gbps=0.5)
    remote_per_ms = 0.5 * GIB / 1000  # slower than the measured 1e6 bytes/ms

    def cost(shard: TableShard) -> float:
        return comm.cost_ms([shard.as_table], 100, cluster)

    # table_wise, 16 dims: 2 x 400 x 16 x 4 bytes, 1/4 to the host's other device, 2/4 to the other host
    tw = 0.02 + 51_200 * 1 / 4 / 1e6 + 51_200 * 2 / 4 / remote_per_ms
    assert cost(TableShard(T)) == pytest.approx(tw)
    assert cost(row_shards(T, 4, ShardingType.ROW_WISE)[0]) == pytest.approx(tw)  # reduce-scatter: the same bytes
    # table_row_wise: reduce-scatter in the host (2 x 400 x 16 x 4 x 1/2), then half the rows to the other host
    twrw = 0.02 + 51_200 / 2 / 1e6 + 51_200 / 2 * 2 / 4 / remote_per_ms
    assert cost(row_shards(T, 2, ShardingType.TABLE_ROW_WISE)[0]) == pytest.approx(twrw)
    assert twrw < tw
    # data_parallel: no output, whatever the batch; a ring all-reduce of the 64,000-byte gradient,
    # 2 x 3/4 of it, across hosts
    assert cost(replica(T, 4)) == pytest.approx(0.02 + 2 * 3 / 4 * 64_000 / remote_per_ms)
    # one host: no remote part
    assert comm.cost_ms([replica(T, 2).as_table], 100, 2) == pytest.approx(0.02 + 2 * 1 / 2 * 64_000 / 1e6)


def test_options_of_a_table_on_a_cluster():
    options = spread_options(T, CLUSTER)
    kinds = [(o.sharding_type, o.host, o.ranks) for o in options]
    assert (ShardingType.ROW_WISE, None, (0, 1, 2, 3)) in kinds
    assert (ShardingType.TABLE_ROW_WISE, 0, (0, 1)) in kinds and (ShardingType.TABLE_ROW_WISE, 1, (2, 3)) in kinds
    assert (ShardingType.GRID_SHARD, 1, (2, 3, 0, 1)) in kinds  # column block 0 on host 1, block 1 on host 0
    assert (ShardingType.DATA_PARALLEL, None, (0, 1, 2, 3)) in kinds
    assert not spread_options(Table("few", 3, 16), CLUSTER, {ShardingType.ROW_WISE})  # fewer rows than devices


def test_a_table_larger_than_a_device_is_row_sharded_and_local_search_leaves_its_shards():
    giant = Table("giant", 100_000, 64)  # 25.6 MB
    small = tuple(Table(f"s{i}", 1000, 16, float(1 + i)) for i in range(12))
    workload = Workload((giant, *small), batch_size=512)
    topology = Topology.cluster(2, 4, 10_000_000 / GIB)  # 10 MB a device: the giant needs 3+ devices
    model = WithCommunication(AnalyticalTestCostModel(), CommunicationModel(1.0, 0.01), topology)
    for name in ("cost_greedy", "size_greedy", "lookup_greedy"):
        plan = make_planner(name, PlannerContext(model, allow_column_split=False)).plan(workload, topology)
        validate_plan(plan, workload, topology)
        kinds = {s.sharding_type for d in plan.devices for s in d.shards if s.table is giant}
        assert kinds <= {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD}, name
    with pytest.raises(PlannerError) as info:
        make_planner("cost_greedy", PlannerContext(model, allow_column_split=False, sharding_types=PLACED_TYPES)).plan(
            workload, topology
        )
    assert info.value.kind is PlannerErrorKind.TABLE_DOES_NOT_FIT and "'giant'" in info.value.message


def test_a_table_that_fits_under_no_sharding_type_is_named():
    giant = Table("giant", 1_000_000, 64)  # 256 MB: a quarter is 64 MB, over every 50 MB device
    workload = Workload((giant, Table("s", 10, 4)))
    topology = Topology.cluster(2, 2, 50_000_000 / GIB)
    for name in ("cost_greedy", "size_greedy"):
        with pytest.raises(PlannerError) as info:
            make_planner(name, PlannerContext(AnalyticalTestCostModel())).plan(workload, topology)
        error = info.value
        assert error.kind in (PlannerErrorKind.TABLE_DOES_NOT_FIT, PlannerErrorKind.INSUFFICIENT_MEMORY)
        assert "giant" in error.message or "need" in error.message


def test_a_heavy_table_goes_row_wise_when_it_clearly_lowers_the_max():
    hot = Table("hot", 50_000, 128, pooling_factor=60.0)  # its lookups dwarf the rest
    rest = tuple(Table(f"s{i}", 1000, 16, 2.0) for i in range(14))
    workload = Workload((hot, *rest), batch_size=2048)
    topology = Topology.cluster(1, 8, 1.0)
    model = AnalyticalTestCostModel()
    spread = make_planner("cost_greedy", PlannerContext(model, allow_column_split=False)).plan(workload, topology)
    whole = make_planner("cost_greedy", PlannerContext(model, allow_column_split=False, sharding_types=PLACED_TYPES))
    placed = whole.plan(workload, topology)
    validate_plan(spread, workload, topology)
    assert {s.sharding_type for d in spread.devices for s in d.shards if s.table is hot} & {
        ShardingType.ROW_WISE,
        ShardingType.TABLE_ROW_WISE,
    }
    assert spread.max_cost_ms < 0.9 * placed.max_cost_ms  # past the departure margin


@st.composite
def cluster_tasks(draw):
    hosts, local = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    n = draw(st.integers(1, 10))
    tables = tuple(
        Table(
            f"t{i}",
            draw(st.integers(1, 20_000)),
            draw(st.sampled_from((4, 8, 16, 32))),
            draw(st.floats(0.5, 20.0)),
            zipf_alpha=draw(st.sampled_from((0.0, 1.0))),
            optimizer=draw(st.sampled_from((Optimizer.SGD, Optimizer.ROWWISE_ADAGRAD))),
        )
        for i in range(n)
    )
    workload = Workload(tables, batch_size=draw(st.sampled_from((64, 2048))))
    slack = draw(st.floats(0.3, 3.0))
    capacity = max(64, int(slack * workload.memory_bytes / (hosts * local)))
    return workload, Topology.cluster(hosts, local, capacity / GIB)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=cluster_tasks(), planner=st.sampled_from(("cost_greedy", "size_greedy", "lookup_greedy", "round_robin")))
def test_every_plan_covers_every_tables_rows_and_columns_once_within_memory(task, planner):
    workload, topology = task
    try:
        plan = make_planner(planner, PlannerContext(AnalyticalTestCostModel(), replicate_tiny=True)).plan(
            workload, topology
        )
    except PlannerError as error:
        assert error.kind in (PlannerErrorKind.INSUFFICIENT_MEMORY, PlannerErrorKind.TABLE_DOES_NOT_FIT)
        return
    validate_plan(plan, workload, topology)
    cells = {t.name: 0 for t in workload.tables}  # rows x columns covered (a replica: once per device)
    replicas = dict.fromkeys(cells, 0)
    for rank, device in enumerate(plan.devices):
        assert device.memory_bytes <= topology.device_memory_bytes_of(rank)
        for shard in device.shards:
            if shard.sharding_type is ShardingType.DATA_PARALLEL:
                replicas[shard.table.name] += 1
            else:
                cells[shard.table.name] += shard.height * shard.width
            if shard.sharding_type.within_host:
                hosts = {
                    topology.host_of(r) for r, d in enumerate(plan.devices) for s in d.shards if s.table is shard.table
                }
                assert len(hosts) == 1 or shard.sharding_type is ShardingType.GRID_SHARD
    for table in workload.tables:
        if replicas[table.name]:
            assert replicas[table.name] == topology.num_devices and cells[table.name] == 0
        else:
            assert cells[table.name] == table.num_embeddings * table.embedding_dim


def test_option_search_row_shards_a_table_that_binds_the_max_device_and_undoes_a_needless_spread():
    from autoshard.planners.device_state import DeviceState
    from autoshard.planners.option_search import change_options
    from autoshard.planners.placement_unit import Unit

    model, topology = AnalyticalTestCostModel(), Topology.cluster(1, 4, 1.0)
    hot = Table("hot", 40_000, 64, 50.0)
    cold = tuple(Table(f"c{i}", 1000, 16, 1.0) for i in range(3))

    def states(placements: list[tuple[int, TableShard]]) -> list[DeviceState]:
        devices = [DeviceState(d, topology.device_memory_bytes_of(d)) for d in range(4)]
        for rank, shard in placements:
            devices[rank].add(Unit.of(shard, model.predict([shard.as_table], 2048)), 0.0)
        for d in devices:
            d.load = model.predict(d.tables, 2048) if d.units else 0.0
        return devices

    bound = states([(0, TableShard(hot)), *((i + 1, TableShard(t)) for i, t in enumerate(cold))])
    before = max(d.load for d in bound)
    assert change_options(bound, model, topology, 2048, frozenset(ShardingType)) >= 1
    kinds = {u.shard.sharding_type for d in bound for u in d.units if u.parent == "hot"}
    assert kinds & {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE}
    assert max(d.load for d in bound) < before
    # a tiny table row-sharded over every device, one of them busy: each shard pays the per-table
    # overhead, so table-wise on a quiet device is cheaper
    tiny = Table("tiny", 400, 16, 1.0)
    rows = row_shards(tiny, 4, ShardingType.ROW_WISE)
    spread = states([*enumerate(rows), (0, TableShard(cold[0])), (0, TableShard(cold[1])), (1, TableShard(cold[2]))])
    assert change_options(spread, model, topology, 2048, frozenset(ShardingType)) >= 1
    placed = [(d, u.shard.sharding_type) for d, s in enumerate(spread) for u in s.units if u.parent == "tiny"]
    assert placed in ([(2, ShardingType.TABLE_WISE)], [(3, ShardingType.TABLE_WISE)])


def test_a_plans_labels_read_back_as_its_shards():
    from autoshard.core.shard_labels import plan_shards

    skewed = Table("z", 1000, 16, 4.0, zipf_alpha=1.0)
    other = Table("o", 50, 8)
    rw = row_shards(skewed, 4, ShardingType.ROW_WISE)
    devices = [[s] for s in rw]
    for d in range(4):
        devices[d].append(replica(other, 4))
    tables = {"z": skewed, "o": other}
    assert plan_shards([[s.label for s in d] for d in devices], tables, 2) == [tuple(d) for d in devices]
    twrw = row_shards(skewed, 2, ShardingType.TABLE_ROW_WISE)
    grid = [*row_shards(other, 2, ShardingType.GRID_SHARD, 0, 4), *row_shards(other, 2, ShardingType.GRID_SHARD, 4, 4)]
    devices = [[twrw[0], grid[0]], [twrw[1], grid[1]], [grid[2]], [grid[3], TableShard(Table("w", 9, 8), 0, 4)]]
    tables["w"] = Table("w", 9, 8)
    devices[2].append(TableShard(tables["w"], 4, 4))
    assert plan_shards([[s.label for s in d] for d in devices], tables, 2) == [tuple(d) for d in devices]
    with pytest.raises(KeyError):
        plan_shards([["nope[r0:5]"]], tables)

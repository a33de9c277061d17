"""The TorchRec bridge and TorchRec's planner: conversions both ways for every sharding type
(checked against TorchRec's own generators), the JSON export, planning with memory limits, its
full search on clusters, the drop-in planner's cluster, and a plan of ours run by
DistributedModelParallel on 2 CPU processes (every sharding type under DMP:
test_dmp_sharding_types.py)."""

import json
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.sharding_plan import (  # noqa: E402
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    grid_shard,
    row_wise,
    table_row_wise,
    table_wise,
)
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan  # noqa: E402
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402

from autoshard.core.costing import SetCostModel  # noqa: E402
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import (  # noqa: E402
    DevicePlan,
    Optimizer,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
    replica,
    row_shards,
)
from autoshard.planners.validate import validate_plan  # noqa: E402
from autoshard.torchrec.bridge import (  # noqa: E402
    MODULE_PATH,
    ShardPlacement,
    embedding_bag_collection,
    export_torchrec,
    from_torchrec_plan,
    parameter_constraints_from_export,
    plan_from_export,
    table_placements,
    table_shardings,
    to_embedding_bag_configs,
    to_parameter_constraints,
    to_torchrec_plan,
)
from autoshard.torchrec.dmp_run import exit_finished_rank  # noqa: E402
from autoshard.torchrec.planner import TorchRecPlanner  # noqa: E402
from tests.dmp_support import (  # noqa: E402
    all_types_plan,
    all_types_workload,
    assert_sharded_matches_reference,
    free_port,
)

MIB = 1024**2


def small_workload() -> Workload:
    tables = tuple(
        Table(
            f"t{i}",
            1000 * (i + 1),
            (16, 32, 64, 256)[i % 4],
            pooling_factor=1 + i % 3,
            optimizer=Optimizer.ROWWISE_ADAGRAD,
        )
        for i in range(8)
    )
    return Workload(tables, batch_size=512)


def hand_plan() -> tuple[Workload, ShardingPlan]:
    """2 devices, 4 tiny tables; ``b`` split 12 + 4 columns (uneven) across both devices."""
    a, b, c, d = (Table("a", 50, 8), Table("b", 100, 16), Table("c", 30, 16, pooling_factor=2.0), Table("d", 20, 8))
    plan = ShardingPlan(
        "hand",
        (
            DevicePlan((TableShard(a), TableShard(b, 0, 12), TableShard(d)), 0.0),
            DevicePlan((TableShard(b, 12, 4), TableShard(c)), 0.0),
        ),
    )
    return Workload((a, b, c, d), batch_size=4), plan


class FixedCost(SetCostModel):
    """A stand-in cost model: 1 ms per table."""

    def predict_many(self, table_sets, batch_size):
        return [float(len(s)) for s in table_sets]


@pytest.mark.parametrize("allow_column_split", [False, True])
def test_torchrec_planner_places_every_table_once_within_memory(allow_column_split):
    workload, topology = small_workload(), Topology(3, 0.03)
    result = TorchRecPlanner(allow_column_split=allow_column_split).plan_with_estimates(workload, topology)
    plan = result.plan

    validate_plan(plan, workload, topology)  # every column placed once, memory fits
    assert all(d.memory_bytes <= topology.device_memory_bytes for d in plan.devices)
    placements = table_placements(plan, workload)
    assert plan.planner == "torchrec"
    assert len(result.torchrec_estimates_ms) == 3 and all(e > 0 for e in result.torchrec_estimates_ms)
    assert [d.cost_ms for d in plan.devices] == list(result.torchrec_estimates_ms)
    if not allow_column_split:
        assert all(len(shards) == 1 for shards in placements.values())


def test_torchrec_plans_for_the_cpu_with_its_cpu_perf_model_and_ddr_memory():
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import make_planner

    workload, topology = small_workload(), Topology(3, 0.03)
    gpu = TorchRecPlanner().plan_with_estimates(workload, topology)
    cpu_planner = make_planner("torchrec_cpu", PlannerContext())
    cpu = cpu_planner.plan_with_estimates(workload, topology)
    validate_plan(cpu.plan, workload, topology)
    assert cpu.plan.planner == "torchrec_cpu" and all(e > 0 for e in cpu.torchrec_estimates_ms)
    assert sum(cpu.torchrec_estimates_ms) > 2 * sum(gpu.torchrec_estimates_ms)  # CPU kernels are slower
    with pytest.raises(ValueError, match="cuda or cpu"):
        TorchRecPlanner(compute_device="mtia")


def test_torchrec_planner_costs_come_from_the_cost_model_when_given():
    workload = small_workload()
    plan = TorchRecPlanner(cost_model=FixedCost()).plan(workload, Topology(3, 0.03))
    assert [d.cost_ms for d in plan.devices] == [float(len(d.shards)) for d in plan.devices]


@pytest.mark.parametrize(
    "gib, sharding_types, kind",
    [
        (0.004, "auto", PlannerErrorKind.INSUFFICIENT_MEMORY),  # 3 x 4 MiB < 15.6 MiB of tables
        (0.0075, ["table_wise"], PlannerErrorKind.TABLE_DOES_NOT_FIT),  # t7 (7.8 MiB) exceeds one device
        # t7 exceeds one device, so the search takes every type: row blocks would fit, but not
        # within TorchRec's reserve
        (0.0075, "auto", PlannerErrorKind.INSUFFICIENT_MEMORY),
        (0.0085, "auto", PlannerErrorKind.INSUFFICIENT_MEMORY),  # fits by our count, not TorchRec's reserve
    ],
)
def test_torchrec_planner_raises_our_error_when_memory_is_short(gib, sharding_types, kind):
    with pytest.raises(PlannerError) as info:
        TorchRecPlanner(sharding_types=sharding_types).plan(small_workload(), Topology(3, gib))
    assert info.value.kind is kind and info.value.fixes


def test_torchrec_planner_says_which_table_it_cannot_cut_narrow_enough_to_fit():
    """TorchRec cuts column-wise shards of at least 128 columns: kept to table- and column-wise
    sharding, a 128-column table too large for one device is refused before planning, naming the
    table and TorchRec's limit (not only the device's memory); a 512-column one of the same
    bytes is cut and placed. By default, a table too large for one device opens TorchRec's full
    search, which cuts the narrow one into row blocks."""
    narrow = Table("narrow", 40_000, 128)  # 19.5 MiB (fp32, SGD)
    wide = Table("wide", 10_000, 512)  # the same bytes, four 128-column shards of 4.9 MiB
    small = Table("small", 1_000, 16)
    topology = Topology(4, 0.015)  # 15.4 MiB a device
    columns = TorchRecPlanner(sharding_types=["table_wise", "column_wise"])
    with pytest.raises(PlannerError) as info:
        columns.plan(Workload((narrow, small)), topology)
    error = info.value
    assert error.kind is PlannerErrorKind.TABLE_DOES_NOT_FIT
    assert "'narrow'" in error.message and "128 columns" in error.message
    assert any("cost_greedy" in fix for fix in error.fixes)
    plan = columns.plan(Workload((wide, small)), topology)
    validate_plan(plan, Workload((wide, small)), topology)
    assert sum(1 for d in plan.devices for s in d.shards if s.table.name == "wide") > 1
    assert {s.sharding_type for d in plan.devices for s in d.shards} <= {
        ShardingType.TABLE_WISE,
        ShardingType.COLUMN_WISE,
    }

    by_default = TorchRecPlanner(allow_column_split=True).plan(Workload((narrow, small)), topology)
    validate_plan(by_default, Workload((narrow, small)), topology)
    assert {s.sharding_type for d in by_default.devices for s in d.shards if s.table.name == "narrow"} <= {
        ShardingType.ROW_WISE,
        ShardingType.TABLE_ROW_WISE,
        ShardingType.GRID_SHARD,
    }


def test_torchrec_planner_stops_at_its_time_budget_and_the_timer_is_put_back():
    """TorchRec's planner takes no budget of its own: past ours it is stopped (SIGALRM) with
    ``PlannerError(TIME_BUDGET)``; the alarm handler and timer are restored after, and without a
    budget it plans."""
    import signal

    previous = signal.getsignal(signal.SIGALRM)
    with pytest.raises(PlannerError) as info:
        TorchRecPlanner(time_budget_s=1e-4).plan(small_workload(), Topology(3, 0.03))
    assert info.value.kind is PlannerErrorKind.TIME_BUDGET and "time budget" in info.value.message
    assert signal.getsignal(signal.SIGALRM) is previous and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert TorchRecPlanner(time_budget_s=60.0).plan(small_workload(), Topology(3, 0.03)).devices


def test_torchrec_planner_is_unavailable_without_torchrec(monkeypatch):
    import autoshard.torchrec

    monkeypatch.setitem(sys.modules, "autoshard.torchrec.bridge", None)  # import now fails
    monkeypatch.delattr(autoshard.torchrec, "bridge")
    with pytest.raises(PlannerError) as info:
        TorchRecPlanner()
    assert info.value.kind is PlannerErrorKind.UNAVAILABLE and "--no-deps" in info.value.fixes[0]


def test_embedding_bag_configs_mirror_the_tables():
    workload, _ = hand_plan()
    configs = to_embedding_bag_configs(workload)
    assert [(c.name, c.num_embeddings, c.embedding_dim, c.feature_names) for c in configs] == [
        (t.name, t.num_embeddings, t.embedding_dim, [t.name]) for t in workload.tables
    ]
    with pytest.raises(InputError):
        to_embedding_bag_configs(Workload((Table("x", 10, 8, bytes_per_element=8),)))


def test_plan_round_trips_through_torchrec():
    workload, plan = hand_plan()
    torchrec_plan = to_torchrec_plan(plan, workload, world_size=2)
    module_plan = torchrec_plan.plan[MODULE_PATH]
    assert module_plan["b"].sharding_type == "column_wise" and module_plan["b"].ranks == [0, 1]
    assert module_plan["a"].sharding_type == "table_wise" and module_plan["a"].ranks == [0]
    assert table_placements(plan, workload)["b"] == (ShardPlacement(0, 0, 12, 0, 100), ShardPlacement(1, 12, 4, 0, 100))

    back = from_torchrec_plan(torchrec_plan, workload, 2, FixedCost())
    assert table_placements(back, workload) == table_placements(plan, workload)
    assert [set(d.shards) for d in back.devices] == [set(d.shards) for d in plan.devices]
    assert [d.cost_ms for d in back.devices] == [3.0, 2.0]


def test_adjacent_column_shards_on_one_rank_come_back_as_one():
    workload, _ = hand_plan()
    a, b, c, d = workload.tables
    plan = ShardingPlan(
        "hand",
        (
            DevicePlan((TableShard(a), TableShard(b, 0, 4), TableShard(b, 4, 4)), 0.0),
            DevicePlan((TableShard(b, 8, 8), TableShard(c), TableShard(d)), 0.0),
        ),
    )
    back = from_torchrec_plan(to_torchrec_plan(plan, workload, 2), workload, 2)
    assert back.devices[0].shards == (TableShard(a), TableShard(b, 0, 8))


def test_export_is_json_and_gives_the_same_constraints():
    workload, plan = hand_plan()
    export = json.loads(json.dumps(export_torchrec(plan, workload)))
    assert export["b"] == {
        "sharding_type": "column_wise",
        "ranks": [0, 1],
        "compute_kernel": "fused",
        "pooling_factor": 1.0,
        "shards": [
            {"rank": 0, "row_offset": 0, "rows": 100, "column_offset": 0, "columns": 12},
            {"rank": 1, "row_offset": 0, "rows": 100, "column_offset": 12, "columns": 4},
        ],
    }
    assert export["c"]["sharding_type"] == "table_wise" and export["c"]["ranks"] == [1]

    constraints = parameter_constraints_from_export(export)
    assert constraints == to_parameter_constraints(plan)
    assert constraints["b"].sharding_types == ["column_wise"] and constraints["b"].min_partition == 4
    assert constraints["c"].sharding_types == ["table_wise"] and constraints["c"].pooling_factors == [2.0]


def test_conversions_reject_plans_that_do_not_cover_the_workload():
    workload, plan = hand_plan()
    a, b = workload.tables[0], workload.tables[1]
    overlapping = ShardingPlan(
        "bad", (DevicePlan((TableShard(a), TableShard(b, 0, 12)), 0.0), DevicePlan((TableShard(b, 8, 8),), 0.0))
    )
    for bad in (overlapping, ShardingPlan("bad", plan.devices[:1])):
        with pytest.raises(InputError):
            to_torchrec_plan(bad, workload, 2)
    with pytest.raises(InputError):
        to_torchrec_plan(plan, workload, world_size=1)


# --- every sharding type ------------------------------------------------------------------------

W, L = 4, 2  # 2 hosts x 2 devices


def generator_workload() -> Workload:
    """Tables laid out as TorchRec's own generators can lay them out (equal column blocks)."""
    return Workload(
        (
            Table("dp", 40, 8),
            Table("tw", 30, 8),
            Table("cw", 30, 16),
            Table("rw", 50, 8, zipf_alpha=1.0),
            Table("rw_short", 5, 8),  # 4 row blocks: 2, 2, 1 and 0 rows
            Table("twrw", 30, 8),
            Table("twrw_short", 1, 8),  # 2 row blocks: 1 and 0 rows
            Table("grid", 30, 256),  # TorchRec's grid generator cuts 128-column blocks
        )
    )


def generator_plan(workload: Workload) -> ShardingPlan:
    t = {table.name: table for table in workload.tables}
    devices: list[list[TableShard]] = [[] for _ in range(W)]
    for rank in range(W):
        devices[rank].append(replica(t["dp"], W))
    devices[1].append(TableShard(t["tw"]))
    devices[0].append(TableShard(t["cw"], 0, 8))
    devices[3].append(TableShard(t["cw"], 8, 8))
    for name in ("rw", "rw_short"):
        for j, shard in enumerate(row_shards(t[name], W, ShardingType.ROW_WISE)):
            devices[j].append(shard)
    for name in ("twrw", "twrw_short"):
        for j, shard in enumerate(row_shards(t[name], L, ShardingType.TABLE_ROW_WISE)):
            devices[L + j].append(shard)
    for host, offset in ((1, 0), (0, 128)):
        for j, shard in enumerate(row_shards(t["grid"], L, ShardingType.GRID_SHARD, offset, 128)):
            devices[host * L + j].append(shard)
    return ShardingPlan("hand", tuple(DevicePlan(tuple(d), 0.0) for d in devices))


def shard_sets(plan: ShardingPlan) -> list[set[TableShard]]:
    return [set(d.shards) for d in plan.devices]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_type_is_laid_out_as_torchrecs_own_generators_lay_it_out(device):
    """Sharding type, ranks, shard offsets, sizes and placements as TorchRec's sharding_plan
    generators give them, 0-row blocks included (row_wise: one per rank; table_row_wise and grid:
    one per device of the host); the kernel they pick for a weight with an optimizer in backward
    (fused), and dense with no shard metadata for data parallel."""
    workload = generator_workload()
    ours = to_torchrec_plan(generator_plan(workload), workload, W, device, local_world_size=L).plan[MODULE_PATH]
    module = embedding_bag_collection(workload)
    apply_optimizer_in_backward(torch.optim.SGD, module.parameters(), {"lr": 0.1})
    theirs = construct_module_sharding_plan(
        module,
        {
            "dp": data_parallel(),
            "tw": table_wise(rank=1),
            "cw": column_wise(ranks=[0, 3]),
            "rw": row_wise(),
            "rw_short": row_wise(),
            "twrw": table_row_wise(host_index=1),
            "twrw_short": table_row_wise(host_index=1),
            "grid": grid_shard(host_indexes=[1, 0]),
        },
        sharder=EmbeddingBagCollectionSharder(),
        local_size=L,
        world_size=W,
        device_type=device,
    )
    assert dict(ours) == dict(theirs)
    assert (
        ours["dp"].compute_kernel == "dense" and ours["dp"].sharding_spec is None and ours["dp"].ranks == [0, 1, 2, 3]
    )
    assert [m.shard_sizes[0] for m in ours["rw_short"].sharding_spec.shards] == [2, 2, 1, 0]
    assert ours["twrw_short"].ranks == [2, 3] and ours["grid"].ranks == [2, 3, 0, 1]


def test_every_type_round_trips_through_torchrec_and_the_export():
    """Our plan -> TorchRec's plan -> our plan, and our plan -> JSON export -> our plan, give the
    same shards on the same devices, row blocks and replicas with the core's lookup shares."""
    workload = all_types_workload()
    plan = all_types_plan(workload)
    validate_plan(plan, workload, Topology.cluster(2, 2, 1))
    torchrec_plan = to_torchrec_plan(plan, workload, W, "cpu", local_world_size=L)
    for local in (L, None):  # without it, from the L row blocks TorchRec lists per column block
        back = from_torchrec_plan(torchrec_plan, workload, W, FixedCost(), local_world_size=local)
        assert shard_sets(back) == shard_sets(plan)
        assert [d.cost_ms for d in back.devices] == [float(len(d.shards)) for d in plan.devices]
    export = json.loads(json.dumps(export_torchrec(plan, workload, L)))
    assert shard_sets(plan_from_export(export, workload, W)) == shard_sets(plan)
    assert shard_sets(plan_from_export(export, workload, W, local_world_size=L)) == shard_sets(plan)
    rw = workload.tables[4]
    assert rw.zipf_alpha == 1.0  # skewed: its blocks serve unequal shares
    back_rw = [s for d in back.devices for s in d.shards if s.table.name == "rw"]
    assert back_rw == list(row_shards(rw, W, ShardingType.ROW_WISE))
    assert len({s.lookup_share for s in back_rw}) > 1
    assert all(s == replica(workload.tables[0], W) for d in back.devices for s in d.shards if s.table.name == "dp")


def test_the_export_gives_each_type_torchrecs_shard_metadata():
    """Hand-checked: 2 hosts x 2, rows first in each shard."""
    workload = all_types_workload()
    plan = all_types_plan(workload)
    export = export_torchrec(plan, workload, L)

    def shards(name):
        return [
            (s["rank"], s["row_offset"], s["rows"], s["column_offset"], s["columns"]) for s in export[name]["shards"]
        ]

    assert {name: entry["sharding_type"] for name, entry in export.items()} == {
        "dp": "data_parallel",
        "tw": "table_wise",
        "cw": "column_wise",
        "twcw": "table_column_wise",
        "rw": "row_wise",
        "twrw": "table_row_wise",
        "grid": "grid_shard",
    }
    assert shards("dp") == [(r, 0, 40, 0, 8) for r in range(4)] and export["dp"]["compute_kernel"] == "dense"
    assert shards("tw") == [(1, 0, 30, 0, 8)] and export["tw"]["pooling_factor"] == 2.0
    assert shards("cw") == [(0, 0, 30, 0, 8), (3, 0, 30, 8, 8)]
    assert shards("twcw") == [(2, 0, 30, 0, 4), (3, 0, 30, 4, 12)]
    assert shards("rw") == [(0, 0, 13, 0, 8), (1, 13, 13, 0, 8), (2, 26, 13, 0, 8), (3, 39, 11, 0, 8)]
    assert shards("twrw") == [(2, 0, 15, 0, 8), (3, 15, 15, 0, 8)]
    assert shards("grid") == [(2, 0, 15, 0, 8), (3, 15, 15, 0, 8), (0, 0, 15, 8, 8), (1, 15, 15, 8, 8)]
    assert all(e["ranks"] == [s["rank"] for s in e["shards"]] for e in export.values())
    assert all(e["compute_kernel"] == "fused" for name, e in export.items() if name != "dp")

    constraints = parameter_constraints_from_export(export)
    assert constraints == to_parameter_constraints(plan, local_world_size=L)
    assert constraints["grid"].min_partition == 8 and constraints["twcw"].min_partition == 4
    assert constraints["rw"].min_partition is None and constraints["dp"].compute_kernels == ["dense"]
    assert constraints["twrw"].sharding_types == ["table_row_wise"]


def test_row_blocks_of_no_rows_are_listed_for_torchrec_and_left_out_of_our_plans():
    short = Table("short", 5, 8)
    workload = Workload((short,))
    blocks = row_shards(short, 4, ShardingType.ROW_WISE)  # 2, 2 and 1 rows: the 4th block is empty
    assert len(blocks) == 3
    plan = ShardingPlan("hand", (*(DevicePlan((s,), 0.0) for s in blocks), DevicePlan((), 0.0)))
    export = export_torchrec(plan, workload)
    assert [(s["rank"], s["row_offset"], s["rows"]) for s in export["short"]["shards"]] == [
        (0, 0, 2),
        (1, 2, 2),
        (2, 4, 1),
        (3, 5, 0),
    ]
    assert plan_from_export(export, workload, 4).devices == plan.devices
    assert from_torchrec_plan(to_torchrec_plan(plan, workload, 4), workload, 4).devices == plan.devices
    export["short"]["shards"].pop()  # an export without the empty block reads the same
    assert plan_from_export(export, workload, 4).devices == plan.devices


def test_exports_written_before_row_sharding_still_read():
    """Shards with only ``rank``, ``column_offset`` and ``columns`` hold every row."""
    workload, plan = hand_plan()
    old = {
        name: {
            "sharding_type": kind,
            "ranks": [rank for rank, _, _ in shards],
            "compute_kernel": "fused",
            "pooling_factor": 1.0,
            "shards": [{"rank": r, "column_offset": c, "columns": n} for r, c, n in shards],
        }
        for name, kind, shards in (
            ("a", "table_wise", [(0, 0, 8)]),
            ("b", "column_wise", [(0, 0, 12), (1, 12, 4)]),
            ("c", "table_wise", [(1, 0, 16)]),
            ("d", "table_wise", [(0, 0, 8)]),
        )
    }
    assert shard_sets(plan_from_export(old, workload, 2)) == shard_sets(plan)


def test_row_blocks_are_cut_from_the_rows_a_run_builds():
    """A run may build tables with fewer rows than planned (``capped_workload``): its TorchRec
    plan cuts the row blocks from those."""
    workload = all_types_workload()
    built = Workload(tuple(replace(t, num_embeddings=20) for t in workload.tables), 4)
    layout = table_shardings(all_types_plan(workload), built, local_world_size=L)
    assert [(p.rank, p.row_offset, p.rows) for p in layout["rw"].shards] == [
        (0, 0, 5),
        (1, 5, 5),
        (2, 10, 5),
        (3, 15, 5),
    ]
    assert [(p.rank, p.rows) for p in layout["twrw"].shards] == [(2, 10), (3, 10)]
    assert layout["dp"].shards[0].rows == 20 and layout["cw"].shards[0].rows == 20


def _moved(plan: ShardingPlan, name: str, shards: dict[int, list[TableShard]]) -> ShardingPlan:
    """``plan`` with table ``name``'s shards replaced by ``shards`` (rank -> shards)."""
    devices = [[s for s in d.shards if s.table.name != name] + shards.get(r, []) for r, d in enumerate(plan.devices)]
    return ShardingPlan(plan.planner, tuple(DevicePlan(tuple(d), 0.0) for d in devices))


def _bad_layouts() -> list[tuple[str, ShardingPlan, str]]:
    workload = all_types_workload()
    plan = all_types_plan(workload)
    t = {table.name: table for table in workload.tables}
    rw = row_shards(t["rw"], W, ShardingType.ROW_WISE)
    twrw = row_shards(t["twrw"], L, ShardingType.TABLE_ROW_WISE)
    twcw = [
        TableShard(t["twcw"], 0, 4, sharding=ShardingType.TABLE_COLUMN_WISE),
        TableShard(t["twcw"], 4, 12, sharding=ShardingType.TABLE_COLUMN_WISE),
    ]
    halves = [
        TableShard(t["rw"], 0, None, 0, 25, ShardingType.ROW_WISE),
        TableShard(t["rw"], 0, None, 25, 25, ShardingType.ROW_WISE),
    ]
    return [
        (
            "row blocks on other ranks",
            _moved(plan, "rw", {0: [rw[1]], 1: [rw[0]], 2: [rw[2]], 3: [rw[3]]}),
            "row_wise table 'rw'",
        ),
        ("row blocks not TorchRec's", _moved(plan, "rw", {0: [halves[0]], 1: [halves[1]]}), "ceil"),
        (
            "table_row_wise over two hosts",
            _moved(plan, "twrw", {1: [twrw[0]], 2: [twrw[1]]}),
            "table_row_wise table 'twrw'",
        ),
        ("table_column_wise over two hosts", _moved(plan, "twcw", {0: [twcw[0]], 3: [twcw[1]]}), "hosts"),
        ("a replica missing", _moved(plan, "dp", {r: [replica(t["dp"], W)] for r in range(3)}), "replica"),
        (
            "two types",
            _moved(
                plan,
                "rw",
                {0: [rw[0]], 1: [rw[1]], 2: [rw[2]], 3: [replace(rw[3], sharding=ShardingType.TABLE_ROW_WISE)]},
            ),
            "mixes",
        ),
    ]


@pytest.mark.parametrize("case", range(6))
def test_layouts_torchrec_cannot_run_are_refused(case):
    what, bad, says = _bad_layouts()[case]
    workload = all_types_workload()
    with pytest.raises(InputError, match=says):
        to_torchrec_plan(bad, workload, W, local_world_size=L)
    with pytest.raises(InputError, match=says):
        export_torchrec(bad, workload, L)


def test_torchrec_plans_and_exports_torchrec_cannot_run_are_refused():
    workload = all_types_workload()
    good = to_torchrec_plan(all_types_plan(workload), workload, W, "cpu", local_world_size=L)
    module_plan = dict(good.plan[MODULE_PATH])
    rw = module_plan["rw"]
    first, second, *rest = rw.sharding_spec.shards  # rows 0:13 on rank 0, 13:26 on rank 1
    swapped = [replace(first, placement=second.placement), replace(second, placement=first.placement), *rest]
    module_plan["rw"] = replace(rw, sharding_spec=type(rw.sharding_spec)(swapped))
    with pytest.raises(InputError, match="row_wise table 'rw'"):
        from_torchrec_plan(TorchRecShardingPlan({MODULE_PATH: module_plan}), workload, W)
    export = export_torchrec(all_types_plan(workload), workload, L)
    with pytest.raises(InputError, match="sharding_type"):
        plan_from_export({**export, "tw": {**export["tw"], "sharding_type": "diagonal"}}, workload, W)
    with pytest.raises(InputError, match="local world size"):  # 3 row blocks on 4 ranks
        plan_from_export({**export, "twrw": {**export["twrw"], "shards": export["rw"]["shards"][:3]}}, workload, W)


# --- TorchRec's planner: its full search ---------------------------------------------------------


def cluster_workload() -> Workload:
    tables = tuple(
        Table(
            f"t{i}",
            10_000 * (i + 1),
            (16, 32, 64, 256)[i % 4],
            pooling_factor=1 + i % 3,
            optimizer=Optimizer.ROWWISE_ADAGRAD,
        )
        for i in range(8)
    )
    return Workload(tables, batch_size=512)


def test_torchrec_searches_every_sharding_type_on_a_cluster_and_its_plan_exports():
    workload, cluster = cluster_workload(), Topology.cluster(2, 2, 0.05)
    planner = TorchRecPlanner()
    assert planner.search_space(workload, cluster) is None  # every type its sharder offers
    assert planner.search_space(workload, Topology(4, 0.1)) == ("table_wise",)  # one host, tables fit
    assert TorchRecPlanner(allow_column_split=True).search_space(workload, Topology(4, 0.1)) == (
        "table_wise",
        "column_wise",
    )
    assert planner.search_space(workload, Topology(4, 0.05)) is None  # t7 (82 MB) exceeds a device
    assert TorchRecPlanner(sharding_types="all").search_space(workload, Topology(4, 0.1)) is None

    result = planner.plan_with_estimates(workload, cluster)
    plan = result.plan
    validate_plan(plan, workload, cluster)
    kinds = Counter(s.sharding_type for d in plan.devices for s in d.shards)
    assert set(kinds) - {ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE}, kinds  # beyond the old search
    assert not plan.partial and all(e > 0 for e in result.torchrec_estimates_ms)
    torchrec_plan = to_torchrec_plan(plan, workload, 4, local_world_size=2)
    assert shard_sets(from_torchrec_plan(torchrec_plan, workload, 4, local_world_size=2)) == shard_sets(plan)

    roomy = Topology.cluster(2, 2, 0.1)
    restricted = TorchRecPlanner(sharding_types=["table_wise"]).plan(workload, roomy)
    validate_plan(restricted, workload, roomy)
    assert {s.sharding_type for d in restricted.devices for s in d.shards} == {ShardingType.TABLE_WISE}
    on_cpu = TorchRecPlanner(compute_device="cpu").plan(workload, roomy)  # its sharder offers no row splits there
    validate_plan(on_cpu, workload, roomy)
    assert not any(s.sharding_type.splits_rows for d in on_cpu.devices for s in d.shards)
    with pytest.raises(ValueError, match="sharding_types"):
        TorchRecPlanner(sharding_types=["sideways"])
    with pytest.raises(ValueError, match="sharding_types"):
        TorchRecPlanner(sharding_types="some")


def test_torchrec_keeps_its_best_plan_when_its_timeout_ends_and_marks_it_partial(monkeypatch):
    """TorchRec's planner checks its timeout before each proposal and keeps the best plan found:
    here its clock jumps past the timeout after its first proposal."""
    from types import SimpleNamespace

    from torchrec.distributed.planner import planners

    readings = iter([0.0, 0.0])  # the start of its proposals, the first proposal's check

    monkeypatch.setattr(planners, "time", SimpleNamespace(time=lambda: next(readings, 1e9)))
    workload, topology = small_workload(), Topology(3, 0.03)
    plan = TorchRecPlanner(time_budget_s=60.0, sharding_types="all").plan(workload, topology)
    assert plan.partial
    validate_plan(plan, workload, topology)


# --- the drop-in planner ---------------------------------------------------------------------------


class _Recording:
    """An in-process planner that answers ``all_types_plan`` and keeps what it was asked."""

    name = "recording"

    def plan(self, workload, topology):
        self.workload, self.topology = workload, topology
        return all_types_plan(workload, topology.num_hosts, topology.local_world_size)


def test_the_native_planner_plans_the_cluster_torchrec_runs_on():
    """Hosts from the TorchRec Topology's local world size (as DMP groups ranks); the plan with
    every type converts for DMP on that cluster (TorchRec's arguments: test_drop_in_planner.py)."""
    from torchrec.distributed.planner.types import Topology as TorchRecTopology

    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    module = embedding_bag_collection(all_types_workload())
    recording = _Recording()
    two_hosts = TorchRecTopology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=2**30)
    planner = AutoShardShardingPlanner(topology=two_hosts, planner=recording)
    plan = planner.plan(module, [EmbeddingBagCollectionSharder()]).plan[MODULE_PATH]
    assert (recording.topology.num_hosts, recording.topology.local_world_size) == (2, 2)
    expected = to_torchrec_plan(all_types_plan(recording.workload), recording.workload, 4, "cuda", 2)
    assert dict(plan) == dict(expected.plan[MODULE_PATH])
    assert plan["twrw"].ranks == [2, 3] and str(plan["twrw"].sharding_spec.shards[0].placement) == "rank:2/cuda:0"

    one_host = TorchRecTopology(world_size=4, compute_device="cuda", hbm_cap=2**30)  # TorchRec: one host
    AutoShardShardingPlanner(topology=one_host, planner=recording).plan(module, [EmbeddingBagCollectionSharder()])
    assert (recording.topology.num_hosts, recording.topology.local_world_size) == (1, 4)
    uneven = TorchRecTopology(world_size=4, local_world_size=3, compute_device="cuda", hbm_cap=2**30)
    with pytest.raises(InputError, match="local_world_size"):
        AutoShardShardingPlanner(topology=uneven, planner=recording).plan(module, [EmbeddingBagCollectionSharder()])


def test_cli_export_of_a_cluster_plan_reads_back(tmp_path):
    """``--format torchrec`` on 2 hosts x 2: TorchRec's full search, its types and row blocks
    in the file, with the local world size, read back as the same plan."""
    from typer.testing import CliRunner

    from autoshard.cli import app
    from autoshard.core.workload_file import save_workload

    workload = cluster_workload()
    save_workload(tmp_path / "w.json", workload)
    out = tmp_path / "export.json"
    options = ["--hosts", "2", "--devices-per-host", "2", "--memory-gb", "0.05", "--planner", "torchrec"]
    result = CliRunner().invoke(
        app,
        ["plan", str(tmp_path / "w.json"), *options, "--model", "none", "--format", "torchrec", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["local_world_size"] == 2
    kinds = {entry["sharding_type"] for entry in data["tables"].values()}
    assert kinds - {"table_wise", "column_wise"}, kinds
    back = plan_from_export(data["tables"], workload, 4, local_world_size=2)
    validate_plan(back, workload, Topology.cluster(2, 2, 0.05))
    assert export_torchrec(back, workload, 2) == data["tables"]


def _dmp_worker(rank: int, world_size: int, port: int, export_file: str | None = None) -> None:
    """One process of the DMP test: shard our plan (or the plan a CLI export holds), copy the
    reference weights in, compare."""
    from torchrec.distributed.model_parallel import DistributedModelParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        workload, plan = hand_plan()
        if export_file is not None:
            import json

            plan = plan_from_export(json.loads(Path(export_file).read_text())["tables"], workload, world_size)
        torch.manual_seed(0)
        reference = embedding_bag_collection(workload, "cpu")
        sharded = DistributedModelParallel(
            embedding_bag_collection(workload),
            device=torch.device("cpu"),
            plan=to_torchrec_plan(plan, workload, world_size, compute_device="cpu"),
            sharders=[EmbeddingBagCollectionSharder()],
            init_data_parallel=False,
        )
        assert_sharded_matches_reference(sharded, reference, workload)
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


@pytest.mark.timeout(180)
def test_distributed_model_parallel_runs_our_plan_like_the_unsharded_model():
    mp.spawn(_dmp_worker, args=(2, free_port()), nprocs=2, join=True)


@pytest.mark.timeout(240)
def test_cli_torchrec_export_runs_in_dmp_like_the_unsharded_model(tmp_path):
    from typer.testing import CliRunner

    from autoshard.cli import app
    from autoshard.core.workload_file import save_workload

    workload, _ = hand_plan()
    save_workload(tmp_path / "w.json", workload)
    export = tmp_path / "export.json"
    result = CliRunner().invoke(
        app,
        [
            "plan",
            str(tmp_path / "w.json"),
            "--devices",
            "2",
            "--memory-gb",
            "1",
            "--planner",
            "lookup_greedy",
            "--column-split",
            "--format",
            "torchrec",
            "--out",
            str(export),
        ],
    )
    assert result.exit_code == 0, result.output
    placed = plan_from_export(json.loads(export.read_text())["tables"], workload, 2)
    assert all(d.shards for d in placed.devices)
    mp.spawn(_dmp_worker, args=(2, free_port(), str(export)), nprocs=2, join=True)


def test_a_meta_collection_skips_initialising_and_a_real_one_is_initialised():
    workload = small_workload()
    meta = embedding_bag_collection(workload)
    real = embedding_bag_collection(workload, device="cpu")
    for table in workload.tables:
        shape = (table.num_embeddings, table.embedding_dim)
        assert meta.embedding_bags[table.name].weight.is_meta
        assert tuple(meta.embedding_bags[table.name].weight.shape) == shape
        assert real.embedding_bags[table.name].weight.std().item() > 0  # nn.init.normal_ ran outside meta

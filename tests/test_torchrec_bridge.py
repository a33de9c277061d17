"""The TorchRec bridge and TorchRec's planner: conversions both ways, the JSON export, planning
with memory limits, and a plan of ours run by DistributedModelParallel on 2 CPU processes."""

import json
import os
import socket
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise  # noqa: E402
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan  # noqa: E402

from autoshard.core.costing import SetCostModel  # noqa: E402
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind  # noqa: E402
from autoshard.core.torchrec_bridge import (  # noqa: E402
    MODULE_PATH,
    embedding_bag_collection,
    export_torchrec,
    from_torchrec_plan,
    parameter_constraints_from_export,
    plan_from_export,
    table_placements,
    to_embedding_bag_configs,
    to_parameter_constraints,
    to_torchrec_plan,
)
from autoshard.core.types import (  # noqa: E402
    DevicePlan,
    Optimizer,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
)
from autoshard.evaluation.distributed_run import exit_finished_rank  # noqa: E402
from autoshard.planners.torchrec_planner import TorchRecPlanner  # noqa: E402
from autoshard.planners.validate import validate_plan  # noqa: E402
from tests.dmp_support import assert_sharded_matches_reference  # noqa: E402

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
    from autoshard.evaluation.registry import make_planner
    from autoshard.planners.context import PlannerContext

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
    "gib, kind",
    [
        (0.004, PlannerErrorKind.INSUFFICIENT_MEMORY),  # 3 x 4 MiB < 15.6 MiB of tables
        (0.0075, PlannerErrorKind.TABLE_DOES_NOT_FIT),  # t7 (7.8 MiB) exceeds one device
        (0.0085, PlannerErrorKind.INSUFFICIENT_MEMORY),  # fits by our count, not TorchRec's reserve
    ],
)
def test_torchrec_planner_raises_our_error_when_memory_is_short(gib, kind):
    with pytest.raises(PlannerError) as info:
        TorchRecPlanner().plan(small_workload(), Topology(3, gib))
    assert info.value.kind is kind and info.value.fixes


def test_torchrec_planner_says_which_table_it_cannot_cut_narrow_enough_to_fit():
    """TorchRec cuts column-wise shards of at least 128 columns: a 128-column table too large
    for one device is refused before planning, naming the table and TorchRec's limit (not only
    the device's memory); a 512-column one of the same bytes is cut and placed."""
    narrow = Table("narrow", 40_000, 128)  # 19.5 MiB (fp32, SGD)
    wide = Table("wide", 10_000, 512)  # the same bytes, four 128-column shards of 4.9 MiB
    small = Table("small", 1_000, 16)
    topology = Topology(4, 0.015)  # 15.4 MiB a device
    with pytest.raises(PlannerError) as info:
        TorchRecPlanner(allow_column_split=True).plan(Workload((narrow, small)), topology)
    error = info.value
    assert error.kind is PlannerErrorKind.TABLE_DOES_NOT_FIT
    assert "'narrow'" in error.message and "128 columns" in error.message
    assert any("cost_greedy" in fix for fix in error.fixes)
    plan = TorchRecPlanner(allow_column_split=True).plan(Workload((wide, small)), topology)
    validate_plan(plan, Workload((wide, small)), topology)
    assert sum(1 for d in plan.devices for s in d.shards if s.table.name == "wide") > 1


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
    import autoshard.core

    monkeypatch.setitem(sys.modules, "autoshard.core.torchrec_bridge", None)  # import now fails
    monkeypatch.delattr(autoshard.core, "torchrec_bridge")
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
        "shards": [{"rank": 0, "column_offset": 0, "columns": 12}, {"rank": 1, "column_offset": 12, "columns": 4}],
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


def test_row_wise_torchrec_plans_are_refused():
    workload, _ = hand_plan()
    module = embedding_bag_collection(workload)
    row_plan = construct_module_sharding_plan(
        module,
        {t.name: row_wise() for t in workload.tables},
        sharder=EmbeddingBagCollectionSharder(),
        local_size=2,
        world_size=2,
        device_type="cpu",
    )
    with pytest.raises(InputError):
        from_torchrec_plan(TorchRecShardingPlan({MODULE_PATH: row_plan}), workload, 2)


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_dmp_worker, args=(2, port), nprocs=2, join=True)


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_dmp_worker, args=(2, port, str(export)), nprocs=2, join=True)

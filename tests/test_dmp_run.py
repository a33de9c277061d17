"""The distributed evaluation: plans trained by TorchRec DistributedModelParallel on gloo CPU
processes, step times gathered to the parent; errors in ranks reach the parent."""

import math

import pytest

pytest.importorskip("torchrec")

from autoshard.core.errors import InputError  # noqa: E402
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard, Workload  # noqa: E402
from autoshard.torchrec import dmp_run as distributed_run  # noqa: E402
from autoshard.torchrec.dmp_run import (  # noqa: E402
    DistributedConfig,
    DistributedResult,
    DistributedRunError,
    capped_workload,
    compare_distributed,
    run_distributed,
)

CONFIG = DistributedConfig(world_size=2, steps=4, warmups=1, batch_size=64)


def tiny() -> tuple[Workload, ShardingPlan]:
    """5 tables; ``b`` split 12 + 4 columns across the 2 devices."""
    a, b, c, d, e = (
        Table("a", 500, 8, zipf_alpha=1.0),
        Table("b", 1000, 16, pooling_factor=2.5),
        Table("c", 300, 32, pooling_factor=3.0),
        Table("d", 200, 8),
        Table("e", 800, 16, zipf_alpha=0.8),
    )
    plan = ShardingPlan(
        "split",
        (
            DevicePlan((TableShard(a), TableShard(b, 0, 12), TableShard(d)), 0.0),
            DevicePlan((TableShard(b, 12, 4), TableShard(c), TableShard(e)), 0.0),
        ),
    )
    return Workload((a, b, c, d, e), batch_size=64), plan


def round_robin(workload: Workload, devices: int, name: str = "round_robin") -> ShardingPlan:
    shards = [[] for _ in range(devices)]
    for i, table in enumerate(workload.tables):
        shards[i % devices].append(TableShard(table))
    return ShardingPlan(name, tuple(DevicePlan(tuple(s), 0.0) for s in shards))


def _check(result: DistributedResult, world_size: int, steps: int) -> None:
    assert result.world_size == world_size and result.backend == "gloo"
    assert len(result.iteration_ms) == steps
    assert all(math.isfinite(x) and x > 0 for x in result.iteration_ms)
    assert len(result.per_rank_ms) == world_size and all(len(r) == steps for r in result.per_rank_ms)
    assert len(result.per_rank_median_ms) == world_size
    # a step's iteration time is the slowest rank's
    assert result.iteration_ms == tuple(max(s) for s in zip(*result.per_rank_ms))
    assert min(result.iteration_ms) <= result.median_ms <= max(result.iteration_ms)
    assert result.iqr_ms >= 0 and result.malloc_settings_active


@pytest.mark.timeout(120)
def test_a_column_split_plan_trains_on_two_ranks():
    workload, plan = tiny()
    result = run_distributed(plan, workload, CONFIG)
    _check(result, 2, CONFIG.steps)
    assert result.plan_name == "split" and result.batch_size == 64
    assert result.capped_rows[1] == ("b", 1000, 1000)


@pytest.mark.timeout(120)
def test_four_ranks_with_capped_rows():
    workload, _ = tiny()
    config = DistributedConfig(world_size=4, steps=3, warmups=1, batch_size=32, row_cap_bytes=8 * 64)
    result = run_distributed(round_robin(workload, 4), workload, config)
    _check(result, 4, 3)
    # 512 bytes / (dim * 4) rows: the module and the plan are built with these
    assert [r for _, _, r in result.capped_rows] == [16, 8, 4, 16, 8]
    assert [t.num_embeddings for t in capped_workload(workload, config).tables] == [16, 8, 4, 16, 8]


def test_a_plan_for_another_world_size_is_refused_before_spawning():
    workload, plan = tiny()
    with pytest.raises(InputError, match="world size 4"):
        run_distributed(plan, workload, DistributedConfig(world_size=4))
    with pytest.raises(InputError, match="world_size"):
        run_distributed(round_robin(workload, 3), workload, CONFIG)


def test_column_shards_fbgemm_cannot_run_are_refused():
    workload, _ = tiny()
    a, b, c, d, e = workload.tables
    plan = ShardingPlan(
        "odd",
        (
            DevicePlan((TableShard(a), TableShard(b, 0, 10), TableShard(c)), 0.0),
            DevicePlan((TableShard(b, 10, 6), TableShard(d), TableShard(e)), 0.0),
        ),
    )
    with pytest.raises(InputError, match="multiples of 4"):
        run_distributed(plan, workload, CONFIG)


def _failing_worker(rank, config, backend, port, plan, built, out_path):
    if rank == 1:
        raise ValueError("boom in the lookup")


@pytest.mark.timeout(120)
def test_an_error_in_a_rank_surfaces_in_the_parent(monkeypatch):
    monkeypatch.setattr(distributed_run, "_worker", _failing_worker)
    workload, plan = tiny()
    with pytest.raises(DistributedRunError, match="rank 1 of 2") as info:
        run_distributed(plan, workload, CONFIG)
    assert "boom in the lookup" in str(info.value)


def test_compare_interleaves_plans_and_merges_their_steps(monkeypatch):
    calls = []

    def fake_run(plan, workload, config):
        calls.append((plan.planner, config.seed))
        base = 10.0 if plan.planner == "A" else 20.0
        per_rank = ((base + config.seed, base), (base, base + 1 + config.seed))
        return distributed_run._result(
            plan.planner, per_rank, config, "gloo", workload, capped_workload(workload, config), True, 1.5, runs=1
        )

    monkeypatch.setattr(distributed_run, "run_distributed", fake_run)
    workload, _ = tiny()
    plans = [round_robin(workload, 2, "A"), round_robin(workload, 2, "B")]
    a, b = compare_distributed(plans, workload, CONFIG, rounds=3)
    assert calls == [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 2)]
    assert a.plan_name == "A" and b.plan_name == "B" and a.runs == 3 and a.wall_s == 4.5
    assert a.iteration_ms == (10, 11, 11, 12, 12, 13)  # round r: (10 + r, 11 + r)
    assert a.per_rank_ms == ((10, 10, 11, 10, 12, 10), (10, 11, 10, 12, 10, 13))
    assert a.median_ms == 11.5 and b.median_ms == 21.5


def test_a_plan_dmp_cannot_run_fails_before_any_rank_spawns():
    """Column shards 6 wide: FBGEMM's fused kernels need multiples of 4, so the parent refuses the
    plan naming the table; the same plan in widths of 8 passes."""
    from autoshard.torchrec.dmp_run import check_exportable

    def split(width: int) -> ShardingPlan:
        table = Table("t", 100, 2 * width)
        halves = [TableShard(table, i * width, width) for i in range(2)]
        return ShardingPlan("hand", tuple(DevicePlan((s,), 1.0) for s in halves))

    with pytest.raises(InputError, match="'t' into widths \\[6, 6\\]"):
        check_exportable(split(6), Workload((Table("t", 100, 12),), 64), 2, 2)
    check_exportable(split(8), Workload((Table("t", 100, 16),), 64), 2, 2)

"""Host memory (DDR) under ``--model torchrec``: the UVM kernels keep their weights in each rank's
host memory, which TorchRec's planner caps at its ``Topology`` ``ddr_cap``; ours plan within it
(and within HBM) or refuse, naming what to change."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torchrec")

from autoshard.core.constraints import Constraints, TableConstraints  # noqa: E402
from autoshard.core.errors import PlannerError, PlannerErrorKind  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import FUSED, Table, Topology, Workload  # noqa: E402
from autoshard.planning.options import Models, PlanOptions  # noqa: E402
from autoshard.planning.plan import plan  # noqa: E402
from autoshard.torchrec.cost_model import TorchRecCostModel  # noqa: E402
from autoshard.torchrec.planner import FULL_SEARCH, TorchRecPlanner  # noqa: E402
from benchmarks.sharding_4d import _estimated_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")

MIB = 2**20
WEIGHTS = 2_000_000 * 32 * 4  # one table's fp32 weights (256 MB)


def over_hbm(pooling: tuple[float, ...] = (20.0, 1.0, 20.0, 1.0, 1.0)) -> tuple[Workload, Topology]:
    """Five 244 MiB tables on two devices of 0.5 GiB: some must run in host memory."""
    tables = tuple(Table(f"t{i}", 2_000_000, 32, p) for i, p in enumerate(pooling))
    return Workload(tables, 512, "over_hbm"), Topology.cluster(1, 2, 0.5)


def planned(workload: Workload, topology: Topology, ddr_cap_bytes: int | None):
    models = Models(TorchRecCostModel(ddr_cap_bytes=ddr_cap_bytes))
    return plan(workload, topology, models, PlanOptions(planners=("cost_greedy",)))


def torchrecs_count(best, workload: Workload, topology: Topology) -> tuple[list[int], list[int]]:
    """Each rank's HBM and DDR by TorchRec's own enumerator and storage estimator (independent of
    the cost model's code)."""
    hbm, ddr = [0] * topology.world_size, [0] * topology.world_size
    for shard in _estimated_shards(best, workload, topology, "cuda"):
        hbm[shard.rank] += shard.storage.hbm
        ddr[shard.rank] += shard.storage.ddr
    return hbm, ddr


def test_uvm_tables_are_spread_so_that_each_rank_fits_its_host_memory():
    """One hot table and three cold ones, whole tables only: balancing the time alone stacks the
    two cold tables in host memory on one rank (past a cap of 1.5 tables' weights there); the
    host memory's barrier keeps them on different ranks."""
    workload, topology = over_hbm((500.0, 1.0, 1.0, 1.0))
    whole = TableConstraints(sharding_types=frozenset({ShardingType.TABLE_WISE}))
    workload = replace(workload, constraints=Constraints(tuple((t.name, whole) for t in workload.tables)))
    cap = WEIGHTS * 3 // 2
    report = planned(workload, topology, cap)
    best = report.best_plan
    in_host = [[s.table.name for s in d.shards if s.table.compute_kernel != FUSED] for d in best.devices]
    assert sorted(len(names) for names in in_host) == [1, 1]
    hbm, ddr = torchrecs_count(best, report.workload, topology)
    model = TorchRecCostModel(ddr_cap_bytes=cap).for_task(report.workload, topology)
    assert max(ddr) <= cap and all(u <= c for u, c in zip(hbm, model.task.capacities))
    assert model.host_overflow_bytes(best) <= 0
    assert all(model.fits([[s.as_table for s in d.shards] for d in best.devices]))


def test_a_plan_past_the_host_memory_is_refused_naming_ddr_cap_and_torchrecs_planner_refuses_it_too():
    workload, topology = over_hbm()
    with pytest.raises(PlannerError) as refused:
        planned(workload, topology, WEIGHTS // 2)  # less than one table's weights per rank
    assert refused.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY
    assert "ddr_cap" in refused.value.message and any("ddr_cap_bytes" in f for f in refused.value.fixes)
    reference = TorchRecPlanner(cost_model=TorchRecCostModel(ddr_cap_bytes=WEIGHTS // 2), sharding_types=FULL_SEARCH)
    with pytest.raises(PlannerError):
        reference.plan(workload, topology)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pooling=st.lists(st.sampled_from([1.0, 4.0, 20.0]), min_size=4, max_size=6).map(tuple),
    cap_tables=st.floats(0.4, 4.0),
)
def test_random_plans_fit_both_caps_or_are_refused_for_host_memory(pooling, cap_tables):
    workload, topology = over_hbm(pooling)
    cap = int(cap_tables * WEIGHTS)
    try:
        report = planned(workload, topology, cap)
    except PlannerError as error:
        assert error.kind is PlannerErrorKind.INSUFFICIENT_MEMORY
        return
    best = report.best_plan
    hbm, ddr = torchrecs_count(best, report.workload, topology)
    model = TorchRecCostModel(ddr_cap_bytes=cap).for_task(report.workload, topology)
    assert all(u <= c for u, c in zip(hbm, model.task.capacities)), (hbm, model.task.capacities)
    assert max(ddr) <= cap, (ddr, cap)


def test_a_plan_past_torchrecs_device_count_is_refused_not_returned_at_its_barrier_price():
    """Eight tables of small weights and large output buffers (batch 65,536, dimension 128) on two
    0.2 GiB devices: the planners' own count (weights) fits, TorchRec's storage estimate (its
    buffers) does not on any plan. The plan was returned at ``OVER_MEMORY_MS``; it is refused,
    naming the rank and what to change, as TorchRec's planner refuses it. At 0.4 GiB it plans."""
    tables = tuple(Table(f"t{i}", 1000, 128, 1.0) for i in range(8))
    workload, topology = Workload(tables, 65536, "buffers"), Topology.cluster(1, 2, 0.2)
    with pytest.raises(PlannerError) as refused:
        planned(workload, topology, None)
    assert refused.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY
    assert "on the device" in refused.value.message and "rank" in refused.value.message
    assert any("--memory-gb" in f for f in refused.value.fixes)
    reference = TorchRecPlanner(cost_model=TorchRecCostModel(), sharding_types=FULL_SEARCH)
    with pytest.raises(PlannerError):
        reference.plan(workload, topology)
    report = planned(workload, Topology.cluster(1, 2, 0.4), None)
    assert report.best_plan is not None and report.best_plan.max_cost_ms < 1e3

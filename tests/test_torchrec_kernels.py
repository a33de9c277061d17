"""Kernels TorchRec prices under ``--model torchrec``: UVM caching where tables exceed HBM,
priced as TorchRec's estimators price it, exported with its kernel and ``CacheParams``."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torchrec")

from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind  # noqa: E402
from autoshard.core.types import FUSED_UVM, FUSED_UVM_CACHING, Table, Topology, Workload  # noqa: E402
from autoshard.core.workload_file import workload_from_dict  # noqa: E402
from autoshard.planning.options import Models, PlanOptions  # noqa: E402
from autoshard.planning.plan import plan  # noqa: E402
from autoshard.torchrec import bridge  # noqa: E402
from autoshard.torchrec.cost_model import TorchRecCostModel  # noqa: E402
from benchmarks.sharding_4d import torchrec_estimates  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")

MIB = 2**20


def over_hbm() -> tuple[Workload, Topology]:
    """Four 256 MiB tables (1 GiB) on two devices of 0.5 GiB: they fit only with some in host
    memory. ``cold*`` are looked up once a sample, ``hot*`` 20 times."""
    tables = tuple(
        Table(name, 2_000_000, 32, pooling)
        for name, pooling in [("hot0", 20.0), ("cold0", 1.0), ("hot1", 20.0), ("cold1", 1.0)]
    )
    return Workload(tables, 512, "over_hbm"), Topology.cluster(1, 2, 0.5)


def planned(workload: Workload, topology: Topology, compute_device: str = "cuda"):
    models = Models(TorchRecCostModel(compute_device))
    return plan(workload, topology, models, PlanOptions(planners=("cost_greedy",), torchrec_export=True))


def test_a_uvm_caching_shards_storage_is_torchrecs_count_by_hand():
    """HBM: the cache (load factor x weights) and its state, rows x (4 + 16 x load factor) bytes,
    in place of the weights; host memory: the weights. The time: more than fused."""
    rows, dim, factor = 1_000_000, 64, 0.25
    fused = Table("t", rows, dim)
    cached = Table("t", rows, dim, compute_kernel=FUSED_UVM_CACHING, cache_load_factor=factor)
    task = TorchRecCostModel().for_task(Workload((fused,), 512), Topology.cluster(1, 2, 1.0)).task
    on_fused, on_cache, on_uvm = task.of([fused, cached, Table("t", rows, dim, compute_kernel=FUSED_UVM)])
    weights = rows * dim * 4
    by_hand = round(weights * factor) + math.ceil(rows * (4 + 16 * factor))
    assert on_cache.bytes - on_fused.bytes == by_hand - weights  # the buffers alike
    assert cached.memory_bytes == by_hand and on_cache.host_bytes == weights and on_fused.host_bytes == 0
    assert (
        on_uvm.bytes == on_fused.bytes - weights and Table("t", rows, dim, compute_kernel=FUSED_UVM).memory_bytes == 0
    )
    assert on_fused.ms < on_cache.ms < on_uvm.ms


def test_a_task_that_fits_only_with_uvm_caching_plans_the_coldest_tables_to_it_and_exports_them():
    workload, topology = over_hbm()
    report = planned(workload, topology)
    best = report.best_plan
    kernels = {s.table.name: s.table.compute_kernel for d in best.devices for s in d.shards}
    assert {n for n, k in kernels.items() if k == FUSED_UVM_CACHING} == {"cold0"}  # the least hot, and no more
    assert set(kernels.values()) == {"fused", FUSED_UVM_CACHING}
    model = TorchRecCostModel().for_task(report.workload, topology)
    assert model.overflow_bytes(best) <= 0  # fits TorchRec's storage count on every rank
    ms, used = torchrec_estimates(best, report.workload, topology)  # TorchRec's enumerator, kernels as planned
    assert [d.cost_ms for d in best.devices] == pytest.approx(ms, rel=1e-9)
    export = report.exports[0]
    assert export["cold0"]["compute_kernel"] == FUSED_UVM_CACHING and export["cold0"]["cache_params"] == {
        "load_factor": 0.2
    }
    assert export["hot0"]["compute_kernel"] == "fused" and "cache_params" not in export["hot0"]
    sharding = bridge.to_torchrec_plan(best, report.workload, 2).plan[bridge.MODULE_PATH]["cold0"]  # type: ignore[index]
    assert sharding.compute_kernel == FUSED_UVM_CACHING and sharding.cache_params.load_factor == 0.2
    back = bridge.plan_from_export(export, workload, 2)
    assert {s.table.name: s.table.compute_kernel for d in back.devices for s in d.shards} == kernels
    constraints = bridge.parameter_constraints_from_export(export)
    assert (
        constraints["cold0"].compute_kernels == [FUSED_UVM_CACHING]
        and constraints["cold0"].cache_params.load_factor == 0.2
    )


def test_where_the_tables_fit_fused_every_table_stays_fused_and_the_report_says_which_are_not():
    workload, _ = over_hbm()
    roomy = planned(workload, Topology.cluster(1, 2, 1.0))
    assert {s.table.compute_kernel for d in roomy.best_plan.devices for s in d.shards} == {"fused"}
    assert not [w for w in roomy.warnings if "kernel" in w]
    tight = planned(workload, Topology.cluster(1, 2, 0.5))
    [note] = [w for w in tight.warnings if "kernel" in w]
    assert "1 of 4 tables run TorchRec's fused_uvm_caching kernel" in note and "cold0 (0.2)" in note


def test_kept_fused_the_same_task_does_not_fit():
    workload, topology = over_hbm()
    fused_only = {name: {"compute_kernels": ["fused"]} for name in ("hot0", "cold0", "hot1", "cold1")}
    constrained, _ = workload_from_dict({**_file(workload, topology), "constraints": fused_only})
    with pytest.raises(PlannerError) as info:
        planned(constrained, topology)
    assert info.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY


def test_constraints_choose_the_kernel_and_its_load_factor():
    workload, topology = over_hbm()
    wanted = {"hot0": {"compute_kernels": ["fused_uvm_caching"], "cache_params": {"load_factor": 0.5}}}
    constrained, _ = workload_from_dict({**_file(workload, topology), "constraints": wanted})
    report = planned(constrained, topology)
    hot0 = next(s.table for d in report.best_plan.devices for s in d.shards if s.table.name == "hot0")
    assert (hot0.compute_kernel, hot0.cache_load_factor) == (FUSED_UVM_CACHING, 0.5)
    assert report.exports[0]["hot0"]["cache_params"] == {"load_factor": 0.5}


def test_uvm_kernels_where_nothing_prices_them_are_refused_naming_the_table():
    workload, topology = over_hbm()
    only_uvm = {"cold0": {"compute_kernels": ["fused_uvm_caching"]}}
    constrained, _ = workload_from_dict({**_file(workload, topology), "constraints": only_uvm})
    with pytest.raises(InputError) as on_cpu:  # TorchRec's CPU sharder offers fused alone
        planned(constrained, topology, "cpu")
    assert on_cpu.value.field == "compute_kernels" and "cold0" in str(on_cpu.value)
    with pytest.raises(InputError) as unpriced:  # a model that measured fused alone (here: none)
        plan(constrained, topology, Models(), PlanOptions(planners=("round_robin",)))
    assert unpriced.value.field == "compute_kernels" and "cold0" in str(unpriced.value)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"compute_kernel": "key_value"}, "compute_kernel"),
        ({"cache_load_factor": 0.2}, "cache_load_factor"),  # fused caches nothing
        ({"compute_kernel": FUSED_UVM_CACHING, "cache_load_factor": 0.0}, "cache_load_factor"),
    ],
)
def test_a_table_with_a_kernel_autoshard_does_not_plan_is_refused(fields, field):
    with pytest.raises(InputError) as info:
        Table("t", 10, 4, **fields)
    assert info.value.field == field


def test_an_export_with_a_kernel_autoshard_does_not_plan_is_refused():
    workload, _ = over_hbm()
    entry = {"sharding_type": "table_wise", "compute_kernel": "key_value", "pooling_factor": 1.0}
    export = {t.name: {**entry, "shards": [{"rank": 0, "column_offset": 0, "columns": 32}]} for t in workload.tables}
    with pytest.raises(InputError) as info:
        bridge.plan_from_export(export, workload, 2)
    assert info.value.field == "compute_kernel"


def _file(workload: Workload, topology: Topology) -> dict:
    return {
        "name": workload.name,
        "batch_size": workload.batch_size,
        "tables": [
            {
                "name": t.name,
                "num_embeddings": t.num_embeddings,
                "embedding_dim": t.embedding_dim,
                "pooling_factor": t.pooling_factor,
            }
            for t in workload.tables
        ],
        "topology": topology.to_dict(),
    }


def test_the_cli_exports_the_kernels_it_chose(tmp_path):
    from typer.testing import CliRunner

    from autoshard.cli import app

    workload, topology = over_hbm()
    path = tmp_path / "over_hbm.json"
    path.write_text(json.dumps(_file(workload, topology)))
    result = CliRunner().invoke(
        app, ["plan", str(path), "--model", "torchrec", "--planner", "cost_greedy", "--format", "torchrec"]
    )
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)["tables"]
    assert (
        tables["cold0"]["compute_kernel"] == FUSED_UVM_CACHING and tables["cold0"]["cache_params"]["load_factor"] == 0.2
    )
    assert tables["hot0"]["compute_kernel"] == "fused"


def test_torchrecs_planner_is_offered_the_kernels_ours_may_choose_and_exports_them():
    """Under TorchRec's model on cuda the reference planner is offered fused, fused_uvm_caching
    (with the table's load factor as CacheParams) and fused_uvm, so it plans the task that does not
    fit HBM fused, and its plan carries each kernel; without the model it is offered fused alone."""
    from autoshard.core.constraints import Constraints, TableConstraints
    from autoshard.torchrec.planner import FULL_SEARCH, TorchRecPlanner

    workload, topology = over_hbm()
    own = TableConstraints(compute_kernels=("fused", "fused_uvm_caching"), cache_load_factor=0.3)
    workload = Workload(workload.tables, workload.batch_size, "over_hbm", Constraints((("cold1", own),)))
    model = TorchRecCostModel().for_task(workload, topology)
    reference = TorchRecPlanner(cost_model=model, sharding_types=FULL_SEARCH)
    offered = {
        o[0].name: [(t.compute_kernel, t.cache_load_factor) for t in o] for o in reference.offered_kernels(workload)
    }
    assert offered["hot0"] == [("fused", None), (FUSED_UVM_CACHING, None), (FUSED_UVM, None)]
    assert offered["cold1"] == [("fused", None), (FUSED_UVM_CACHING, 0.3)]
    theirs = reference.plan(workload, topology)
    tables = {s.table.name: s.table for d in theirs.devices for s in d.shards}
    assert {t.compute_kernel for t in tables.values()} - {"fused"}  # some table in host memory
    assert model.overflow_bytes(theirs) <= 0
    export = bridge.to_torchrec_plan(theirs, workload, 2).plan[bridge.MODULE_PATH]  # type: ignore[index]
    for name, table in tables.items():
        assert export[name].compute_kernel == table.compute_kernel
        if table.compute_kernel == FUSED_UVM_CACHING:
            assert export[name].cache_params.load_factor == table.load_factor
    fused_only = TorchRecPlanner(sharding_types=FULL_SEARCH)
    assert all(len(o) == 1 for o in fused_only.offered_kernels(workload))
    with pytest.raises(PlannerError):
        fused_only.plan(workload, topology)  # 1 GiB of tables, 1 GiB of HBM less TorchRec's reservation

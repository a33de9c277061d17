"""``--model torchrec``: TorchRec's own estimators as the cost model. A rank's cost is exactly what
TorchRec's planner estimates for it (its own plans, imported; and ours, priced again through
TorchRec's enumerator), the running sums planners ask agree with whole-set prices, every plan
planned under it fits TorchRec's storage estimate on every rank, and the name resolves in the
CLI, the service and the drop-in."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torchrec")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from autoshard.core.errors import InputError, PlannerError  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import ShardingPlan, Table, Topology, Workload, replica, row_shards  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.torchrec.cost_model import OVER_MEMORY_MS, TorchRecCostModel  # noqa: E402
from autoshard.torchrec.planner import TorchRecPlanner  # noqa: E402
from benchmarks.sharding_4d import torchrec_estimates, torchrec_reserved_bytes  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")


def mixed_workload(seed: int = 0, num_tables: int = 14, batch_size: int = 512) -> Workload:
    """Tables from a few rows to one larger than a device of ``cluster``, varied dims and pooling."""
    rng = np.random.default_rng(seed)
    tables = [Table("giant", 3_000_000, 64, 6.0, 0.9)]
    for i in range(num_tables - 1):
        rows = int(10 ** rng.uniform(1, 6))
        tables.append(Table(f"t{i}", rows, int(rng.choice([8, 16, 32, 64, 128])), float(rng.choice([1, 3, 10]))))
    return Workload(tuple(tables), batch_size, f"mixed{seed}")


def cluster() -> Topology:
    return Topology.cluster(2, 4, 0.6)  # the giant (732 MiB) fits no device whole


def test_each_rank_of_torchrecs_own_plan_costs_what_torchrecs_planner_estimated():
    """TorchRec's planner plans (every sharding type); its plan, imported and priced by the model,
    gives each rank exactly the estimate TorchRec's planner kept for it."""
    workload, topology = mixed_workload(), cluster()
    model = TorchRecCostModel().for_task(workload, topology)
    plan = TorchRecPlanner(cost_model=model, sharding_types="all").plan(workload, topology)
    assert {s.sharding_type for d in plan.devices for s in d.shards} - {ShardingType.TABLE_WISE}  # not all whole
    assert [d.cost_ms for d in plan.devices] == pytest.approx(plan.own_estimate_ms, rel=1e-9, abs=1e-12)
    assert plan.max_cost_ms == pytest.approx(max(plan.own_estimate_ms), rel=1e-9)


def test_our_plans_cost_what_torchrecs_enumerator_and_estimators_give_them():
    """cost_greedy's plan under the model: each rank's cost and storage are what TorchRec's own
    enumerator and estimators give the same shards (the export's options, priced afresh), and
    every rank fits what TorchRec's storage reservation leaves it."""
    workload, topology = mixed_workload(1), cluster()
    comparison = compare_planners(workload, topology, ["cost_greedy"], PlannerContext(TorchRecCostModel()))
    [plan] = comparison.plans
    ms, used = torchrec_estimates(plan, workload, topology)
    assert [d.cost_ms for d in plan.devices] == pytest.approx(ms, rel=1e-9)
    model = TorchRecCostModel().for_task(workload, topology)
    assert model.storage([[s.as_table for s in d.shards] for d in plan.devices]) == used
    assert max(np.array(used) - np.array(torchrec_reserved_bytes(workload, topology))) <= 0


def test_running_sums_and_edits_agree_with_whole_sets():
    workload, topology = mixed_workload(2), cluster()
    model = TorchRecCostModel().for_task(workload, topology)
    giant = workload.tables[0]
    rows = [s.as_table for s in row_shards(giant, 8, ShardingType.ROW_WISE)]
    sets = [[rows[r], *workload.tables[1 + r :: 8]] for r in range(8)]
    sets[3].append(replica(workload.tables[5], 8).as_table)
    whole = model.predict_many(sets, workload.batch_size)
    accumulator = model.accumulator(8, workload.batch_size)
    for r, tables in enumerate(sets):
        for table in tables:
            accumulator.add(r, table)
    assert accumulator.costs() == pytest.approx(whole, rel=1e-12)
    extra = workload.tables[1]
    assert accumulator.costs_if_added(extra) == pytest.approx(
        model.predict_many([[*s, extra] for s in sets], workload.batch_size), rel=1e-12
    )
    edits = [(0, 0, None), (3, 1, extra), (5, None, extra), (7, 0, None)]
    rebuilt = [[t for k, t in enumerate(sets[b]) if k != r] + ([a] if a else []) for b, r, a in edits]
    assert model.predict_edits(sets, edits, workload.batch_size) == pytest.approx(
        model.predict_many(rebuilt, workload.batch_size), rel=1e-12
    )


def test_a_device_past_torchrecs_storage_costs_more_than_any_that_fits():
    workload, topology = mixed_workload(3), Topology(2, 0.5)
    model = TorchRecCostModel().for_task(workload, topology)
    everything = [list(workload.tables), []]
    assert not model.fits(everything)[0]
    assert model.predict_many(everything, workload.batch_size)[0] > OVER_MEMORY_MS


def test_unbound_and_unpriceable_inputs_are_refused_with_the_fix():
    workload = mixed_workload()
    with pytest.raises(InputError, match="bound to none") as error:
        TorchRecCostModel().predict([workload.tables[0]], workload.batch_size)
    assert "for_task" in error.value.fix
    with pytest.raises(InputError, match="cuda or cpu"):
        TorchRecCostModel("tpu")
    fp8 = Workload((Table("q", 100, 8, bytes_per_element=1),), 64)
    with pytest.raises(InputError, match="fp32 \\(4\\) or fp16 \\(2\\)") as error:
        TorchRecCostModel().check_workload(fp8)
    assert error.value.field == "bytes_per_element"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    hosts=st.sampled_from([1, 2]),
    per_host=st.sampled_from([2, 4]),
    slack=st.floats(1.3, 3.0),
    batch=st.sampled_from([256, 1024]),
)
def test_every_plan_under_the_model_fits_torchrecs_storage_on_every_rank(seed, hosts, per_host, slack, batch):
    """Random tasks: whatever cost_greedy plans under the model fits TorchRec's own storage
    estimate (weights, optimizer state, input and output buffers) within what TorchRec's storage
    reservation leaves each rank, both from TorchRec's own code run on the plan's export."""
    workload = mixed_workload(seed, 10, batch)
    gib = slack * workload.memory_bytes / (hosts * per_host) / 1024**3
    topology = Topology.cluster(hosts, per_host, gib)
    try:
        comparison = compare_planners(workload, topology, ["cost_greedy"], PlannerContext(TorchRecCostModel()))
    except PlannerError:
        return  # no plan at all: nothing to fit
    if not comparison.plans:
        return
    _, used = torchrec_estimates(comparison.plans[0], workload, topology)
    assert all(u <= cap for u, cap in zip(used, torchrec_reserved_bytes(workload, topology)))


HEURISTICS = ("round_robin", "size_greedy", "lookup_greedy")


def test_heuristic_plans_under_the_model_fit_torchrecs_storage_on_every_rank():
    """The heuristics place by their own rules, but under the model within its memory count as
    our planners do: two of these tables fit a device by weights and optimizer state (452 of
    512 MiB), not after TorchRec's reservation and buffers, so a heuristic that pairs them must
    plan again, with a table in host memory (UVM caching), rather than return a plan DMP would
    run out of memory on."""
    workload = Workload(tuple(Table(f"t{i}", 1_800_000, 32, 2.0) for i in range(4)), 512, "pairs")
    topology = Topology.cluster(1, 2, 0.5)
    assert 2 * workload.tables[0].memory_bytes < topology.device_memory_bytes  # the planners' count: a pair fits
    comparison = compare_planners(workload, topology, list(HEURISTICS), PlannerContext(TorchRecCostModel()))
    assert [p.planner for p in comparison.plans] == list(HEURISTICS)
    reserved = torchrec_reserved_bytes(workload, topology)
    for plan in comparison.plans:
        _, used = torchrec_estimates(plan, workload, topology)
        assert all(u <= cap for u, cap in zip(used, reserved)), plan.planner
        assert plan.max_cost_ms < OVER_MEMORY_MS


def test_a_plan_cut_short_before_it_fits_torchrecs_storage_is_refused_not_returned():
    """A searching planner cut short by its budget returns its best plan so far, ``partial``.
    Under the model such a plan past TorchRec's storage count had been returned at the barrier's
    price (grid20x1x8-giant at a 0.1 ms budget: a max of 1,007,906 ms, a plan DMP would run out
    of memory on); it is refused as a time-budget failure whose first fix is more time, and the
    same plan complete as one past memory. No clock: the cut-short plan is cost_greedy's on twice
    the memory, marked partial."""
    from dataclasses import dataclass, replace

    from autoshard.core.errors import PlannerErrorKind
    from autoshard.planning.kernels import KernelFitted
    from autoshard.planning.registry import planner_spec

    workload = mixed_workload(5, 12, 512)
    topology = Topology.cluster(1, 2, 0.5)
    model = TorchRecCostModel().for_task(workload, topology)
    roomy = Topology.cluster(1, 2, 4.0)
    context = PlannerContext(TorchRecCostModel().for_task(workload, roomy))
    found = planner_spec("cost_greedy").build(context).plan(workload, roomy)

    @dataclass(frozen=True)
    class Returns:  # a planner whose search ended with ``found`` (as cut short when ``partial``)
        partial: bool
        name: str = "cost_greedy"

        def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
            return replace(found, partial=self.partial)

    assert model.overflow_bytes(found) > 0  # past TorchRec's count on the real devices
    with pytest.raises(PlannerError) as cut:
        KernelFitted(Returns(partial=True), model).plan(workload, topology)
    assert cut.value.kind is PlannerErrorKind.TIME_BUDGET and cut.value.fixes[0].startswith("allow more time")
    with pytest.raises(PlannerError) as over:
        KernelFitted(Returns(partial=False), model).plan(workload, topology)
    assert over.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY


def test_a_fitted_plan_comes_back_only_where_it_beats_the_fitted_reference():
    """``NoWorseThan`` (rl+refine's promise under a model that fits memory per planner): it
    compares the two planners' fitted plans and returns the lower one under its own name."""
    from autoshard.planning.memory_fit import fitted
    from autoshard.planning.no_worse import NoWorseThan
    from autoshard.planning.registry import make_planner, planner_spec

    workload = mixed_workload(5, 12, 512)
    topology = Topology.cluster(2, 2, 1.5 * workload.memory_bytes / 4 / 1024**3)
    context = PlannerContext(TorchRecCostModel()).for_task(workload, topology)
    greedy = make_planner("cost_greedy", context)
    spread = fitted(planner_spec("round_robin").build(context), context.cost_model)
    by_rule, by_greedy = spread.plan(workload, topology), greedy.plan(workload, topology)
    assert by_greedy.max_cost_ms < by_rule.max_cost_ms
    kept = NoWorseThan(spread, greedy, 0.0).plan(workload, topology)
    assert (kept.planner, kept.max_cost_ms, kept.devices) == ("round_robin", by_greedy.max_cost_ms, by_greedy.devices)
    own = NoWorseThan(greedy, spread, 0.0).plan(workload, topology)
    assert (own.planner, own.devices) == ("cost_greedy", by_greedy.devices)
    assert NoWorseThan(greedy, spread, 0.9).plan(workload, topology).devices == by_rule.devices  # not 90% lower


# --- the name, through the CLI, the service and the drop-in ------------------------------------


def test_cli_plans_with_model_torchrec():
    from autoshard.cli import app

    result = CliRunner().invoke(
        app,
        [
            "plan",
            "criteo_kaggle",
            "--devices",
            "4",
            "--memory-gb",
            "4",
            "--model",
            "torchrec",
            "--json",
            "--planner",
            "cost_greedy,torchrec",
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    plans = {p["planner"]: p for p in json.loads(result.stdout)["plans"]}
    assert set(plans) == {"cost_greedy", "torchrec"}
    assert plans["cost_greedy"]["max_cost_ms"] <= plans["torchrec"]["max_cost_ms"] * (1 + 1e-9)


def test_service_plans_with_profile_torchrec(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings
    from tests.service_support import plan_body

    with TestClient(create_app(Settings(model_dir=tmp_path, pool="thread"))) as client:
        body = plan_body(12, planners=["cost_greedy", "size_greedy"], profile="torchrec")
        response = client.post("/v1/plans", json=body)
        assert response.status_code == 200, response.text
        report = response.json()
        assert report["profile"] == "torchrec (cuda)" and {p["planner"] for p in report["plans"]} == {
            "cost_greedy",
            "size_greedy",
        }
        unknown = client.post("/v1/plans", json={**body, "profile": "torchrec_tpu"})
        assert unknown.status_code == 422 and "torchrec" in unknown.text


def test_drop_in_plans_with_model_torchrec():
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import Topology as TorchRecTopology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    module = EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name=f"t{i}", num_embeddings=1000 * (i + 1), embedding_dim=32, feature_names=[f"t{i}"])
            for i in range(6)
        ],
        device=torch.device("meta"),
    )
    topology = TorchRecTopology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=256 * 1024**2)
    planner = AutoShardShardingPlanner(topology=topology, batch_size=256, model="torchrec", planner="cost_greedy")
    plan = planner.plan(module, [EmbeddingBagCollectionSharder()])
    assert set(plan.plan[""]) == {f"t{i}" for i in range(6)}
    assert planner.last_profile[0] == "torchrec (cuda)"


# --- a policy knows the cost model it was trained against -------------------------------------


def test_a_policy_planning_with_another_cost_model_than_its_own_warns(shipped_model, tmp_path):
    import warnings
    from dataclasses import replace
    from pathlib import Path

    from autoshard.rl.planners import RLPlanner
    from autoshard.rl.policy import OptionPolicy, PolicyModelWarning

    policy = OptionPolicy.load(Path(__file__).resolve().parents[1] / "data" / "models" / "default" / "policy.pt")
    assert policy.info.trained_against == shipped_model.profile.id  # a file from before the field: its profile's
    workload = Workload(tuple(Table(f"t{i}", 1000 * (i + 1), 16, 2.0) for i in range(8)), 256)
    topology = Topology(4, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolicyModelWarning)
        RLPlanner(shipped_model, policy).plan(workload, topology)  # its own model: silent
    torchrec = TorchRecCostModel().for_task(workload, topology)
    mismatch = f"trained against cost model '{policy.info.profile}'.*'torchrec \\(cuda\\)'"
    with pytest.warns(PolicyModelWarning, match=mismatch):
        RLPlanner(torchrec, policy).plan(workload, topology)

    trained = OptionPolicy(policy.layers, replace(policy.info, cost_model="torchrec", compute_device="cuda"))
    trained.save(tmp_path / "policy.pt")
    again = OptionPolicy.load(tmp_path / "policy.pt")
    assert again.info.trained_against == "torchrec (cuda)" and again.model_mismatch(torchrec) is None
    assert "'torchrec (cuda)' and plans with" in (again.model_mismatch(shipped_model) or "")


def test_torchrecs_annotated_methods_found_once_give_the_same_estimates(monkeypatch):
    """``estimates`` finds TorchRec's annotated config methods once per class (its scan was 60% of
    the estimator's time): every sharding type and kernel is estimated as with TorchRec's own scan."""
    from dataclasses import replace

    from torchrec.distributed.planner.estimator import annotations

    from autoshard.core.types import FUSED_UVM, FUSED_UVM_CACHING, TableShard

    workload, topology = mixed_workload(3), cluster()
    giant = workload.tables[0]
    shards = [s.as_table for kind in ShardingType if kind.splits_rows for s in row_shards(giant, 8, kind)]
    shards += [TableShard(giant, c, 16).as_table for c in (0, 16)] + [replica(workload.tables[2], 8).as_table]
    shards += [
        replace(t, compute_kernel=k) for t in workload.tables[1:5] for k in ("fused", FUSED_UVM_CACHING, FUSED_UVM)
    ]
    found_once = [
        (e.ms, e.bytes, e.host_bytes) for e in TorchRecCostModel().for_task(workload, topology).task.of(shards)
    ]
    for name in ("_get_annotated_method", "_get_coefficient_method"):
        monkeypatch.setattr(annotations, name, getattr(annotations, name).__wrapped__)
    scanned = [(e.ms, e.bytes, e.host_bytes) for e in TorchRecCostModel().for_task(workload, topology).task.of(shards)]
    assert found_once == scanned and len(set(found_once)) > 10


def test_annotated_methods_found_once_per_sharding_type_as_torchrecs_scan_finds_them():
    """A config whose annotated methods differ per sharding type (as a custom hardware config's
    may): the method found once is the one TorchRec's scan finds, for every type and marker."""
    from torchrec.distributed.planner.estimator import annotations

    from autoshard.torchrec.annotation_lookup import find_annotations_once

    find_annotations_once()

    class PerType:
        @annotations.fwd_coefficient(sharding_type=["table_wise", "column_wise"])
        def tw_cw(self) -> str:
            return "tw_cw"

        @annotations.fwd_coefficient(sharding_type="row_wise")
        def rw(self) -> str:
            return "rw"

        @annotations.forward_compute(sharding_type="row_wise")
        def rw_compute(self) -> float:
            return 1.0

    config = PerType()
    for kind in (*(k.value for k in ShardingType), None):
        for name, marker in (
            ("_get_coefficient_method", "_is_fwd_coefficient"),
            ("_get_annotated_method", "_is_custom_forward_compute"),
        ):
            find_once = getattr(annotations, name)
            assert find_once(config, marker, kind) == find_once.__wrapped__(config, marker, kind), (name, kind)
    assert annotations._get_coefficient_method(config, "_is_fwd_coefficient", "row_wise")() == "rw"


def test_running_sums_and_edits_count_host_memory_as_whole_sets_do():
    """With UVM tables the sums carry each set's host memory: a set past ``ddr_cap`` costs more
    than any that fits, alike in whole sets, running sums and edits."""
    from dataclasses import replace

    from autoshard.core.types import FUSED_UVM_CACHING

    workload, topology = mixed_workload(4), cluster()
    tables = tuple(replace(t, compute_kernel=FUSED_UVM_CACHING) if i % 2 else t for i, t in enumerate(workload.tables))
    workload = replace(workload, tables=tables)
    uvm = [t for t in tables if t.compute_kernel == FUSED_UVM_CACHING]
    probe = TorchRecCostModel().for_task(workload, topology).task
    cap = max(probe.of(uvm[:2])[0].host_bytes, probe.of(uvm[:2])[1].host_bytes) + 1  # one table's, not two
    model = TorchRecCostModel(ddr_cap_bytes=cap).for_task(workload, topology)
    sets: list[list[Table]] = [[] for _ in range(8)]
    sets[0] += uvm[:2]  # past the cap
    for i, t in enumerate(tables[1:]):
        if t not in uvm[:2]:
            sets[1 + i % 7].append(t)
    whole = model.predict_many(sets, workload.batch_size)
    assert whole[0] >= OVER_MEMORY_MS and max(whole[1:]) < OVER_MEMORY_MS or not all(model.fits(sets)[1:])
    accumulator = model.accumulator(8, workload.batch_size)
    for r, s in enumerate(sets):
        accumulator.add_all([r] * len(s), s)
    assert accumulator.costs() == pytest.approx(whole, rel=1e-12)
    edits = [(0, 0, None), (1, None, uvm[0])]
    rebuilt = [sets[0][1:], [*sets[1], uvm[0]]]
    assert model.predict_edits(sets, edits, workload.batch_size) == pytest.approx(
        model.predict_many(rebuilt, workload.batch_size), rel=1e-12
    )
    assert model.predict_edits(sets, edits, workload.batch_size)[0] < OVER_MEMORY_MS

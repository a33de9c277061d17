"""``autoshard.planning.plan.plan``: the one function the CLI, the service and the drop-in plan
through. Its plans are ``compare_planners``' plans; its errors are typed; its JSON is the CLI's
and (with ``detail``) the service's schema."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from autoshard.core.constraints import Constraints, Pin
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import Topology
from autoshard.planners.context import PlannerContext
from autoshard.planning.compare import compare_planners
from autoshard.planning.options import PROXY_UNIT, Models, PlanOptions
from autoshard.planning.plan import NoPlanInTime, plan
from autoshard.planning.registry import HEURISTICS
from autoshard.planning.runs import PlannerRun, RunOutcome
from service.schemas.responses import PlanResponse
from tests.service_support import SHIPPED_PROFILE, synthetic_workload

WORKLOAD, TOPOLOGY = synthetic_workload(30), Topology(4, 16.0)


@pytest.fixture(scope="module")
def models() -> Models:
    from autoshard.core.communication import CommunicationModel
    from cost_model.checkpoint import load_cost_model

    return Models(
        load_cost_model(SHIPPED_PROFILE / "cost_model.pt"),
        CommunicationModel.load(SHIPPED_PROFILE / "communication.json"),
        profile=SHIPPED_PROFILE.name,
    )


def _devices(plans):
    return [[[(s.table.name, s.column_offset, s.width) for s in d.shards] for d in p.devices] for p in plans]


def test_its_plans_are_compare_planners_plans_priced_alike(models):
    names = (*HEURISTICS, "cost_greedy")
    report = plan(WORKLOAD, TOPOLOGY, models, PlanOptions(names, seed=3))
    direct = compare_planners(
        WORKLOAD, TOPOLOGY, list(names), PlannerContext(models.cost_model, seed=3), models.communication
    )
    assert [p.planner for p in report.plans] == list(names)
    assert _devices(report.plans) == _devices(direct.plans)
    assert [p.max_cost_ms for p in report.plans] == pytest.approx([p.max_cost_ms for p in direct.plans], rel=1e-9)
    assert report.best_plan.max_cost_ms == min(p.max_cost_ms for p in report.plans)
    assert report.cost_unit == "ms" and report.profile == SHIPPED_PROFILE.name and not report.partial


def test_without_a_model_the_heuristics_plan_by_proxy_and_the_others_say_why_not():
    report = plan(WORKLOAD, TOPOLOGY, Models(missing="no cost model (--model none)"))
    data = report.to_dict()
    assert data["cost_unit"] == PROXY_UNIT and {p["planner"] for p in data["plans"]} >= set(HEURISTICS)
    skipped = {s["planner"]: s["reason"] for s in data["skipped"]}
    assert "cost model" in skipped["cost_greedy"] and skipped["cost_greedy"].endswith("(no cost model (--model none))")
    assert list(data)[:6] == ["workload", "topology", "cost_unit", "model_error", "plans", "skipped"]
    assert data["warnings"] == [] and data["profile"] is None


def test_the_detailed_json_is_the_service_answer_with_the_best_plans_stats(models):
    options = PlanOptions(("size_greedy", "cost_greedy"), stats=True)
    report = plan(WORKLOAD, TOPOLOGY, models, options)
    answer = PlanResponse.model_validate({**report.to_dict(detail=True), "elapsed_s": 0.0})
    assert answer.best == report.best_plan.planner and set(answer.improvement_over) == {"size_greedy"}
    best = next(p for p in answer.plans if p.best)
    assert best.stats is not None and all(p.stats is None for p in answer.plans if not p.best)
    assert all(p.torchrec is None for p in answer.plans)


def test_bad_inputs_raise_typed_errors_before_any_planner_runs():
    with pytest.raises(InputError, match="unknown planner"):
        plan(WORKLOAD, TOPOLOGY, options=PlanOptions(("nope",)))
    with pytest.raises(PlannerError) as unavailable:  # named, and none of them can run without a model
        plan(WORKLOAD, TOPOLOGY, options=PlanOptions(("cost_greedy", "rl")))
    assert unavailable.value.kind is PlannerErrorKind.UNAVAILABLE and "cost_greedy" in unavailable.value.message
    pinned = replace(WORKLOAD, constraints=Constraints(placement=(Pin(WORKLOAD.tables[0].name, ranks=(9,)),)))
    with pytest.raises(InputError) as pin:
        plan(pinned, TOPOLOGY)
    assert pin.value.where == "placement" and pin.value.field == "ranks"
    with pytest.raises(PlannerError) as infeasible:
        plan(WORKLOAD, Topology(2, 0.001))
    assert infeasible.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY


def test_a_deadline_already_passed_plans_nothing_and_says_which_planners_it_cut():
    with pytest.raises(NoPlanInTime) as late:
        plan(WORKLOAD, TOPOLOGY, options=PlanOptions(("size_greedy", "dim_greedy"), deadline=time.monotonic() - 1))
    assert late.value.planners == ("size_greedy", "dim_greedy") and late.value.kind is PlannerErrorKind.TIME_BUDGET


def test_a_runner_decides_where_planners_run_and_its_late_planners_are_reported():
    seen = []

    def runner(names, workload, topology, options):  # plans the first planner here, reports the rest late
        seen.append(tuple(names))
        first = plan(workload, topology, options=PlanOptions(names[:1])).plans[0]
        return [PlannerRun(names[0], RunOutcome.OK, plan=first), *(PlannerRun(n, RunOutcome.LATE) for n in names[1:])]

    report = plan(WORKLOAD, TOPOLOGY, options=PlanOptions(("size_greedy", "dim_greedy")), runner=runner)
    assert seen == [("size_greedy", "dim_greedy")]
    assert [p.planner for p in report.plans] == ["size_greedy"] and report.timed_out == ("dim_greedy",)
    assert report.partial and report.to_dict(detail=True)["timed_out"] == ["dim_greedy"]


def test_a_plan_that_breaks_a_constraint_is_never_the_best():
    """TorchRec's planner on cpu offers no row-wise type, so it places a row-wise-only table whole;
    planning passes over that plan with the table and its constraint named, and keeps the rest."""
    pytest.importorskip("torchrec")
    from autoshard.core.constraints import TableConstraints
    from autoshard.core.sharding import ShardingType
    from autoshard.core.types import Table, Workload

    tables = (Table("wide", 20_000, 32), Table("small", 1_000, 16))
    only_rows = TableConstraints(frozenset({ShardingType.ROW_WISE}))
    workload = Workload(tables, 512, "row_only", Constraints((("wide", only_rows),)))
    topology = Topology(2, 16.0)
    report = plan(workload, topology, Models(), PlanOptions(("torchrec_cpu", "size_greedy")))
    skipped = {s.planner: s.reason for s in report.comparison.skipped}
    assert "torchrec_cpu" in skipped and "'wide'" in skipped["torchrec_cpu"] and "row_wise" in skipped["torchrec_cpu"]
    assert [p.planner for p in report.plans] == ["size_greedy"]
    kinds = {s.sharding_type for d in report.best_plan.devices for s in d.shards if s.table.name == "wide"}
    assert kinds == {ShardingType.ROW_WISE}

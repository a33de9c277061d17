"""`plan --verify` and `evaluate --verify`: a measured choice among a task's plans."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard
from autoshard.evaluation.measurers import plans_verifier
from autoshard.evaluation.verification import distinct_candidates, placement_key, verify

runner = CliRunner()


def table(name: str, pooling: float = 1.0, dim: int = 16) -> Table:
    return Table(name, 1_000, dim, pooling_factor=pooling)


A, B, C, D = table("a"), table("b"), table("c"), table("d")


def plan(name: str, devices: list[list[Table]], costs: list[float]) -> ShardingPlan:
    return ShardingPlan(name, tuple(DevicePlan(tuple(TableShard(t) for t in ts), c) for ts, c in zip(devices, costs)))


def scripted(rounds_by_plan: dict[str, list[float]]):
    """A measurer that reads each candidate's per-round maxima from a script (the decision rule alone)."""
    return lambda plans: [rounds_by_plan[p.planner] for p in plans]


def test_plans_that_place_alike_are_one_candidate_named_by_all_and_ranked_by_prediction():
    one = plan("cost_greedy", [[A, B], [C, D]], [2.0, 1.0])
    same = plan("rl", [[D, C], [B, A]], [1.0, 2.0])  # the same sets on renumbered devices
    other = plan("size_greedy", [[A, C], [B, D]], [2.0, 1.5])
    best = plan("dim_greedy", [[A, D], [B, C]], [1.9, 1.9])
    assert placement_key(one) == placement_key(same) != placement_key(other)
    found = distinct_candidates([one, same, other, best], top=4)
    assert [c.planners for c in found] == [("dim_greedy",), ("cost_greedy", "rl"), ("size_greedy",)]
    assert [c.planners for c in distinct_candidates([one, same, other, best], top=2)] == [
        ("dim_greedy",),
        ("cost_greedy", "rl"),
    ]
    with pytest.raises(InputError, match="top"):
        distinct_candidates([one], top=0)


def test_the_best_predicted_heuristic_is_always_a_candidate():
    """The heuristics are what users run today: the verified plan is measured against the best of
    them even when the model predicts it outside the top."""
    model_plans = [
        plan(name, [[A, B], [C, D]] if k == 0 else [[A, C], [B, D]], [1.0 + k / 10, 1.0])
        for k, name in enumerate(("cost_greedy", "rl"))
    ]
    heuristics = [plan("size_greedy", [[A, D], [B, C]], [3.0, 1.0]), plan("dim_greedy", [[A, B, C], [D]], [2.5, 1.0])]
    found = distinct_candidates([*model_plans, *heuristics], top=2)
    assert [c.planners for c in found] == [("cost_greedy",), ("rl",), ("dim_greedy",)]
    assert [c.planners for c in distinct_candidates([*model_plans, *heuristics], top=3)] == [
        ("cost_greedy",),
        ("rl",),
        ("dim_greedy",),
    ]
    assert len(distinct_candidates(model_plans, top=2)) == 2  # no heuristic planned: none to add


def test_the_measured_fastest_is_chosen_paired_by_round_and_equal_ones_keep_the_predicted_order():
    plans = [
        plan("cost_greedy", [[A, B], [C, D]], [1.0, 1.0]),
        plan("rl", [[A, C], [B, D]], [1.1, 1.0]),
        plan("size_greedy", [[A, D], [B, C]], [1.2, 1.0]),
    ]
    # rl's median is lower but, paired by round, it is slower (a round that ran slow for every plan)
    paired = verify(
        plans,
        scripted({"cost_greedy": [10, 20, 10, 10], "rl": [10.5, 19, 10.5, 10.5], "size_greedy": [11, 22, 11, 11]}),
    )
    assert paired.plan.planner == "cost_greedy" and not paired.to_dict()["changed"]
    # rl faster within the noise (a tie) is still the measurement's pick: the predicted best is no default
    tie = verify(plans, scripted({"cost_greedy": [10, 10, 10, 10], "rl": [8, 12, 8, 11.9], "size_greedy": [11] * 4}))
    report = tie.to_dict()
    assert tie.plan.planner == "rl" and report["changed"] and report["chosen"] == ["rl"]
    assert report["candidates"][1]["verdict"] == "tie" and report["candidates"][0]["verdict"] is None
    ratio, low, high = tie.against_predicted_best(1)
    assert low < 1 < high and ratio == pytest.approx((0.8 * 1.2 * 0.8 * 1.19) ** 0.25)
    # the same measurements (plans bound by the same device): the predicted order decides
    same = verify(plans, scripted({"cost_greedy": [10, 11], "rl": [10, 11], "size_greedy": [10, 11]}))
    assert same.plan.planner == "cost_greedy"
    with pytest.raises(InputError, match="no plan"):
        verify([], scripted({}))


def test_measurement_overrules_a_prediction_that_is_wrong():
    """Real measurement: the plan the (deliberately wrong) predictions call best stacks all eight
    heavy tables on one of four devices; the one they call worse puts two on each. Verification
    keeps the measured faster, by a gap (about 4x) far beyond this machine's noise."""
    heavy = [table(f"h{i}", pooling=40.0, dim=64) for i in range(8)]
    light = [table(f"l{i}") for i in range(6)]
    stacked = plan("cost_greedy", [heavy, light[:2], light[2:4], light[4:]], [1.0] * 4)  # predicted best
    spread = plan("size_greedy", [heavy[2 * k : 2 * k + 2] + light[k : k + 1] for k in range(4)], [2.0] * 4)
    verified = plans_verifier(rounds=6, row_cap_mb=1, profile=None, communication=None, top=2)([stacked, spread], 1024)
    assert [c.plan.planner for c in verified.candidates] == ["cost_greedy", "size_greedy"]
    ratio, _, high = verified.against_predicted_best(1)
    assert verified.plan.planner == "size_greedy" and ratio < 0.6 and high < 1, verified.round_max_ms


def test_evaluate_judges_the_verified_choice_on_rounds_of_its_own(tmp_path):
    """``evaluate_task`` with a verifier: its choice joins the plans as ``verified`` and is measured
    with them (its devices read the measurement of the plan it chose), and it stands against the
    best heuristic like a cost-model planner."""
    from autoshard.core.task import Task
    from autoshard.core.types import Topology, Workload
    from autoshard.evaluation.measure_plan import measure_plans
    from autoshard.evaluation.suite import (
        against_best_heuristic,
        evaluate_task,
        task_rows,
    )
    from autoshard.planners.context import PlannerContext
    from cost_model.profile import ExecutionMode
    from cost_model.traces.records import BenchConfig
    from tests.cost_models import AnalyticalTestCostModel

    config = BenchConfig(batch_size=64, warmups=1, repeats=3, mode=ExecutionMode.EMBEDDING_BAG)
    workload = Workload(tuple(Table(f"t{i}", 100 * (i + 1), 8 * (1 + i % 2), 1.0 + i) for i in range(6)), 64, "tiny")
    chose: list[list[str]] = []

    def verifier(plans, batch_size):
        found = verify(plans, lambda cs: [[1.0, 1.0] if k == 0 else [2.0, 2.0] for k in range(len(cs))], top=3)
        chose.append([p.planner for p in plans])
        return found

    measurer = lambda plans, batch, ref: measure_plans(plans, batch, config, 2, ref)  # noqa: E731
    result = evaluate_task(
        Task("tiny", workload, Topology(3, 1.0)),
        ["round_robin", "cost_greedy"],
        PlannerContext(AnalyticalTestCostModel()),
        measurer,
        verifier=verifier,
    )
    assert chose == [["round_robin", "cost_greedy"]]  # the verifier saw the planners' plans, not its own
    assert result.verification is not None and result.reference == "cost_greedy"
    rows = {r.planner: r.to_dict() for r in task_rows(result)}
    assert set(rows) == {"round_robin", "cost_greedy", "verified"}
    chosen = result.verification.plan.planner
    assert rows["verified"]["measured_max_ms"] == rows[chosen]["measured_max_ms"]
    assert rows["verified"]["predicted_max_ms"] == rows[chosen]["predicted_max_ms"]
    assert {a.planner for a in against_best_heuristic(result)} == {"cost_greedy", "verified"}


def test_plan_verify_reports_predicted_and_measured_side_by_side(tmp_path):
    workload = tmp_path / "w.json"
    tables = [
        {"name": f"t{i}", "num_embeddings": 2000, "embedding_dim": 16, "pooling_factor": 1 + i % 3} for i in range(8)
    ]
    workload.write_text(json.dumps({"name": "small", "batch_size": 256, "tables": tables}))
    args = [
        "plan",
        str(workload),
        "--devices",
        "2",
        "--memory-gb",
        "1",
        "--verify",
        "--verify-rounds",
        "2",
        "--row-cap-mb",
        "1",
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    verification = report["verification"]
    assert verification["rounds"] == 2 and "measured" in verification["measures"]
    assert "all-to-all" in verification["measures"]  # the shipped profile's communication.json
    rows = verification["candidates"]
    assert 1 <= len(rows) <= 4 and sum(r["chosen"] for r in rows) == 1
    assert all(r["measured_max_ms"] > 0 for r in rows) and rows[0]["measured_ratio_to_predicted_best"] == 1.0
    planned = {p["planner"] for p in report["plans"]}
    assert {n for r in rows for n in r["planners"]} <= planned
    assert verification["chosen"] == next(r["planners"] for r in rows if r["chosen"])
    exported = runner.invoke(app, [*args, "--format", "torchrec", "--out", str(tmp_path / "plan.json")])
    assert exported.exit_code == 0, exported.output
    assert json.loads((tmp_path / "plan.json").read_text())["planner"] in planned
    # the table: predicted, expected (the shipped profile's device errors) and measured side by side
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    headers = [line for line in shown.stdout.splitlines() if "┃" in line]
    assert any(all(word in line for word in ("predicted", "expected", "measured")) for line in headers), headers


def test_evaluate_verify_needs_measure_and_verify_top_at_least_two(tmp_path):
    result = runner.invoke(app, ["evaluate", "default", "--verify", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--verify" in result.output and "--measure" in result.output
    result = runner.invoke(
        app, ["plan", "criteo_kaggle", "--devices", "4", "--memory-gb", "2", "--verify", "--verify-top", "1"]
    )
    assert result.exit_code == 2 and "--verify-top" in result.output


def test_plans_are_measured_on_the_profile_s_kind_of_device_or_refused():
    """A GPU profile's plans are not measured on this CPU: the error names the device and a fix."""
    import torch

    from autoshard.profiles import LoadedModel

    gpu = LoadedModel("cuda-h100-fbgemm_tbe-t1", None, {"device_type": "cuda", "mode": "fbgemm_tbe"}, "", {})
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the profile's plans can be measured here")
    with pytest.raises(InputError, match="no GPU") as refused:
        plans_verifier(rounds=2, row_cap_mb=1, profile=gpu, communication=None, top=2)
    assert refused.value.field == "device" and "profile's kind" in str(refused.value)

"""The three judges of a set of plans: our model, TorchRec's estimator on each plan's shards
(checked against the estimate TorchRec's own planner keeps for its plan), and DMP measured."""

import math

import pytest

pytest.importorskip("torchrec")

from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload, row_shards  # noqa: E402
from autoshard.torchrec.judges import (  # noqa: E402
    VERIFY_HINT,
    Judges,
    Verdict,
    estimator_device,
    judge_plans,
    torchrec_estimate_ms,
)
from autoshard.torchrec.planner import FULL_SEARCH, TorchRecPlanner  # noqa: E402

WORKLOAD = Workload(
    (
        Table("a", 5_000, 16, pooling_factor=4.0),
        Table("b", 20_000, 32, pooling_factor=2.0),
        Table("c", 1_000, 8),
        Table("d", 50_000, 64, pooling_factor=8.0, zipf_alpha=1.1),
    ),
    batch_size=256,
)


@pytest.mark.parametrize(
    ("device", "topology"),
    [("cuda", Topology.cluster(2, 2, 1.0)), ("cpu", Topology(2, 1.0))],
)
def test_the_estimator_on_torchrecs_own_plan_gives_its_planners_estimate_back(device, topology):
    plan = TorchRecPlanner(compute_device=device, sharding_types=FULL_SEARCH).plan(WORKLOAD, topology)
    assert plan.own_estimate_ms and len(plan.own_estimate_ms) == topology.num_devices
    again = torchrec_estimate_ms(plan, WORKLOAD, topology, device)
    assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(again, plan.own_estimate_ms))


def tw_plan(name: str, first: tuple[str, ...]) -> ShardingPlan:
    tables = {t.name: t for t in WORKLOAD.tables}
    rest = tuple(n for n in tables if n not in first)
    return ShardingPlan(
        name,
        (
            DevicePlan(tuple(TableShard(tables[n]) for n in first), 1.0),
            DevicePlan(tuple(TableShard(tables[n]) for n in rest), 2.0 if name == "lopsided" else 1.5),
        ),
    )


def test_three_judges_side_by_side_on_a_tiny_plan():
    topology = Topology(2, 1.0)
    balanced, lopsided = tw_plan("balanced", ("a", "d")), tw_plan("lopsided", ("c",))
    judges = judge_plans([balanced, lopsided], WORKLOAD, topology)
    report = judges.to_dict()
    assert [j["judge"] for j in report["judges"]] == ["autoshard", "torchrec_estimator", "dmp"]
    ours, theirs, measured = report["judges"]
    assert ours["prefers"] == "balanced" and ours["max_ms"] == [1.5, 2.0]
    # TorchRec's estimate of each plan is its slowest rank's, as its estimator prices the shards
    for plan, value in zip((balanced, lopsided), theirs["max_ms"]):
        assert math.isclose(value, max(torchrec_estimate_ms(plan, WORKLOAD, topology, "cpu")), rel_tol=1e-3)
    assert theirs["prefers"] == "balanced"  # d (the heaviest) alone with c is TorchRec's worst too
    assert "on the CPU" in theirs["note"]
    assert measured["prefers"] is None and VERIFY_HINT in measured["note"]
    assert report["agree"] and report["disagreement"] is None
    with_dmp = judge_plans([balanced, lopsided], WORKLOAD, topology, measured_max_ms=[9.0, 4.0])
    assert not with_dmp.agree
    message = with_dmp.disagreement()
    assert message is not None and "dmp prefers lopsided" in message and "autoshard prefers balanced" in message
    assert VERIFY_HINT not in message  # measured already


def test_plans_torchrec_cannot_shard_on_the_cpu_are_estimated_as_cuda_plans():
    d = WORKLOAD.tables[3]
    rows = row_shards(d, 2, ShardingType.ROW_WISE)
    others = [TableShard(t) for t in WORKLOAD.tables[:3]]
    plan = ShardingPlan("rw", (DevicePlan((*others, rows[0]), 1.0), DevicePlan((rows[1],), 1.0)))
    assert estimator_device([plan]) == "cuda" and estimator_device([tw_plan("x", ("a",))]) == "cpu"
    judges = judge_plans([plan], WORKLOAD, Topology(2, 1.0))
    assert "cuda" in judges.verdicts[1].note and judges.verdicts[1].max_ms[0] > 0


def test_disagreement_names_each_judges_choice_and_points_to_the_measurement():
    judges = Judges(
        ("p", "q"),
        (Verdict("autoshard", (1.0, 2.0)), Verdict("torchrec_estimator", (3.0, 1.0)), Verdict("dmp", (None, None))),
    )
    assert judges.preferred() == {"autoshard": "p", "torchrec_estimator": "q", "dmp": None}
    message = judges.disagreement()
    assert message == f"the judges disagree: autoshard prefers p, torchrec_estimator prefers q; {VERIFY_HINT}"


def test_the_services_stats_hold_the_judges_side_by_side(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.schemas.responses import PlanResponse
    from service.settings import Settings
    from tests.service_support import copy_shipped_profile, plan_body

    settings = Settings(model_dir=copy_shipped_profile(tmp_path), pool="thread", plan_timeout_s=600.0)
    with TestClient(create_app(settings)) as client:
        body = plan_body(12, planners=["size_greedy", "round_robin", "cost_greedy"])
        plain = client.post("/v1/plans", json=body)
        assert plain.status_code == 200, plain.text
        assert plain.json()["judges"] is None  # judges come with the stats
        response = client.post("/v1/plans", json={**body, "stats": True})
    assert response.status_code == 200, response.text
    report = PlanResponse.model_validate(response.json())
    assert report.judges is not None and report.judges.plans == [p.planner for p in report.plans]
    ours, theirs, at_links, measured = report.judges.judges  # the shipped profile measured its links
    judges = (ours.judge, theirs.judge, at_links.judge, measured.judge)
    assert judges == ("autoshard", "torchrec_estimator", "torchrec_estimator_measured_links", "dmp")
    assert all(m > d for m, d in zip(at_links.max_ms, theirs.max_ms))  # type: ignore[operator] # slower links
    assert at_links.prefers in report.judges.plans and "measured links" in (at_links.note or "")
    assert ours.max_ms == pytest.approx([p.max_cost_ms for p in report.plans], abs=1e-4)
    assert ours.prefers == report.best
    assert all(m is not None and m > 0 for m in theirs.max_ms) and theirs.prefers in report.judges.plans
    assert measured.prefers is None and VERIFY_HINT in (measured.note or "")

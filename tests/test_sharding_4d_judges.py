"""benchmarks/sharding_4d_judges: each judge's figures of a plan, and the plan each prefers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard  # noqa: E402
from benchmarks.sharding_4d_judges import MEASURED_LINKS, JudgedPlan, cause, cause_at_links, verdicts  # noqa: E402


def test_a_judged_plan_keeps_its_slowest_rank_and_its_largest_parts():
    plan = JudgedPlan.of([(3.0, 1.0), (1.0, 5.0), (2.0, 2.0)])
    assert (plan.max_ms, plan.compute_ms, plan.comm_ms) == (6.0, 3.0, 5.0)


def test_judges_each_prefer_the_plan_they_rate_fastest_and_say_where_they_differ():
    ours = {"cost_greedy": JudgedPlan(1.0, 0.5, 0.5), "torchrec": JudgedPlan(2.0, 0.5, 1.5)}
    theirs = {"cost_greedy": JudgedPlan(3.0, 1.0, 2.0), "torchrec": JudgedPlan(2.5, 1.0, 1.5)}
    judged = verdicts(ours, theirs, "estimated on cpu", (4.0, 5.0))
    assert judged.preferred() == {
        "autoshard": "cost_greedy",
        "torchrec_estimator": "torchrec",
        "measured": "cost_greedy",
    }
    assert not judged.agree and "torchrec_estimator prefers torchrec" in (judged.disagreement() or "")
    alone = verdicts(ours, None, "", None)  # no estimate, no measurement: our model alone
    assert alone.preferred() == {"autoshard": "cost_greedy", "torchrec_estimator": None} and alone.agree


def test_the_estimator_at_measured_links_is_a_judge_and_names_the_links_as_the_cause():
    ours = {"cost_greedy": JudgedPlan(1.0, 0.5, 0.5), "torchrec": JudgedPlan(2.0, 0.5, 1.5)}
    theirs = {"cost_greedy": JudgedPlan(0.3, 0.25, 0.05), "torchrec": JudgedPlan(0.2, 0.15, 0.05)}
    at_links = {"cost_greedy": JudgedPlan(1.2, 0.25, 0.95), "torchrec": JudgedPlan(1.9, 0.15, 1.75)}
    judged = verdicts(ours, theirs, "estimated on cpu", None, at_links)
    assert [v.judge for v in judged.verdicts] == ["autoshard", "torchrec_estimator", MEASURED_LINKS]
    assert (
        judged.preferred()[MEASURED_LINKS] == "cost_greedy" and judged.preferred()["torchrec_estimator"] == "torchrec"
    )
    table = Table("t", 100, 8)
    plan = ShardingPlan("p", (DevicePlan((TableShard(table),), 1.0),))
    context = {
        "our_links": "measured 0.454 / 0.318 GB/s",
        "declared_links": "600 / 12.5 GiB/s",
        "estimator_device": "cpu",
        "torchrec_device": "cpu",
    }
    plans = {"cost_greedy": plan, "torchrec": plan}
    said = cause(ours, theirs, plans, {**context, "at_measured_links": "cost_greedy"})
    assert said.startswith("the links: at the profile's measured links TorchRec's estimator prefers cost_greedy too")
    said = cause(ours, theirs, plans, {**context, "at_measured_links": "torchrec"})
    assert said.startswith("not the links alone") and "still prefers torchrec" in said
    assert cause(ours, theirs, plans, context).startswith("communication:")  # no measured-links judge: no verdict


def test_where_ours_and_the_estimator_at_measured_links_differ_the_cause_is_their_formulas():
    ours = {"cost_greedy": JudgedPlan(6.0, 2.0, 4.0), "torchrec": JudgedPlan(7.0, 2.5, 4.5)}
    at_links = {"cost_greedy": JudgedPlan(5.0, 1.0, 4.0), "torchrec": JudgedPlan(4.2, 1.2, 3.0)}
    table = Table("t", 100, 8)
    whole = ShardingPlan("p", (DevicePlan((TableShard(table),), 1.0),))
    said = cause_at_links(ours, at_links, {"cost_greedy": whole, "torchrec": whole}, "cpu")
    assert said.startswith("at measured links, formulas not links: they split over communication ")
    assert "communication 0.89 under ours, 1.33 under TorchRec's" in said and "data parallel" not in said


def test_a_judged_plan_needs_ranks():
    with pytest.raises(ValueError):
        JudgedPlan.of([])

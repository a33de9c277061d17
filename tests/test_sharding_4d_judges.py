"""benchmarks/sharding_4d_judges: each judge's figures of a plan, and the plan each prefers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sharding_4d_judges import JudgedPlan, verdicts  # noqa: E402


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


def test_a_judged_plan_needs_ranks():
    with pytest.raises(ValueError):
        JudgedPlan.of([])

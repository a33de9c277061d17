"""``benchmarks/sharding_4d.py`` with every shipped profile (issue 61): the three judges per profile.

Reads the runs' ``OUT/<suite>.json`` (one folder a profile, named as the profile), renders each
suite's page again with the benchmark's ``markdown`` and writes, into ``--results``, the pages
(``<profile>_<suite>.md``) and ``summary.json``: per profile, over the giants and hosts tasks
together, the geometric mean of cost_greedy / TorchRec under each judge, the tasks each judge
prefers cost_greedy on, where our model and TorchRec's estimator disagree and why, where
``torchrec_cpu`` could not plan, and the failures.

    for p in data/models/*-t1; do
        nice -n 19 python benchmarks/sharding_4d.py giants hosts --time-limit 30 --model $p --out RUNS/$(basename $p)
    done
    python lab/experiments/sharding_4d_profiles.py RUNS --results lab/results/sharding_4d
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.stats import geomean  # noqa: E402
from benchmarks.sharding_4d import markdown  # noqa: E402

SUITES = ("giants", "hosts")


def profile_summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One profile's figures over its suites' tasks."""
    rows = [r for report in reports for r in report["rows"]]
    paired = [r for r in rows if r.get("judges")]

    def mean(values: list[float | None]) -> float | None:
        found = [v for v in values if v]
        return round(geomean(found), 4) if found else None

    prefers = {
        judge: sum(1 for r in paired if r["judges"]["prefers"].get(judge) == "cost_greedy")
        for judge in ("autoshard", "torchrec_estimator", "measured")
        if any(r["judges"]["prefers"].get(judge) for r in paired)
    }
    return {
        "tasks": len(rows),
        "judged_tasks": len(paired),
        "communication": reports[0].get("communication"),
        "torchrec_planner": reports[0].get("torchrec_planner"),
        "commit": reports[0]["git"]["commit"][:10],
        "load_1min": [round(r["host_load_1min"], 1) for r in reports],
        "geomean_cost_greedy_over_torchrec": {
            "ours": mean([r.get("ratio_ours") for r in paired]),
            "ours_compute_only": mean([r.get("ratio_ours_compute_only") for r in paired]),
            "torchrec_estimator": mean([r.get("ratio_torchrec_estimate") for r in paired]),
            "torchrec_estimator_compute_only": mean([_compute_ratio(r, "torchrec_estimator") for r in paired]),
            "measured": mean([r["measured"]["ratio"] for r in paired if "measured" in r]),
        },
        "judges_prefer_cost_greedy": prefers,
        "disagreements": {r["task"]: r["judges"].get("cause") for r in paired if "cause" in r["judges"]},
        "torchrec_cpu_cannot_plan": sorted(r["task"] for r in rows if r.get("torchrec_cpu_error")),
        "estimated_as_cuda": sorted(
            r["task"] for r in paired if r["judges"]["estimator_device"] != r.get("torchrec_device")
        ),
        "torchrec_partial": sorted(r["task"] for r in rows if r.get("torchrec", {}).get("partial")),
        "failed": {k: v for report in reports for k, v in report["summary"]["failed"].items()},
    }


def _compute_ratio(row: dict[str, Any], judge: str) -> float | None:
    """cost_greedy / torchrec under ``judge``'s compute alone (each plan's largest rank compute)."""
    judged = row["judges"].get(judge)
    if not judged or not judged["torchrec"]["compute_ms"]:
        return None
    return float(judged["cost_greedy"]["compute_ms"] / judged["torchrec"]["compute_ms"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="one folder a profile, each with <suite>.json")
    parser.add_argument("--results", type=Path, default=ROOT / "lab" / "results" / "sharding_4d")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for folder in sorted(p for p in args.runs.iterdir() if p.is_dir()):
        reports = [json.loads((folder / f"{s}.json").read_text()) for s in SUITES if (folder / f"{s}.json").exists()]
        if not reports:
            continue
        for report in reports:
            (args.results / f"{folder.name}_{report['suite']}.md").write_text(markdown(report))
        summary[folder.name] = profile_summary(reports)
    (args.results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))

"""Every measured plan of one planner that departed from another's (by default rl+refine's from
cost_greedy's), read from ``autoshard evaluate --measure`` reports: the predicted ratio of the two
maxima beside the measured one (per round against cost_greedy, as the report gives it; else the
ratio of the measured maxima), grouped by the predicted gain.

    python benchmarks/departures_measured.py                      # every report under docs/
    python benchmarks/departures_measured.py REPORT.json ... --out runs/departures.json
    python benchmarks/departures_measured.py --planner cost_greedy --reference best_heuristic

A task whose two plans are one plan (the predicted ratio 1) is the control: its measured ratio
is the measurement's own spread. A report copied to two places counts once (the same task,
predicted and measured ratio).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUCKETS = ((0.0, 0.8), (0.8, 0.9), (0.9, 0.95), (0.95, 0.98), (0.98, 0.9999))  # predicted ratio: gains of >20%, ... <2%
HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
BEST_HEURISTIC = "best_heuristic"  # --reference: each task's heuristic with the lowest predicted max
SAME = 1e-4  # a predicted ratio this close to 1 is one plan (or one max)


def read_pairs(paths: list[Path], planner: str, reference: str) -> list[dict]:
    """(report, task, predicted ratio, measured ratio, its 95% interval) of every measured task
    where both planners ran, once each."""
    pairs, seen = [], set()
    for path in paths:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict) or not isinstance(report.get("tasks"), list):
            continue
        for task in report["tasks"]:
            plans = {p["planner"]: p for p in task.get("planners", [])}
            named = reference
            if reference == BEST_HEURISTIC:
                measured_heuristics = [h for h in HEURISTICS if h in plans and plans[h].get("measured_max_ms")]
                named = min(measured_heuristics, key=lambda h: plans[h]["predicted_max_ms"], default=None)
            if planner not in plans or named not in plans:
                continue
            ours, theirs = plans[planner], plans[named]
            measured = ours.get("measured_ratio_to_cost_greedy") if reference == "cost_greedy" else None
            if measured is None and ours.get("measured_max_ms") and theirs.get("measured_max_ms"):
                measured = ours["measured_max_ms"] / theirs["measured_max_ms"]
            if measured is None:
                continue
            predicted = ours["predicted_max_ms"] / theirs["predicted_max_ms"]
            key = (task["task"], round(predicted, 6), round(measured, 6))
            if key in seen:
                continue
            seen.add(key)
            pairs.append({"report": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                          "task": task["task"], "predicted": predicted, "measured": measured,
                          "ci95": ours.get("ratio_ci95") if reference == "cost_greedy" else None})
    return pairs


def summary(pairs: list[dict]) -> dict:
    def geomean(values) -> float:
        return math.exp(statistics.fmean(math.log(v) for v in values))

    def row(group: list[dict]) -> dict:
        cis = [p["ci95"] for p in group if p["ci95"]]
        return {"n": len(group), "predicted_geomean": round(geomean(p["predicted"] for p in group), 4),
                "measured_geomean": round(geomean(p["measured"] for p in group), 4),
                "measured_slower": sum(p["measured"] > 1 for p in group),
                "interval_above_1": sum(ci[0] > 1 for ci in cis), "interval_below_1": sum(ci[1] < 1 for ci in cis)}

    departures = [p for p in pairs if p["predicted"] < 1 - SAME]
    out = {"departures_predicted_lower": row(departures) if departures else None, "by_predicted_ratio": {}}
    for low, high in BUCKETS:
        group = [p for p in departures if low <= p["predicted"] < high]
        if group:
            out["by_predicted_ratio"][f"{low}-{high}"] = row(group)
    higher = [p for p in pairs if p["predicted"] > 1 + SAME]
    same = [p for p in pairs if abs(p["predicted"] - 1) <= SAME]
    out["departures_predicted_higher"] = row(higher) if higher else None
    out["same_max_control"] = row(same) if same else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, help="evaluate --measure report JSONs (default: docs/**)")
    parser.add_argument("--planner", default="rl+refine")
    parser.add_argument("--reference", default="cost_greedy")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    paths = args.reports or sorted((ROOT / "docs").rglob("*.json"))
    pairs = read_pairs(paths, args.planner, args.reference)
    if not pairs:
        sys.exit(f"no measured task with both {args.planner} and {args.reference} in {len(paths)} files")
    result = {"planner": args.planner, "reference": args.reference, "summary": summary(pairs), "pairs": pairs}
    for name, row in [("predicted lower", result["summary"]["departures_predicted_lower"]),
                      *result["summary"]["by_predicted_ratio"].items(),
                      ("predicted higher", result["summary"]["departures_predicted_higher"]),
                      ("same max (control)", result["summary"]["same_max_control"])]:
        if row:
            print(f"{name:>20}: n={row['n']:3d}  predicted {row['predicted_geomean']:.3f}  measured "
                  f"{row['measured_geomean']:.3f}  slower {row['measured_slower']}/{row['n']}  "
                  f"interval above 1: {row['interval_above_1']}, below 1: {row['interval_below_1']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""How two rules of choosing by measurement fare in rounds that did not choose: read `autoshard
evaluate --measure --verify --json` reports, and for every task print what each rule picks from
the verification's own rounds and how that plan measured in the evaluation's rounds.

    python benchmarks/verify_rules.py runs/verify3_default.json runs/verify3_grid.json

Rules: ``fastest`` (the shipped one: the lowest geometric-mean ratio to the predicted best over
the verification's rounds) and ``beyond-noise`` (the predicted best, unless others' whole 95%
interval lies below 1, then the lowest of those). Columns: the plan each rule picks, its measured
max over cost_greedy's in the evaluation's rounds (paired by round, geometric mean), and its
median measured max over the best heuristic's (the heuristic with the lowest median).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autoshard.planning.registry import HEURISTICS  # noqa: E402



def picks(candidates: list[dict]) -> dict[str, int]:
    ratios = [c["measured_ratio_to_predicted_best"] for c in candidates]
    fastest = min(range(len(candidates)), key=lambda k: (ratios[k], k))
    beyond = [k for k, c in enumerate(candidates) if c["ci95"] and c["ci95"][1] < 1]
    return {"fastest": fastest, "beyond-noise": min(beyond, key=lambda k: ratios[k]) if beyond else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    logs: dict[str, list[float]] = {"fastest": [], "beyond-noise": [], "cost_greedy": []}
    heuristic_logs: dict[str, list[float]] = {"fastest": [], "beyond-noise": [], "cost_greedy": []}
    print(f"{'task':30} {'rule':13} {'picks':34} {'/ cost_greedy':>13} {'/ best heuristic':>16}")
    for path in args.reports:
        for task in json.loads(path.read_text())["tasks"]:
            if "verification" not in task:
                continue
            rows = {r["planner"]: r for r in task["planners"]}
            best_heuristic = min(rows[h]["measured_max_ms"] for h in HEURISTICS if h in rows)
            candidates = task["verification"]["candidates"]
            heuristic_logs["cost_greedy"].append(math.log(rows["cost_greedy"]["measured_max_ms"] / best_heuristic))
            logs["cost_greedy"].append(0.0)
            for rule, k in picks(candidates).items():
                row = rows[candidates[k]["planners"][0]]
                to_greedy = row["measured_ratio_to_cost_greedy"]
                to_heuristic = row["measured_max_ms"] / best_heuristic
                logs[rule].append(math.log(to_greedy))
                heuristic_logs[rule].append(math.log(to_heuristic))
                print(f"{task['task']:30} {rule:13} {'='.join(candidates[k]['planners'])[:34]:34} "
                      f"{to_greedy:13.3f} {to_heuristic:16.3f}")
    for rule in ("fastest", "beyond-noise", "cost_greedy"):
        mean = math.exp(sum(logs[rule]) / len(logs[rule]))
        to_heuristic = math.exp(sum(heuristic_logs[rule]) / len(heuristic_logs[rule]))
        print(f"geometric mean, {rule:13}: {mean:.3f} of cost_greedy, {to_heuristic:.3f} of the best heuristic "
              f"({len(heuristic_logs[rule])} tasks)")


if __name__ == "__main__":
    main()

"""Markdown tables of measured `autoshard evaluate --measure --json` reports, for docs/evaluation.md.

    python benchmarks/evaluation_table.py docs/evaluation/default/report.json docs/evaluation/rl_grid/report.json

Per task, each planner's cell reads `pred P / meas M: **ratio to cost_greedy** [95% interval]`
(medians over rounds); "best heuristic" is the heuristic with the lowest measured max, chosen after
measuring (which flatters the heuristics). Then, over all tasks, each cost-model planner's
geometric mean of measured max against the best heuristic and against cost_greedy, and on how
many tasks it is at or below each (the point estimate; the intervals are in the cells).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

HEURISTICS = ("round_robin", "random", "size_greedy", "lookup_greedy", "size_lookup_greedy", "dim_greedy")
COLUMNS = ("cost_greedy", "rl", "rl+refine", "torchrec", "torchrec_cpu")
SEARCHERS = ("cost_greedy", "rl", "rl+refine", "torchrec_cpu")


def cell(row: dict) -> str:
    ci = row.get("ratio_ci95")
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return (f"pred {row['predicted_max_ms']:.2f} / meas {row['measured_max_ms']:.2f}: "
            f"**{row['measured_ratio_to_cost_greedy']:.3f}**{interval}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    tasks = [t for path in args.reports for t in json.loads(path.read_text())["tasks"]]
    print("| task | best heuristic | " + " | ".join(COLUMNS) + " |")
    print("| --- " * (len(COLUMNS) + 2) + "|")
    against: dict[str, list[tuple[float, float]]] = {name: [] for name in SEARCHERS}
    for task in tasks:
        rows = {p["planner"]: p for p in task["planners"] if p.get("measured_max_ms")}
        best = min((rows[h] for h in HEURISTICS if h in rows), key=lambda r: r["measured_max_ms"])
        cells = [f"{best['planner']}: {cell(best)}"] + [cell(rows[c]) if c in rows else "-" for c in COLUMNS]
        print(f"| {task['task']} | " + " | ".join(cells) + " |")
        for name in SEARCHERS:
            if name in rows:
                m = rows[name]["measured_max_ms"]
                against[name].append((m / best["measured_max_ms"], m / rows["cost_greedy"]["measured_max_ms"]))
    print()
    print("| planner | geomean vs best heuristic | at or below the best heuristic | geomean vs cost_greedy | at or below cost_greedy |")
    print("| --- | --- | --- | --- | --- |")
    for name, pairs in against.items():
        if not pairs:
            continue
        geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
        heur, cg = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"| {name} | {geo(heur):.3f} | {sum(x <= 1 for x in heur)} of {len(pairs)} | {geo(cg):.3f} | "
              f"{sum(x <= 1 for x in cg)} of {len(pairs)} |")


if __name__ == "__main__":
    main()

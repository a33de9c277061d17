"""The held-out grid's predicted maxima against two kinds of baseline: each planner of a
``policy eval --column-split`` run against the best **table-wise** heuristic of a run without
splits (the classic baselines, which place whole tables), and against the best heuristic of its
own run (the heuristics split by their proxy too). Both runs must be of the same tasks, cost
model and policy.

    python benchmarks/grid_baselines.py docs/figures/rl_grid/grid.json docs/figures/rl_grid_split/grid.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.planning.registry import HEURISTICS  # noqa: E402
from autoshard.core.stats import geomean  # noqa: E402

PLANNERS = ("cost_greedy", "rl", "rl+refine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table_wise", type=Path, help="grid.json of `autoshard policy eval` without --column-split")
    parser.add_argument("split", type=Path, help="grid.json of the same run with --column-split")
    args = parser.parse_args()
    whole, split = (json.loads(p.read_text()) for p in (args.table_wise, args.split))
    if whole["policy"] != split["policy"] or [t["task"] for t in whole["tasks"]] != [t["task"] for t in split["tasks"]]:
        sys.exit("error: the two runs are of different policies or tasks")
    ratios: dict[tuple[str, str], list[float]] = {}
    print(f"{'task':12s} " + " ".join(f"{p + ' / ' + b:>26s}" for p in PLANNERS for b in ("table-wise", "split")))
    for w, s in zip(whole["tasks"], split["tasks"]):
        best = {"table-wise": min(w["max_ms"][h] for h in HEURISTICS),
                "split": min(s["max_ms"][h] for h in HEURISTICS)}
        row = []
        for planner in PLANNERS:
            for baseline, against in best.items():
                ratio = s["max_ms"][planner] / against
                ratios.setdefault((planner, baseline), []).append(ratio)
                row.append(f"{ratio:26.3f}")
        print(f"{w['task']:12s} " + " ".join(row))
    print("geometric mean, worst:")
    for (planner, baseline), got in ratios.items():
        print(f"  {planner} with splits / the best {baseline} heuristic: {geomean(got):.3f}, worst {max(got):.3f}")


if __name__ == "__main__":
    main()

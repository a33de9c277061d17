"""What PPO adds to the warm start: ``rl`` (the policy's argmax alone) with the shipped policy
against ``rl`` with its warm start (the clone PPO started from), on the held-out 4D grid of
``autoshard policy eval`` (predicted; compute + communication).

    python lab/experiments/policy_gain.py                                  # the default profile
    python lab/experiments/policy_gain.py --tables 20,80 --topologies 1x4,2x8 --out runs/policy_gain

The profile holds both: ``policy.pt`` and ``policy_warm_start.pt`` (what ``autoshard policy
train`` writes to its work dir as ``warm_start.pt``). Per task, both plans' predicted max and
their ratio; the geometric mean (the issue's bar: <= 0.97). Writes OUT/policy_gain.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WARM_START = "policy_warm_start.pt"


def main() -> None:
    from autoshard.profiles import load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.core.communication import WithCommunication
    from autoshard.evaluation.grid import GridConfig, grid_tasks
    from autoshard.rl.planners import RLPlanner
    from autoshard.rl.policy import OptionPolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--tables", default="20,80,200,400,1000")
    parser.add_argument("--topologies", default="1x4,1x8,2x8,4x8,16x8")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "policy_gain")
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.profile)
    shipped, warm = profile.policy, OptionPolicy.load(args.profile / WARM_START)
    tables = tuple(int(v) for v in args.tables.split(","))
    topologies = tuple(tuple(int(v) for v in t.split("x")) for t in args.topologies.split(","))
    rows = []
    for task in grid_tasks(GridConfig(tables=tables, topologies=topologies)):  # type: ignore[arg-type]
        model = WithCommunication(profile.model, profile.communication, task.topology)
        found = {}
        for name, policy in (("shipped", shipped), ("warm_start", warm)):
            try:
                found[name] = RLPlanner(model, policy, allow_column_split=True).plan(task.workload, task.topology)
            except Exception as error:  # a dead end: reported, not a crash
                found[name] = error
        ok = all(not isinstance(p, Exception) for p in found.values())
        row = {
            "task": task.name,
            "shipped_ms": None if isinstance(found["shipped"], Exception) else found["shipped"].max_cost_ms,
            "warm_start_ms": None if isinstance(found["warm_start"], Exception) else found["warm_start"].max_cost_ms,
        }
        row["ratio"] = row["shipped_ms"] / row["warm_start_ms"] if ok else None
        rows.append(row)
        print(f"{task.name:22s} shipped {row['shipped_ms']}  warm start {row['warm_start_ms']}  ratio {row['ratio']}")
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    summary = {
        "shipped": shipped.name,
        "warm_start": warm.name,
        "tasks": len(rows),
        "compared": len(ratios),
        "geomean_shipped_over_warm_start": geomean,
        "better": sum(r < 1 - 1e-5 for r in ratios),
        "worse": sum(r > 1 + 1e-5 for r in ratios),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "policy_gain.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"geomean shipped / warm start: {geomean:.4f} over {len(ratios)} tasks "
        f"({summary['better']} better, {summary['worse']} worse)"
    )


if __name__ == "__main__":
    main()

"""Where measured plans disagree with the cost model, device by device. For each task of measured
`autoshard evaluate --measure --json` reports, the plans are made again (the planners are
deterministic) to get each device's predicted cost, beside its measured median from the report.
Per device: log(measured / predicted), less its task's median (the host's speed that hour is
the same for every device of a task), and what the device holds. Then the rank correlation of
that error with each feature over all devices.

    python benchmarks/device_errors.py docs/figures/evaluation_stop19/default/report.json \\
        docs/figures/evaluation_stop19/rl_grid/report.json --out docs/figures/device_errors.json

Plans are made compute only (``--no-communication``, as the reports were measured).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from error_runs import shipped_planning  # noqa: E402

from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402

FEATURES = ("tables", "lookups_per_sample", "mean_zipf", "mean_dim", "log10_rows", "predicted_ms")


def device_rows(report: dict, tasks: dict, context: PlannerContext) -> list[dict]:
    rows = []
    for entry in report["tasks"]:
        task = tasks[entry["task"]]
        measured = {p["planner"]: p["measured_device_ms"] for p in entry["planners"] if p.get("measured_device_ms")}
        plans = compare_planners(task.workload, task.topology, list(measured), context).plans
        mine = []
        for plan in plans:
            top = max(d.cost_ms for d in plan.devices)
            for device, ms in zip(plan.devices, measured[plan.planner]):
                tables = [s.as_table for s in device.shards]
                if not tables or device.cost_ms <= 0:
                    continue
                mine.append({"task": task.name, "planner": plan.planner, "tables": len(tables),
                             "lookups_per_sample": sum(t.pooling_factor for t in tables),
                             "mean_zipf": float(np.mean([t.zipf_alpha for t in tables])),
                             "mean_dim": float(np.mean([t.embedding_dim for t in tables])),
                             "log10_rows": math.log10(sum(t.num_embeddings for t in tables)),
                             "predicted_ms": device.cost_ms, "measured_ms": ms,
                             "near_the_max": device.cost_ms >= 0.98 * top,  # the devices that decide the plan
                             "log_error": math.log(ms / device.cost_ms)})
        middle = statistics.median(r["log_error"] for r in mine)
        for r in mine:
            r["log_error_in_task"] = r["log_error"] - middle
        rows += mine
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    _, context, tasks = shipped_planning()
    rows = [r for path in args.reports for r in device_rows(json.loads(path.read_text()), tasks, context)]
    correlations = {}
    for name, chosen in (("every device", rows), ("devices within 2% of their plan's predicted max",
                                                  [r for r in rows if r["near_the_max"]])):
        error = np.array([r["log_error_in_task"] for r in chosen])
        correlations[name] = {"devices": len(chosen), "median_error_in_task": round(float(np.median(error)), 4),
                              **{f: round(float(spearmanr([r[f] for r in chosen], error).statistic), 3)
                                 for f in FEATURES}}
        print(f"{name}: {len(chosen)} of {len({r['task'] for r in chosen})} tasks; Spearman of log(measured / "
              f"predicted), less its task's median, with: {correlations[name]}")
    worst = sorted(rows, key=lambda r: -r["log_error_in_task"])[:8]
    for r in worst:
        print(f"  under-priced {r['task']:20s} {r['planner']:18s} {r['tables']:3d} tables, "
              f"{r['lookups_per_sample']:7.1f} lookups, zipf {r['mean_zipf']:.2f}: predicted {r['predicted_ms']:.2f}, "
              f"measured {r['measured_ms']:.2f} ms ({math.exp(r['log_error_in_task']):.3f}x the task's median)")
    if args.out:
        deciding = sorted((r for r in rows if r["near_the_max"]), key=lambda r: -r["log_error_in_task"])
        args.out.write_text(json.dumps({"reports": [str(p) for p in args.reports], "correlations": correlations,
                                        "most_under_priced_deciding_devices": deciding[:20]}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Measure the plans of an ``autoshard evaluate --json`` report on this machine's device, where
the planners themselves cannot run (a GPU machine without TorchRec, say): every plan of every
task, interleaved as ``evaluate --measure`` measures them (``autoshard.evaluation.measure_plan``).

    python benchmarks/gpu/measure_report.py runs/gpu_plans/fp32/report.json --device cuda \\
        --mode embedding_bag --rounds 4 --out runs/gpu_measured.json

Writes, per task, each plan's predicted max and its measured max in each round (the max over
its devices), after each task, so that a run cut short keeps the tasks it finished.
``--seconds`` stops starting tasks past that many seconds. ``--summary`` reads such a file
back: per task, each planner's measured max over the best heuristic's (the heuristic with the
lowest median measured max, chosen after measuring, as ``evaluate`` chooses it), paired by
round, with its 95% interval and verdict, beside the predicted ratio; and the geometric means.

    python benchmarks/gpu/measure_report.py --summary docs/figures/gpu_h200/measured.json \
        docs/figures/gpu_h200/report.json --model data/models/cuda-nvidia-h200-embedding_bag-t1 \
        --out docs/figures/gpu_h200/summary.json

With ``--model`` (and the report), also the model's error on every distinct device set measured.
``--merged PATH`` (with ``--summary`` and the report) writes the report with each plan's measured
devices in it, as ``evaluate --measure --json`` writes one, so that ``autoshard cost errors --model
data/models/cuda-nvidia-h200-embedding_bag-t1 --measured PATH`` records the profile's device errors.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.stats import geomean, mad_sigma  # noqa: E402
from autoshard.core.task import Task  # noqa: E402
from autoshard.core.types import DevicePlan, MeasuredPlan, ShardingPlan  # noqa: E402
from autoshard.core.workload_file import workload_from_dict  # noqa: E402
from autoshard.evaluation.measured_reports import devices_of  # noqa: E402
from autoshard.evaluation.suite import (  # noqa: E402
    TaskResult,
    against_best_heuristic,
    against_held_out_heuristic,
    suite_summary,
)
from autoshard.planning.compare import Comparison  # noqa: E402
from autoshard.planning.registry import HEURISTICS  # noqa: E402


def task_plans(task: dict) -> tuple[list[ShardingPlan], int]:
    """The task's plans as the report holds them, and its batch size."""
    workload, _ = workload_from_dict(task["workload"])
    tables = {t.name: t for t in workload.tables}

    def devices(names: list[list[str]]) -> tuple[DevicePlan, ...]:
        return tuple(DevicePlan(placed, 0.0) for placed in devices_of(names, tables, task["task"]))

    plans = [ShardingPlan(row["planner"], devices(row["devices"]), 0.0) for row in task["planners"]]
    return plans, workload.batch_size


def task_result(task: dict, measured: dict) -> TaskResult:
    """A report's task with the rounds this script measured of its plans, as ``evaluate`` holds one."""
    workload, topology = workload_from_dict(task["workload"])
    plans, _ = task_plans(task)
    rounds = {p["planner"]: p for p in measured["planners"]}
    found = tuple(
        MeasuredPlan(
            p.planner,
            tuple(rounds[p.planner]["measured_device_ms"]),
            statistics.median(rounds[p.planner]["round_max_ms"]),
            0.0,
            1.0,
            (math.nan, math.nan),
            tuple(rounds[p.planner]["round_max_ms"]),
        )
        for p in plans
    )
    return TaskResult(Task(task["task"], workload, topology), Comparison(tuple(plans), (), ()), found, "cost_greedy")


def summary(measured: dict, report: dict) -> dict:
    """``--summary``: every planner that is not a heuristic against each task's best measured
    heuristic and against one held out (``autoshard.evaluation``, as ``evaluate --measure``
    compares them), beside the ratio predicted for it."""
    tasks = {t["task"]: t for t in report["tasks"]}
    rows, best, held_out = [], [], []
    for entry in measured["tasks"]:
        task = tasks[entry["task"]]
        predicted = {p["planner"]: p["predicted_max_ms"] for p in task["planners"]}
        result = task_result(task, entry)
        best.append(against_best_heuristic(result))
        held_out.append(against_held_out_heuristic(result))
        lowest = min(predicted[m.planner] for m in result.measured if m.planner in HEURISTICS)
        held = {h.planner: h for h in held_out[-1]}  # none with fewer than 4 rounds
        for against in best[-1]:
            out = held.get(against.planner)
            measured_max = next(m.max_ms for m in result.measured if m.planner == against.planner)
            rows.append(
                {
                    "task": entry["task"],
                    "planner": against.planner,
                    "heuristic": against.heuristic,
                    "measured_max_ms": measured_max,
                    "predicted_max_ms": predicted[against.planner],
                    "ratio": against.ratio,
                    "ci95": list(against.ci95),
                    "verdict": against.verdict,
                    "predicted_ratio": predicted[against.planner] / lowest,
                    "held_out_ratio": out.ratio if out else None,
                    "held_out_verdict": out.verdict if out else None,
                }
            )
    means = {name: s.to_dict() for name, s in suite_summary(best).items()}
    held_means = suite_summary(held_out)
    for name, got in means.items():
        got["geomean_predicted"] = geomean([r["predicted_ratio"] for r in rows if r["planner"] == name])
        got["held_out"] = held_means[name].to_dict() if name in held_means else None
    for r in rows:
        print(
            f"{r['task']:>20} {r['planner']:>12} vs {r['heuristic']:<18} measured {r['ratio']:.3f} "
            f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] {r['verdict']:<6} predicted {r['predicted_ratio']:.3f} "
            + (f"held out {r['held_out_ratio']:.3f} " if r["held_out_ratio"] is not None else "")
            + f"({r['measured_max_ms']:.3f} ms measured, "
            f"{r['predicted_max_ms']:.3f} predicted)"
        )
    for name, m in means.items():
        print(
            f"{name}: measured {m['geomean_vs_best_heuristic']:.3f} of the best heuristic (predicted "
            f"{m['geomean_predicted']:.3f}"
            + (f"; held out {m['held_out']['geomean_vs_best_heuristic']:.3f}" if m["held_out"] else "")
            + "), "
            f"{m['faster']} faster / {m['tie']} tie / {m['slower']} slower"
        )
    return {
        "measured": measured.get("report"),
        "device": measured.get("device"),
        "mode": measured.get("mode"),
        "rounds": measured.get("rounds"),
        "rows": rows,
        "by_planner": means,
    }


def merged(measured: dict, report: dict) -> dict:
    """``report`` with each plan's measured device costs (``measured_device_ms``) from ``measured``."""
    rows = {(t["task"], p["planner"]): p["measured_device_ms"] for t in measured["tasks"] for p in t["planners"]}
    return {
        **report,
        "tasks": [
            {
                **task,
                "planners": [
                    {**row, "measured_device_ms": rows.get((task["task"], row["planner"]))} for row in task["planners"]
                ],
            }
            for task in report["tasks"]
        ],
    }


def device_errors(measured: dict, report: dict, model_dir: Path) -> dict:
    """The model's error on every distinct device set the run measured (each once per task):
    MAPE, the median of measured / predicted, and the spread within a task (MAD sigma of the log
    ratios, each task's median taken out: what ranking a task's plans depends on)."""
    import numpy as np

    from cost_model.checkpoint import load_cost_model

    model = load_cost_model(model_dir)
    tasks = {t["task"]: t for t in report["tasks"]}
    logs: dict[str, dict[tuple, float]] = {}
    for task in measured["tasks"]:
        plans, batch = task_plans(tasks[task["task"]])
        for plan, row in zip(plans, task["planners"]):
            sets = [[s.as_table for s in d.shards] for d in plan.devices]
            for tables, predicted, ms in zip(sets, model.predict_many(sets, batch), row["measured_device_ms"]):
                if ms > 0:
                    logs.setdefault(task["task"], {})[tuple(sorted(t.name for t in tables))] = math.log(ms / predicted)
    every = np.array([v for found in logs.values() for v in found.values()])
    centred = np.concatenate([np.array(list(f.values())) - np.median(list(f.values())) for f in logs.values()])
    return {
        "device_sets": len(every),
        "mape": float(np.mean(np.abs(np.exp(-every) - 1))),
        "median_measured_over_predicted": float(np.exp(np.median(every))),
        "within_task_mad_sigma": mad_sigma(centred),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="?")
    parser.add_argument("--summary", type=Path, help="Summarise a file this script wrote.")
    parser.add_argument(
        "--model", type=Path, help="With --summary and the report: the model's error on each measured device set."
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mode", default="embedding_bag")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--row-cap-mb", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=1e9)
    parser.add_argument(
        "--merged",
        type=Path,
        help="With --summary and the report: write the report with the "
        "measured devices in it (for `autoshard cost errors`).",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.summary:
        if args.report is None:
            parser.error("--summary needs the report whose plans were measured")
        measured, report = json.loads(args.summary.read_text()), json.loads(args.report.read_text())
        found = summary(measured, report)
        if args.model:
            found["device_errors"] = device_errors(measured, report, args.model)
            print(json.dumps(found["device_errors"]))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
        if args.merged:
            args.merged.write_text(json.dumps(merged(measured, report)) + "\n")
        return
    from autoshard.evaluation.measure_plan import measure_plans
    from cost_model.profile import ExecutionMode
    from cost_model.traces.records import BenchConfig

    started = time.monotonic()
    report = json.loads(args.report.read_text())
    config = BenchConfig(device=args.device, mode=ExecutionMode(args.mode), row_cap_bytes=args.row_cap_mb * 1024**2)
    out = {"report": str(args.report), "device": args.device, "mode": args.mode, "rounds": args.rounds, "tasks": []}
    for task in report["tasks"]:
        if time.monotonic() - started > args.seconds:
            print(f"{task['task']}: not started (past {args.seconds:.0f} s)", flush=True)
            continue
        plans, batch = task_plans(task)
        measured = measure_plans(plans, batch, config, args.rounds)
        out["tasks"].append(
            {
                "task": task["task"],
                "planners": [
                    {
                        "planner": row["planner"],
                        "predicted_max_ms": row["predicted_max_ms"],
                        "round_max_ms": list(m.round_max_ms),
                        "measured_device_ms": list(m.device_ms),
                    }
                    for row, m in zip(task["planners"], measured)
                ],
            }
        )
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        line = ", ".join(f"{m.planner} {m.max_ms:.3f}" for m in measured)
        print(f"{task['task']} ({time.monotonic() - started:.0f} s): {line}", flush=True)


if __name__ == "__main__":
    main()

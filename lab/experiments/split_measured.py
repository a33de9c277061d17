"""Does column-wise splitting pay, measured, and against which baseline? Per task of a suite,
every planner of ``--planners`` without splits and with them (``--column-split``; the heuristics
split by their proxy, TorchRec's planner may shard column-wise), all measured interleaved in one
``measure_plans`` (compute only, as ``evaluate --measure --no-communication``).

    python benchmarks/split_measured.py default --tasks criteo_terabyte,criteo_terabyte_fp16_rowwise \
        --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 --rounds 6 --out runs/split_measured.json
    python benchmarks/split_measured.py default --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 \
        --planners all --rounds 6 --out runs/split_baselines_default.json

Per task it prints each plan's predicted and measured max and its ratio to cost_greedy's unsplit
plan, per round with the 95% interval. With every heuristic planned (the default, and
``--planners all``), it then compares each planner that is not a heuristic with three best
heuristics, each the one whose measured max is lowest (chosen after measuring, as ``evaluate``
chooses): the best **table-wise** heuristic (the classic baselines of DreamShard and NeuroShard,
which place whole tables), the best heuristic **split** by its proxy, and the best of **either**;
and prints the geometric means over the tasks. Plans alike (the same device sets) are measured
once. Set the harness's allocator settings in the environment (docs/traces.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.profiles import DEFAULT_MODEL, measuring_profile  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.planning.registry import HEURISTICS  # noqa: E402
from autoshard.planners.context import PlannerContext
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.core.stats import geomean, ratio_ci95, verdict  # noqa: E402
from autoshard.core.types import MeasuredPlan  # noqa: E402
from cost_model.bench.harness import BenchConfig  # noqa: E402
from autoshard.evaluation.measure_plan import measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402

SPLIT = " split"
BASELINES = ("table-wise", "split", "either")
"""Which heuristics a planner is compared with: those placing whole tables, those splitting, or all."""
ALL = ("cost_greedy", "rl", "rl+refine", "torchrec_cpu", *HEURISTICS)


def best_heuristic(measured: Sequence[MeasuredPlan], baseline: str) -> MeasuredPlan:
    """Of the measured heuristics' plans of the ``baseline`` kind, the lowest measured max."""
    return min((m for m in measured if m.planner.removesuffix(SPLIT) in HEURISTICS
                and (baseline == "either" or m.planner.endswith(SPLIT) == (baseline == "split"))),
               key=lambda m: m.max_ms)


def against_baselines(measured: Sequence[MeasuredPlan]) -> list[dict]:
    """Each planner that is not a heuristic against each ``BASELINES`` best heuristic, by round."""
    rows = []
    for m in measured:
        if m.planner.removesuffix(SPLIT) in HEURISTICS:
            continue
        for baseline in BASELINES:
            best = best_heuristic(measured, baseline)
            ratio, low, high = ratio_ci95(m.round_max_ms, best.round_max_ms)
            rows.append({"plan": m.planner, "baseline": baseline, "heuristic": best.planner, "ratio": ratio,
                         "ci95": [low, high], "verdict": verdict(low, high)})
    return rows


def summary(tasks: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """Per plan and baseline over the tasks: the geometric mean and the verdicts' counts."""
    out: dict[str, dict[str, dict]] = {}
    for task in tasks:
        for row in task["against"]:
            out.setdefault(row["plan"], {}).setdefault(row["baseline"], {"ratios": [], "verdicts": []})
            out[row["plan"]][row["baseline"]]["ratios"].append(row["ratio"])
            out[row["plan"]][row["baseline"]]["verdicts"].append(row["verdict"])
    return {plan: {baseline: {"geomean": geomean(got["ratios"]), "tasks": len(got["ratios"]),
                              **{v: got["verdicts"].count(v) for v in ("faster", "tie", "slower")}}
                   for baseline, got in by_baseline.items()} for plan, by_baseline in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--tasks", help="comma-separated task names (default: every task)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--planners", default="cost_greedy," + ",".join(HEURISTICS),
                        help=f"comma-separated planners, each planned without and with splits ('all': {','.join(ALL)})")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = list(ALL if args.planners == "all" else args.planners.split(","))
    if "cost_greedy" not in names:
        parser.error("--planners must include cost_greedy (the plans' reference)")
    loaded = measuring_profile(args.model)
    _, tasks = load_suite(args.suite)
    wanted = set(args.tasks.split(",")) if args.tasks else None
    config = BenchConfig(mode=default_mode(), row_cap_bytes=128 * 2**20)
    results = []
    for task in tasks:
        if wanted is not None and task.name not in wanted:
            continue
        plans = []
        for split in (False, True):
            context = PlannerContext(loaded.model, loaded.policy, allow_column_split=split)
            found = compare_planners(task.workload, task.topology, names, context).plans
            plans += [dataclasses.replace(p, planner=p.planner + (SPLIT if split else "")) for p in found]
        measured = measure_plans(plans, task.workload.batch_size, config, args.rounds, reference=0)
        print(f"{task.name}: {len(task.workload.tables)} tables on {task.topology.num_devices} devices, "
              f"{args.rounds} rounds, against cost_greedy's unsplit plan")
        rows = []
        for plan, m in zip(plans, measured):
            low, high = m.ratio_ci95
            print(f"  {plan.planner:28s} predicted {plan.max_cost_ms:8.3f}  measured {m.max_ms:8.3f} ms  "
                  f"ratio {m.ratio_to_reference:.3f} [{low:.3f}, {high:.3f}]")
            rows.append({"plan": plan.planner, "predicted_max_ms": plan.max_cost_ms, "measured_max_ms": m.max_ms,
                         "ratio": m.ratio_to_reference, "ci95": list(m.ratio_ci95),
                         "measured_device_ms": list(m.device_ms), "round_max_ms": list(m.round_max_ms),
                         "devices": [[s.as_table.name for s in d.shards] for d in plan.devices]})
        result = {"task": task.name, "plans": rows}
        if all(h in names for h in HEURISTICS):
            result["against"] = against_baselines(measured)
            for row in result["against"]:
                low, high = row["ci95"]
                print(f"  {row['plan']:22s} / best {row['baseline']:10s} heuristic ({row['heuristic']:24s}) "
                      f"{row['ratio']:.3f} [{low:.3f}, {high:.3f}] {row['verdict']}")
        results.append(result)
    report = {"model": str(args.model), "rounds": args.rounds, "planners": names, "tasks": results}
    if all("against" in r for r in results) and results:
        report["summary"] = summary(results)
        print("geometric means over the tasks (faster / tie / slower):")
        for plan, by_baseline in report["summary"].items():
            print(f"  {plan:22s} " + "   ".join(f"{b}: {s['geomean']:.3f} ({s['faster']}/{s['tie']}/{s['slower']})"
                                                for b, s in by_baseline.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

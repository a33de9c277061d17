"""A planner's plans in two checkouts, measured side by side: does a change that moves plans pay
when run? Each task is planned by ``--planner`` in this checkout and in ``--base`` (a ``git
worktree`` of an earlier commit; its code, this checkout's profile, in a process of its own),
then both plans are measured interleaved in one ``measure_plans`` (compute only, as ``evaluate
--measure --no-communication``), the ratio this / base per round with its 95% interval.

    git worktree add /tmp/base HEAD~1
    python benchmarks/checkout_plans_measured.py --base /tmp/base --tasks grid80x16,grid20x32 \
        --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 --rounds 6 --out runs/ab.json

Tasks are named as in the held-out grid (``autoshard.evaluation.grid``) or the default suite. Both
checkouts plan with the product's defaults. Set the harness's allocator settings in the
environment (docs/traces.md).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tasks_named(names: list[str]) -> list:
    from autoshard.core.task import load_suite
    from autoshard.evaluation.grid import GridConfig, grid_tasks

    known = {t.name: t for t in [*grid_tasks(GridConfig()), *load_suite("default")[1]]}
    missing = [n for n in names if n not in known]
    if missing:
        sys.exit(f"--tasks: unknown {', '.join(missing)}; known: {', '.join(sorted(known))}")
    return [known[n] for n in names]


def plan_all(planner: str, model: Path, names: list[str], out: Path) -> None:
    """Plan the named tasks with this process's checkout; pickle the plans to ``out``."""
    from autoshard.profiles import measuring_profile
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import make_planner

    loaded = measuring_profile(model)
    planned = make_planner(planner, PlannerContext(loaded.model, loaded.policy))
    out.write_bytes(pickle.dumps([planned.plan(t.workload, t.topology) for t in tasks_named(names)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--tasks", required=True, help="comma-separated task names")
    parser.add_argument("--planner", default="cost_greedy")
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plan-only", type=Path, help=argparse.SUPPRESS)  # the base checkout's process
    args = parser.parse_args()
    names = args.tasks.split(",")
    if args.plan_only:
        return plan_all(args.planner, args.model, names, args.plan_only)
    sys.path.insert(0, str(ROOT))
    from autoshard.core.stats import verdict
    from cost_model.bench.harness import BenchConfig
    from autoshard.evaluation.measure_plan import measure_plans
    from cost_model.profile import default_mode

    with tempfile.TemporaryDirectory() as tmp:
        here, there = Path(tmp) / "here.pkl", Path(tmp) / "base.pkl"
        for checkout, out in ((ROOT, here), (args.base.resolve(), there)):  # its code first on the path
            subprocess.run([sys.executable, __file__, "--base", str(args.base), "--tasks", args.tasks, "--planner",
                            args.planner, "--model", str(args.model.resolve()), "--plan-only", str(out)],
                           check=True, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
        ours, theirs = pickle.loads(here.read_bytes()), pickle.loads(there.read_bytes())
    config = BenchConfig(mode=default_mode(), row_cap_bytes=128 * 2**20)
    rows = []
    for task, new, old in zip(tasks_named(names), ours, theirs):
        shards = lambda plan: [len(d.shards) for d in plan.devices]  # noqa: E731
        same = [d.set_key for d in new.devices] == [d.set_key for d in old.devices]
        measured = measure_plans([old, new], task.workload.batch_size, config, args.rounds, reference=0)
        m = measured[1]
        rows.append({"task": task.name, "same_plan": same, "predicted_ratio": new.max_cost_ms / old.max_cost_ms,
                     "measured_ratio": m.ratio_to_reference, "ci95": list(m.ratio_ci95),
                     "verdict": verdict(*m.ratio_ci95), "measured_max_ms": [measured[0].max_ms, m.max_ms],
                     "shards": [sum(shards(old)), sum(shards(new))],
                     "predicted_device_ms": [[d.cost_ms for d in p.devices] for p in (old, new)],
                     "measured_device_ms": [list(x.device_ms) for x in measured]})
        low, high = m.ratio_ci95
        print(f"{task.name:12s} shards {sum(shards(old))} -> {sum(shards(new))}  predicted "
              f"{rows[-1]['predicted_ratio']:.3f}  measured {m.ratio_to_reference:.3f} [{low:.3f}, {high:.3f}] "
              f"{rows[-1]['verdict']}{'  (one plan)' if same else ''}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"planner": args.planner, "base": str(args.base), "rounds": args.rounds,
                                        "model": str(args.model), "tasks": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

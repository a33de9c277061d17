"""How fast cost_greedy plans under ``--model torchrec`` (issue 62's speed bar: 1,000 tables on
16x8 in <= 2 s), built as ``lab/experiments/torchrec_objective.py`` builds its tasks.

    nice -n 19 python lab/experiments/planning_speed_torchrec.py grid1000x16x8 grid200x16x8 syn320_16x8
    python lab/experiments/planning_speed_torchrec.py criteo_tb_4x8 --plans /tmp/plans_after.json
    python lab/experiments/planning_speed_torchrec.py grid1000x16x8 \
        --same-as lab/results/planning_speed_torchrec/grid1000x16x8.json

Per task: the wall seconds of ``compare_planners(["cost_greedy"])`` (TorchRec's set-up included,
departure margin 0), the plan's ``max_cost_ms``, whether it fits TorchRec's storage, and the
1-minute load (a shared machine is noisy) and the plan's digest (SHA-256 of its max and its
devices' shard lists). ``--plans FILE`` writes each plan's max and its shard lists, so two trees'
plans can be compared for identity; ``--record FILE`` the rows without the shard lists (small);
``--same-as FILE`` checks each plan's digest against such a record and exits 1 where one differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.task import Task, load_suite  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from cost_model.process import one_thread  # noqa: E402


def named_tasks(names: list[str]) -> list[Task]:
    """The grid's tasks and the bundled suites' (hosts, giants), by name."""
    found: dict[str, Task] = {}
    if any(n.startswith("grid") for n in names):
        from autoshard.evaluation.grid import GridConfig, grid_tasks

        found.update({t.name: t for t in grid_tasks(GridConfig())})
    if any(not n.startswith("grid") for n in names):
        for suite in ("hosts", "giants"):
            found.update({t.name: t for t in load_suite(suite)[1]})
    return [found[n] for n in names]


def timed(task: Task) -> dict[str, Any]:
    from autoshard.torchrec.cost_model import TorchRecCostModel

    model = TorchRecCostModel()
    context = PlannerContext(model, time_budget_s=3000.0, departure_margin=0.0)
    started = time.perf_counter()
    comparison = compare_planners(task.workload, task.topology, ["cost_greedy"], context)
    wall_s = time.perf_counter() - started
    load = os.getloadavg()[0]
    if not comparison.plans:
        error = str(comparison.errors or comparison.skipped)
        return {"task": task.name, "wall_s": wall_s, "load": load, "error": error}
    plan = comparison.plans[0]
    bound = model.for_task(task.workload, task.topology)
    sets = [[s.as_table for s in d.shards] for d in plan.devices]
    devices = [[list(k) for k in d.set_key] for d in plan.devices]
    return {
        "task": task.name,
        "wall_s": round(wall_s, 3),
        "plan_time_s": round(plan.plan_time_s, 3),
        "load": round(load, 2),
        "max_cost_ms": plan.max_cost_ms,
        "fits_torchrec_storage": bool(bound.fits(sets)),
        "plan_digest": plan_digest(plan.max_cost_ms, devices),
        "devices": devices,
    }


def plan_digest(max_cost_ms: float, devices: list[Any]) -> str:
    """SHA-256 of a plan's max and its devices' shard lists, as ``--plans`` writes them."""
    return hashlib.sha256(json.dumps([max_cost_ms, devices], default=str).encode()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="+", help="task names: grid* (the 4D grid), hosts' or giants'")
    parser.add_argument("--plans", type=Path, help="write each plan's max and shard lists here (JSON)")
    parser.add_argument("--record", type=Path, help="write the rows without shard lists here (JSON)")
    parser.add_argument("--same-as", type=Path, help="a --record file: exit 1 where a plan's digest differs")
    args = parser.parse_args(argv)
    expected = {r["task"]: r["plan_digest"] for r in json.loads(args.same_as.read_text())} if args.same_as else {}
    one_thread()
    rows = []
    for task in named_tasks(args.tasks):
        row = timed(task)
        rows.append(row)
        print(
            f"{row['task']}: {row['wall_s']:.2f} s, plan_time_s {row.get('plan_time_s')} (load {row['load']:.1f}) "
            f"max_cost_ms {row.get('max_cost_ms', float('nan')):.6f} fits {row.get('fits_torchrec_storage')}"
            + (f" error {row['error']}" if "error" in row else ""),
            flush=True,
        )
    if args.plans:
        args.plans.write_text(json.dumps(rows, default=str) + "\n")
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        small = [{k: v for k, v in r.items() if k != "devices"} for r in rows]
        args.record.write_text(json.dumps(small, indent=1) + "\n")
    differ = [r["task"] for r in rows if r["task"] in expected and r.get("plan_digest") != expected[r["task"]]]
    for row in rows:
        if row["task"] in expected:
            print(f"{row['task']}: {'DIFFERENT plan' if row['task'] in differ else 'same plan'} as {args.same_as}")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()

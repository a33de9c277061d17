"""How far below cost_greedy's plan could any plan be predicted? The room an agent has to beat it.

    python benchmarks/headroom.py --out docs/figures/headroom.json

Plans the held-out grid (20-400 test-pool tables on 4-64 devices, binding memory; ``autoshard
policy eval``'s tasks) and the default suite with cost_greedy, the profile's model and
all-to-all, with the product's default column splits, and compares each plan's max device
cost with two floors under its own units: the mean device cost (a plan's max is at least its
mean) and the costliest unit alone with its all-to-all (the cost model floors a device at its
costliest table).
A plan predicted lower than cost_greedy's must beat ``max / max(mean, costliest unit)``: by
grouping the tables so that the devices' total falls (the model is not additive, but
``benchmarks/total_slack.py`` found rl+refine's own placements at most 1.14% below
cost_greedy's total), or by splitting the costliest unit finer (which ``split_units`` does where
a cheaper shard exists). Neither floor is a proof for every plan; together they say where
there is room.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cost_model.process import one_thread  # noqa: E402
from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.profiles import load_models  # noqa: E402


def headroom_rows(tasks, loaded) -> list[dict]:
    rows = []
    context = PlannerContext(loaded.model, loaded.policy)
    for name, workload, topology in tasks:
        plan = compare_planners(workload, topology, ["cost_greedy"], context, loaded.communication).plans[0]
        costs = [d.cost_ms for d in plan.devices]
        units = [s.as_table for d in plan.devices for s in d.shards]
        priced = (WithCommunication(loaded.model, loaded.communication, topology.num_devices)
                  if loaded.communication is not None else loaded.model)  # as the plan's devices are priced
        unit = max(priced.predict_many([[u] for u in units], workload.batch_size))
        top, mean = max(costs), sum(costs) / len(costs)
        rows.append({"task": name, "tables": len(workload.tables), "devices": topology.num_devices,
                     "max_ms": top, "max_over_mean": top / mean, "max_over_costliest_unit": top / unit,
                     "headroom": top / max(mean, unit) - 1.0,
                     "column_shards": sum(1 for d in plan.devices for s in d.shards if s.columns is not None)})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| task | max / mean device | max / costliest unit | room below cost_greedy | column shards |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['task']} | {r['max_over_mean']:.3f} | {r['max_over_costliest_unit']:.3f} | "
              f"{r['headroom']:.1%} | {r['column_shards']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / "data" / "models")
    parser.add_argument("--profile", default=None, help="A profile of --models (default: its default).")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "headroom.json")
    args = parser.parse_args()
    one_thread()
    loaded = load_models(args.models).resolve(args.profile)
    groups = {"grid": [(t.name, t.workload, t.topology) for t in grid_tasks(GridConfig())],
              "default": [(t.name, t.workload, t.topology) for t in load_suite("default")[1]]}
    out: dict = {"profile": loaded.profile}
    for group, tasks in groups.items():
        rows = headroom_rows(tasks, loaded)
        room = [r["headroom"] for r in rows]
        out[group] = {"rows": rows, "median_headroom": statistics.median(room), "max_headroom": max(room),
                      "tasks_within_2pct": sum(h <= 0.02 for h in room), "tasks": len(rows)}
        print(f"{group}: {len(rows)} tasks, room below cost_greedy median {statistics.median(room):.1%}, "
              f"max {max(room):.1%}, within 2% on {out[group]['tasks_within_2pct']}")
        print(markdown(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

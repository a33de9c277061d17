"""What constraints cost: cost_greedy on a suite's tasks with random feasible pins, co-located
groups and kept-apart pairs, against the same task without constraints, with the lower bound each
side and what the constraints force.

    python benchmarks/constraints_cost.py                    # the default suite, 3 draws a task
    python benchmarks/constraints_cost.py --suite hosts --draws 2 --out runs/benchmarks/constraints.json

Per draw: 2 pins (a table to 2 random ranks), one co-located pair (one device), one kept-apart
pair, among tables that fit a device whole. The lower bound of a plan is 0.9x the even share of
the tables' costs alone (a set may cost less than the sum of its tables alone; a table may be
split, so the costliest alone bounds nothing); with constraints, also what they force
(``forced``): the co-located pair's set cost on one device, and each pinned table's cost alone
(constrained tables stay whole). The bar: the constrained plan's max stays within
max(unconstrained max, forced bound) (x 1.02, the search's noise); the output says where not.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.core.constraints import Apart, Colocate, Constraints, Pin  # noqa: E402
from autoshard.core.errors import PlannerError  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.spread_stage import BOUND_SLACK  # noqa: E402
from autoshard.planning.registry import make_planner  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402

TOLERANCE = 1.02


def draw_constraints(workload, topology, rng: np.random.Generator) -> Constraints:
    fits = [t.name for t in workload.tables if t.memory_bytes <= 0.25 * topology.smallest_device_memory_bytes]
    picked = list(rng.choice(fits, size=min(6, len(fits)), replace=False))
    ranks = lambda: tuple(sorted(int(r) for r in rng.choice(topology.num_devices, 2, replace=False)))  # noqa: E731
    placement = [Pin(picked[0], ranks()), Pin(picked[1], ranks()), Colocate((picked[2], picked[3]))]
    placement.append(Apart((picked[4], picked[5])))
    return Constraints(placement=tuple(placement))


def bounds(workload, topology, model, compute, constraints: Constraints) -> tuple[float, float]:
    """(the plain lower bound, the bound with what ``constraints`` force); ``compute``: the model
    without communication (a table alone pays the collectives' latency, which a set pays once)."""
    batch = workload.batch_size
    alone = dict(zip((t.name for t in workload.tables), model.predict_many([[t] for t in workload.tables], batch)))
    plain = BOUND_SLACK * sum(compute.predict_many([[t] for t in workload.tables], batch)) / topology.num_devices
    forced = plain
    tables = {t.name: t for t in workload.tables}
    for c in constraints.placement:
        if isinstance(c, Colocate):
            forced = max(forced, model.predict([tables[t] for t in c.tables], workload.batch_size))
        elif isinstance(c, Pin):
            forced = max(forced, alone[c.table])  # it lands whole on one of its ranks
    return plain, forced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="default")
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks" / "constraints_cost.json")
    args = parser.parse_args(argv)
    one_thread()
    profile = load_profile_or_exit(args.model)
    rng = np.random.default_rng(args.seed)
    rows = []
    for task in load_suite(args.suite)[1]:
        model = WithCommunication(profile.model, profile.communication, task.topology)
        context = PlannerContext(model)
        free = make_planner("cost_greedy", context).plan(task.workload, task.topology)
        for draw in range(args.draws):
            constraints = draw_constraints(task.workload, task.topology, rng)
            workload = replace(task.workload, constraints=constraints)
            plain, forced = bounds(task.workload, task.topology, model, profile.model, constraints)
            try:
                bound = make_planner("cost_greedy", context).plan(workload, task.topology)
            except PlannerError as error:
                rows.append({"task": task.name, "draw": draw, "error": str(error)})
                print(f"{task.name} #{draw}: {error}")
                continue
            within = bound.max_cost_ms <= TOLERANCE * max(free.max_cost_ms, forced)
            row = {
                "task": task.name,
                "draw": draw,
                "free_max_ms": free.max_cost_ms,
                "constrained_max_ms": bound.max_cost_ms,
                "ratio": bound.max_cost_ms / free.max_cost_ms,
                "lower_bound_ms": plain,
                "forced_bound_ms": forced,
                "within": within,
                "constraints": constraints.to_dict(),
            }
            rows.append(row)
            print(
                f"{task.name} #{draw}: free {free.max_cost_ms:.3f}, constrained {bound.max_cost_ms:.3f} "
                f"({row['ratio']:.3f}x); bound {plain:.3f} -> {forced:.3f}; within: {within}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = [r for r in rows if "ratio" in r]
    summary = {
        "command": "python benchmarks/constraints_cost.py " + " ".join(argv or sys.argv[1:]),
        "tolerance": TOLERANCE,
        "rows": rows,
        "geomean_ratio": float(np.exp(np.mean(np.log([r["ratio"] for r in done])))) if done else None,
        "outside": [f"{r['task']}#{r['draw']}" for r in done if not r["within"]],
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"geometric mean constrained / free: {summary['geomean_ratio']}; outside the bar: {summary['outside']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

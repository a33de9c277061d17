"""What the agent's repair phase can gain (docs/rl.md, "Revisiting: the repair phase").

From greedy placement (cost_greedy's, before its local search), on the held-out grid and on
held-out tasks of the training distribution, each with the profile's all-to-all:

- local search with moves only, against moves and swaps (what repair steps must offer);
- fixed repair rules, one-weight linear policies run through ``rl.repair.policy_repair`` over
  the same offers, against local search's steepest descent (``improve``): how far any policy of
  the repair phase could end from the clone of local search.

    python benchmarks/repair_rules.py --tasks 40 --out runs/repair_rules.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_exit, one_thread  # noqa: E402
from autoshard.planners import local_search  # noqa: E402
from autoshard.planners.cost_greedy import greedy_placement  # noqa: E402
from autoshard.rl.env import priced  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.rl.observation import DEVICE_FEATURES  # noqa: E402
from autoshard.rl.policy import CONTEXT, ROW, DevicePolicy, PolicyInfo  # noqa: E402
from autoshard.rl.repair import policy_repair  # noqa: E402
from autoshard.rl.tasks import TaskDistribution  # noqa: E402

RULES = {  # a device row's score: the weights of its features
    "steepest (greedy's choice)": {"greedy_choice": 1.0},
    "lowest cost after the change": {"cost_if_added": -1.0},
    "least loaded target": {"cost": -1.0},
    "smallest increase": {"added_cost": -1.0},
}


def rule(weights: dict[str, float]) -> DevicePolicy:
    w = np.zeros((ROW, 1), dtype=np.float32)
    for feature, value in weights.items():
        w[CONTEXT + DEVICE_FEATURES.index(feature), 0] = value
    return DevicePolicy([(w, np.zeros(1, dtype=np.float32))], PolicyInfo("rule", 1, 2, "step", 1.25, 0,
                                                                           repair_rounds=50))


def moves_only(source, targets, scorer, swaps, *rest, **options):
    """``local_search._ranked_changes`` that offers no swap."""
    return [] if swaps else ranked(source, targets, scorer, swaps, *rest, **options)


ranked = local_search._ranked_changes


def summary(logs: list[float]) -> dict[str, float]:
    values = np.array(logs)
    return {"geomean": math.exp(values.mean()), "lower": int((values < -1e-6).sum()),
            "higher": int((values > 1e-6).sum()), "tasks": len(values),
            "best": math.exp(values.min()), "worst": math.exp(values.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--tasks", type=int, default=40, help="Held-out training-distribution tasks beside the grid.")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.model)
    rng = np.random.default_rng(args.seed)
    held_out = TaskDistribution(split="test", num_tables=(40, 80, 160), num_devices=(4, 8, 16))
    tasks = [*grid_tasks(GridConfig()), *(held_out.sample(rng) for _ in range(args.tasks))]
    moves: list[float] = []
    rules: dict[str, list[float]] = {name: [] for name in RULES}
    for task in tasks:
        model, batch = priced(task, profile.model, profile.communication), task.workload.batch_size
        start = greedy_placement(task.workload, task.topology, model, None).devices
        searched = [d.copy() for d in start]
        local_search.improve(searched, model, batch, 50)
        steepest = max(d.load for d in searched)
        local_search._ranked_changes = moves_only
        try:
            moved = [d.copy() for d in start]
            local_search.improve(moved, model, batch, 50)
        finally:
            local_search._ranked_changes = ranked
        moves.append(math.log(max(d.load for d in moved) / steepest))
        for name, weights in RULES.items():
            repaired = [d.copy() for d in start]
            policy_repair(repaired, rule(weights), model, batch, None, 200)
            rules[name].append(math.log(max(d.load for d in repaired) / steepest))
    report = {"command": " ".join(sys.argv), "profile": profile.profile, "tasks": len(tasks),
              "moves_only_vs_moves_and_swaps": summary(moves),
              "rules_vs_steepest": {name: summary(logs) for name, logs in rules.items()}}
    print(json.dumps(report, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

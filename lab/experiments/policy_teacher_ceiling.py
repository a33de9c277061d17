"""How close can an rl policy get to cost_greedy under a cost model, given the options the env
offers? Each teacher's plan over the env's options, and a policy's argmax, against cost_greedy's
plan of the same task (issue 62, part 4), on ``policy train``'s held-out tasks:

- ``rule``: the greedy rule over options (``options.expert_choice``, the shipped policies' teacher);
- ``plan``: cost_greedy's own form per table with the rule's devices (``imitation.PlanTeacher``):
  what a policy that chose every table's form as cost_greedy does would plan;
- ``policy``: the argmax of ``--policy`` (each under its own ``spread_every_table``).

Each with the env's default options and with ``spread_every_table`` (every table offered its
splits and replicas under an exact model). All plans are the env's: TorchRec's kernels and
planning topology, memory as the model counts it; cost_greedy plans that same task.

    python lab/experiments/policy_teacher_ceiling.py --model torchrec --compute-device cuda \
        --policy data/models/torchrec/cuda/policy.pt \
        --out lab/results/policy_per_model/torchrec_cuda_teacher_ceiling.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from autoshard.core.errors import PlannerError
    from autoshard.planners.cost_greedy import CostGreedyPlanner
    from autoshard.profiles import load_profile_or_none
    from autoshard.rl.env import EnvConfig, ShardingEnv
    from autoshard.rl.imitation import PlanTeacher, teacher
    from autoshard.rl.policy import OptionPolicy
    from autoshard.rl.tasks import FixedTasks
    from autoshard.rl.train import TrainConfig, eval_tasks
    from cost_model.process import one_thread

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "data" / "models" / "default"))
    parser.add_argument("--compute-device", default=None)
    parser.add_argument("--policy", type=Path, default=None)
    parser.add_argument("--tasks", type=int, default=None, help="the first N held-out tasks (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    one_thread()
    warnings.simplefilter("ignore")  # a policy of another model, on purpose
    profile, why = load_profile_or_none(Path(args.model), compute_device=args.compute_device)
    if profile is None:
        sys.exit(f"error: {why}")
    model, communication = profile.model, profile.communication
    policy = OptionPolicy.load(args.policy) if args.policy else None
    config = TrainConfig()
    assert config.eval_distribution is not None
    tasks = eval_tasks(config.eval_distribution, config.eval_tasks, config.seed + 1)[: args.tasks]

    def episode(task, spread: bool, choose) -> float:
        env = ShardingEnv(model, FixedTasks((task,)), EnvConfig(spread_every_table=spread), communication)
        env.reset(seed=0, options={"task": task})
        done = False
        while not done:
            done = env.step(choose(env))[2]
        assert env.state is not None
        return float(env.state.loads.max()) if env.state.done else math.inf

    def argmax(env) -> int:
        assert policy is not None
        return int(np.argmax(policy.scores(env.state.context(), env.found.rows)))

    rows = []
    for task in tasks:
        env = ShardingEnv(model, FixedTasks((task,)), EnvConfig(), communication)
        env.reset(seed=0, options={"task": task})
        state = env.state
        assert state is not None
        try:
            greedy = CostGreedyPlanner(state.cost_model, allow_column_split=True).plan(state.workload, state.topology)
        except PlannerError:
            continue
        row = {"task": task.name, "cost_greedy_ms": greedy.max_cost_ms}
        for spread in (False, True):
            tag = "spread" if spread else "default"
            plan_teacher = PlanTeacher()
            row[f"rule/{tag}"] = episode(task, spread, lambda e: teacher(e, e.action_masks())) / greedy.max_cost_ms
            row[f"plan/{tag}"] = episode(task, spread, lambda e: plan_teacher(e, e.action_masks())) / greedy.max_cost_ms
        if policy is not None:
            row["policy"] = episode(task, policy.info.spread_every_table, argmax) / greedy.max_cost_ms
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    names = [k for k in rows[0] if "/" in k or k == "policy"]
    summary = {
        name: {
            "geomean_vs_cost_greedy": math.exp(float(np.mean([math.log(r[name]) for r in rows]))),
            "max_vs_cost_greedy": max(r[name] for r in rows),
        }
        for name in names
    }
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        report = {
            "command": "python lab/experiments/policy_teacher_ceiling.py " + " ".join(sys.argv[1:]),
            "policy": None if policy is None else policy.name,
            "summary": summary,
            "rows": rows,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

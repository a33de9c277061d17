"""An experiment: clone a rollout policy instead of greedy placement, and see whether ``rl`` gains.

The rollout policy (the expert): at each step, for each allowed device (one of the empty ones,
which are alike), place the unit there, complete the placement greedily (``cheapest_after``),
and keep the device whose completion has the lowest predicted max (ties: greedy's own choice).
It provably does no worse than greedy placement, at O(D x T) greedy steps per step. Its episodes
in the training environment (its observations, masks and choices) are cloned into a fresh
policy as ``policy train`` clones greedy (``autoshard.rl.imitation.clone``); the clone then
plans the held-out grid as ``rl``, beside the shipped policy's ``rl`` and cost_greedy:

    python benchmarks/rollout_distillation.py --episodes 150 --out runs/rollout_policy

Prints the share of demonstrated steps where the expert departs from greedy, the clone's
agreement with the expert, and per grid task rl (shipped), rl (clone) and cost_greedy, predicted.
Not part of the product: the policy it writes is an experiment's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_none, one_thread  # noqa: E402
from autoshard.core.errors import PlannerError  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.placement import place  # noqa: E402
from autoshard.planners.placing import cheapest_after
from autoshard.rl.env import EnvConfig, ShardingEnv, start  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.rl.imitation import Expert, clone, demonstrations, greedy_expert  # noqa: E402
from autoshard.rl.policy import DevicePolicy, DeviceScoringPolicy  # noqa: E402
from autoshard.rl.tasks import TaskDistribution  # noqa: E402


def rollout_expert(env: ShardingEnv, allowed: np.ndarray) -> int:
    """The rollout policy's device for the env's current unit (ties: greedy's own)."""
    state = env.state
    greedy = cheapest_after(state, allowed)
    best, choice, tried_empty = math.inf, greedy, False
    for device in allowed.tolist():
        if state.count[device] == 0:
            if tried_empty:
                continue
            tried_empty = True
        trial = start(env.task, env.cost_model, env.communication, env.config, env.state.units)
        trial.preplace([*env.actions, device])
        try:
            value = float(place(trial, cheapest_after).loads.max())
        except PlannerError:
            continue
        if value < best - 1e-9 or (abs(value - best) <= 1e-9 and device == greedy):
            best, choice = value, device
    return choice


def counting_departures(expert: Expert) -> tuple[Expert, list[int]]:
    """``expert``, and a list that counts (steps, departures from greedy's device) as it runs."""
    counts = [0, 0]

    def counted(env: ShardingEnv, allowed: np.ndarray) -> int:
        choice = expert(env, allowed)
        counts[0] += 1
        counts[1] += choice != greedy_expert(env, allowed)
        return choice

    return counted, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "rollout_policy")
    args = parser.parse_args()
    one_thread()
    loaded, why = load_profile_or_none(args.profile)
    if loaded is None or loaded.policy is None:
        sys.exit(f"error: {why or 'the profile has no policy'}")
    from sb3_contrib import MaskablePPO

    tasks = TaskDistribution(num_tables=(20, 40, 80), num_devices=(4, 8))
    env = ShardingEnv(loaded.model, tasks, EnvConfig(), loaded.communication)
    started = time.perf_counter()
    expert, counts = counting_departures(rollout_expert)
    demos = demonstrations(env, args.episodes, args.seed + 2, expert)
    print(f"{len(demos):,} expert steps of {args.episodes} episodes in {time.perf_counter() - started:.0f} s; "
          f"the expert departs from greedy on {counts[1] / max(counts[0], 1):.1%} of them")
    model = MaskablePPO(DeviceScoringPolicy, env, seed=args.seed, policy_kwargs={"hidden": loaded.policy.info.hidden},
                        device="cpu", verbose=0)
    agreement = clone(model.policy, demos, args.epochs, seed=args.seed)
    print(f"the clone picks the expert's device on {agreement:.1%} of the demonstrated steps")
    policy = DevicePolicy.from_net(model.policy.mlp_extractor, replace(loaded.policy.info, command="rollout distillation"))
    args.out.mkdir(parents=True, exist_ok=True)
    policy.save(args.out / "policy.pt")
    logs = []
    for task in grid_tasks(GridConfig()):
        shipped = compare_planners(task.workload, task.topology, ["cost_greedy", "rl"],
                                   PlannerContext(loaded.model, loaded.policy), loaded.communication)
        cloned = compare_planners(task.workload, task.topology, ["rl"], PlannerContext(loaded.model, policy),
                                  loaded.communication)
        cg, rl = (p.max_cost_ms for p in shipped.plans)
        new = cloned.plans[0].max_cost_ms
        logs.append((math.log(rl / cg), math.log(new / cg)))
        print(f"{task.name:12s} cost_greedy {cg:9.3f}  rl (shipped) {rl / cg:.4f}  rl (rollout clone) {new / cg:.4f}")
    shipped_mean, clone_mean = (math.exp(float(np.mean(column))) for column in zip(*logs))
    print(f"geometric mean over cost_greedy: rl (shipped) {shipped_mean:.4f}, rl (rollout clone) {clone_mean:.4f}")


if __name__ == "__main__":
    main()

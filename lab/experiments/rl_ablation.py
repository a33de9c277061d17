"""Ablations of the RL agent (issue 53): random initialisation, clone only, clone + PPO; without
each observation group; the two reward designs. Every variant trains the same short run (the
same tasks, seed, PPO steps and settings as ``autoshard policy train`` but the one change) and is
scored two ways on held-out tasks (tables the training never saw). A variant's run is the
product's recipe, smaller (60 teacher episodes, 2 DAgger rounds, ``--steps`` PPO steps):

- ``vs_teacher``: its best evaluation during training, the geometric mean of its argmax plans'
  predicted max over the greedy rule's over options (the clone's teacher), 12 tasks;
- ``vs_cost_greedy``: that policy's ``rl`` plans over cost_greedy's, on 12 tasks of 1-4 hosts
  (predicted, compute + communication).

    python lab/experiments/rl_ablation.py --steps 20000 --jobs 1 --out lab/results/rl_ablation
    python lab/experiments/rl_ablation.py --only clone_ppo,random_init   # a subset

Each variant trains in its own process (``--jobs`` at once) into OUT/<variant>/ and writes
OUT/<variant>/result.json; OUT/ablation.md collects the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

VARIANTS: dict[str, dict] = {
    "random_init": {"imitation_episodes": 0},
    "clone_ppo": {},
    "terminal_reward": {"reward": "terminal"},
    "no_global": {"dropped": ("global",)},
    "no_unit": {"dropped": ("unit",)},
    "no_option_kind": {"dropped": ("option_kind",)},
    "no_option_cost": {"dropped": ("option_cost",)},
    "no_option_fit": {"dropped": ("option_fit",)},
}


def run(name: str, steps: int, out: Path, profile: Path, score_only: bool = False) -> dict:
    import numpy as np
    import torch

    from autoshard.core.communication import WithCommunication
    from autoshard.core.errors import PlannerError
    from autoshard.planning.registry import make_planner
    from autoshard.planners.context import PlannerContext
    from autoshard.profiles import load_profile
    from autoshard.rl.env import EnvConfig, Reward
    from autoshard.rl.policy import OptionPolicy
    from autoshard.rl.tasks import TaskDistribution
    from autoshard.rl.train import WARM_START_FILE, TrainConfig, train_policy

    torch.set_num_threads(1)
    loaded = load_profile(profile, [])
    assert loaded is not None
    change = VARIANTS[name]
    env = EnvConfig(reward=Reward(change.get("reward", "step")), dropped=tuple(change.get("dropped", ())))
    config = TrainConfig(
        steps=steps,
        envs=2,
        imitation_episodes=change.get("imitation_episodes", 60),
        eval_every=max(steps // 2, 1),
        eval_tasks=12,
        checkpoint_every=steps,
        learning_rate=1e-4,
        ent_coef=0.001,
        env=env,
    )
    work = out / name
    if score_only and (work / "policy.pt").exists():  # trained already: score it again
        policy = OptionPolicy.load(work / "policy.pt")
    else:
        policy = train_policy(
            loaded.model, work, config, "ablation", loaded.communication, fresh=True, progress_bar=False
        )
    rng = np.random.default_rng(123)
    tasks = [
        t
        for t in (
            replace(TaskDistribution(), split="test", topologies=((1, 8), (2, 8), (4, 4))).sample(rng)
            for _ in range(12)
        )
    ]

    def vs_cost_greedy(chosen: OptionPolicy) -> float:
        """Geometric mean over the tasks; a dead end of rl counts as 2x (and is reported)."""
        logs = []
        for task in tasks:
            priced = WithCommunication(loaded.model, loaded.communication, task.topology)
            context = PlannerContext(priced, chosen)
            try:
                greedy = make_planner("cost_greedy", context).plan(task.workload, task.topology).max_cost_ms
            except PlannerError:
                continue
            try:
                rl = make_planner("rl", context).plan(task.workload, task.topology).max_cost_ms
            except PlannerError:
                dead_ends.append(task.name)
                rl = 2 * greedy
            logs.append(math.log(rl / greedy))
        return math.exp(float(np.mean(logs)))

    dead_ends: list[str] = []

    result = {
        "variant": name,
        "change": {k: list(v) if isinstance(v, tuple) else v for k, v in change.items()},
        "steps": steps,
        "best_steps": policy.info.steps,
        "vs_teacher": policy.info.eval_ratio,
        "clone_vs_teacher": policy.info.warm_start_ratio,
        "history": [list(h) for h in policy.info.history],
        "vs_cost_greedy": vs_cost_greedy(policy),
        "dead_ends": dead_ends,
    }
    if (work / WARM_START_FILE).exists():
        result["clone_vs_cost_greedy"] = vs_cost_greedy(OptionPolicy.load(work / WARM_START_FILE))
    (work / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def table(results: list[dict]) -> str:
    lines = [
        "| variant | change | best at PPO steps | rl / teacher (12 tasks) | rl / cost_greedy (12 other tasks) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['variant']} | {r['change'] or 'none'} | {r['best_steps']:,} | {r['vs_teacher']:.4f} "
            f"| {r['vs_cost_greedy']:.4f} |"
        )
        if "clone_vs_cost_greedy" in r and r["variant"] == "clone_ppo":
            lines.append(f"| clone only | no PPO | 0 | {r['clone_vs_teacher']:.4f} | {r['clone_vs_cost_greedy']:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "lab" / "results" / "rl_ablation")
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--score-only", action="store_true", help="score the variants' trained policies again")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    args.out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {n: pool.submit(run, n, args.steps, args.out, args.profile, args.score_only) for n in names}
        for name, future in futures.items():
            try:
                future.result()
            except Exception as error:  # one variant's failure leaves the others
                print(f"{name}: {type(error).__name__}: {error}")
    found = [json.loads(p.read_text()) for p in sorted(args.out.glob("*/result.json"))]
    order = {n: i for i, n in enumerate(VARIANTS)}
    found.sort(key=lambda r: order.get(r["variant"], 99))
    (args.out / "ablation.md").write_text(table(found))
    print(table(found))


if __name__ == "__main__":
    main()

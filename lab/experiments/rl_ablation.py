"""Ablations of the RL agent (issue 53): random initialisation, clone only, clone + PPO; without
each observation group; the two reward designs. Every variant trains the same short run (the
same tasks, seed, PPO steps and settings as ``autoshard policy train`` but the one change) and is
scored two ways on held-out tasks (tables the training never saw):

- ``vs_teacher``: its best evaluation during training, the geometric mean of its argmax plans'
  predicted max over the greedy rule's over options (the clone's teacher), 24 tasks;
- ``vs_cost_greedy``: that policy's ``rl`` plans over cost_greedy's, on 12 tasks of 1-4 hosts
  (predicted, compute + communication).

    python lab/experiments/rl_ablation.py --steps 60000 --jobs 2 --out lab/results/rl_ablation
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


def run(name: str, steps: int, out: Path, profile: Path) -> dict:
    import numpy as np
    import torch

    from autoshard.core.communication import WithCommunication
    from autoshard.evaluation.registry import make_planner
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
        imitation_episodes=change.get("imitation_episodes", 100),
        eval_every=max(steps // 4, 1),
        checkpoint_every=steps,
        learning_rate=1e-4,
        ent_coef=0.001,
        env=env,
    )
    work = out / name
    policy = train_policy(loaded.model, work, config, "ablation", loaded.communication, fresh=True, progress_bar=False)
    rng = np.random.default_rng(123)
    tasks = [
        t
        for t in (
            replace(TaskDistribution(), split="test", topologies=((1, 8), (2, 8), (4, 4))).sample(rng)
            for _ in range(12)
        )
    ]

    def vs_cost_greedy(chosen: OptionPolicy) -> float:
        logs = []
        for task in tasks:
            priced = WithCommunication(loaded.model, loaded.communication, task.topology)
            context = PlannerContext(priced, chosen)
            rl = make_planner("rl", context).plan(task.workload, task.topology).max_cost_ms
            greedy = make_planner("cost_greedy", context).plan(task.workload, task.topology).max_cost_ms
            logs.append(math.log(rl / greedy))
        return math.exp(float(np.mean(logs)))

    result = {
        "variant": name,
        "change": {k: list(v) if isinstance(v, tuple) else v for k, v in change.items()},
        "steps": steps,
        "best_steps": policy.info.steps,
        "vs_teacher": policy.info.eval_ratio,
        "clone_vs_teacher": policy.info.warm_start_ratio,
        "history": [list(h) for h in policy.info.history],
        "vs_cost_greedy": vs_cost_greedy(policy),
    }
    if (work / WARM_START_FILE).exists():
        result["clone_vs_cost_greedy"] = vs_cost_greedy(OptionPolicy.load(work / WARM_START_FILE))
    (work / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def table(results: list[dict]) -> str:
    lines = [
        "| variant | change | best at PPO steps | rl / teacher (24 tasks) | rl / cost_greedy (12 tasks) |",
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
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    args.out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(
            pool.map(run, names, [args.steps] * len(names), [args.out] * len(names), [args.profile] * len(names))
        )
    found = [json.loads(p.read_text()) for p in sorted(args.out.glob("*/result.json"))]
    order = {n: i for i, n in enumerate(VARIANTS)}
    found.sort(key=lambda r: order.get(r["variant"], 99))
    (args.out / "ablation.md").write_text(table(found))
    print(table(found))
    del results


if __name__ == "__main__":
    main()

"""``policy train`` on a CPU budget: the same run (``autoshard.rl.train.train_policy``, the
shipped settings otherwise) with fewer cloned episodes and DAgger rounds, which the CLI does not
expose (issue 60), into a folder of one's choice, so that the policy can be compared with the
shipped one before it replaces it (issue 62, part 4).

    nice -n 19 python lab/experiments/policy_budget_train.py --model torchrec --compute-device cuda \
        --imitation-episodes 100 --dagger-rounds 1 --steps 16384 --out /tmp/torchrec_cuda
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from autoshard.profiles import load_profile_or_none
    from autoshard.rl.policy import POLICY_FILE
    from autoshard.rl.train import TrainConfig, train_policy
    from cost_model.process import one_thread

    defaults = TrainConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "data" / "models" / "default"))
    parser.add_argument("--compute-device", default=None)
    parser.add_argument("--imitation-episodes", type=int, default=defaults.imitation_episodes)
    parser.add_argument("--dagger-rounds", type=int, default=defaults.dagger_rounds)
    parser.add_argument("--teacher", choices=("rule", "plan"), default=defaults.teacher)
    parser.add_argument("--spread-every-table", action="store_true", help="EnvConfig.spread_every_table")
    parser.add_argument("--imitation-epochs", type=int, default=defaults.imitation_epochs)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every)
    parser.add_argument("--out", type=Path, required=True, help="policy.pt and its run (policy_training/) go here")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    args = parser.parse_args()
    one_thread()
    profile, why = load_profile_or_none(Path(args.model), compute_device=args.compute_device)
    if profile is None:
        sys.exit(f"error: {why}")
    config = replace(
        defaults,
        imitation_episodes=args.imitation_episodes,
        dagger_rounds=args.dagger_rounds,
        teacher=args.teacher,
        imitation_epochs=args.imitation_epochs,
        env=replace(defaults.env, spread_every_table=args.spread_every_table),
        steps=args.steps,
        eval_every=args.eval_every,
    )
    command = "python lab/experiments/policy_budget_train.py " + shlex.join(sys.argv[1:])
    policy = train_policy(
        profile.model,
        args.out / "policy_training",
        config,
        profile.device.get("id", profile.profile),
        profile.communication,
        command=command,
        progress_bar=False,
        resume=args.resume,
        fresh=not args.resume,
    )
    policy.save(args.out / POLICY_FILE)
    info = policy.info
    print(
        f"wrote {args.out / POLICY_FILE}: {info.steps:,} PPO steps, {info.eval_ratio:.4f}x the teacher "
        f"(warm start {info.warm_start_ratio})"
    )


if __name__ == "__main__":
    main()

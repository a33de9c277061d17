"""Plan-aware training in rounds (was `autoshard bench refine`, moved here by issue 60): plan
training-pool tasks with the current model's planners, measure the device sets of their plans,
retrain on the anchors plus every round's plan sets; repeat with the new model.

One round took split (c) from 13.9% to 13.1% MAPE and plan choices from 81% to 82% of 200 pairs
(lab/history/cost_model.md, "Plan sets are where it is wrong"); the product makes its profiles
with one `bench plans --split train` and `cost train` instead (scripts/profile_machine.sh).

    python lab/experiments/refine_rounds.py --traces T.jsonl.gz --model data/models/P --out runs/refine --rounds 2

Each round: OUT/plans.roundK.jsonl.gz and the model OUT/roundK/ (with the profile's all-to-all and
policy). A rerun resumes: measured sets are kept, trained rounds are not retrained.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def autoshard(*args: str) -> None:
    """One `autoshard` command, as the product runs it (it re-executes itself with the allocator settings)."""
    subprocess.run([sys.executable, "-m", "autoshard", *args], cwd=ROOT, check=True)


def network_name(model: Path) -> str:
    """The tuning grid's name of the model's network (`cost train --network`), or `default`."""
    sys.path.insert(0, str(ROOT))
    from cost_model.checkpoint import load_cost_model
    from cost_model.tune import GRID, SLOW_TO_PLAN

    config = load_cost_model(model).network.config
    return next((c.name for c in GRID + SLOW_TO_PLAN if c.network == config), "default")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, required=True, help="the profile's anchor traces (random sets)")
    parser.add_argument("--model", type=Path, required=True, help="the profile folder to start from")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=12, help="training-pool tasks planned per round")
    parser.add_argument("--devices", default="4,8,16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--max-epochs", type=int, default=300)
    args = parser.parse_args()
    current, plan_files = args.model, []
    for round_ in range(1, args.rounds + 1):
        plan_files.append(args.out / f"plans.round{round_}.jsonl.gz")
        autoshard(
            "bench", "plans", "--traces", str(args.traces), "--model", str(current), "--out", str(plan_files[-1]),
            "--split", "train", "--tasks", str(args.tasks), "--devices", args.devices,
            "--seed", str(args.seed * 1000 + round_), "--passes", str(args.passes),
        )  # fmt: skip
        folder = args.out / f"round{round_}"
        if not (folder / "cost_model.pt").exists():
            traces = [x for path in (args.traces, *plan_files) for x in ("--traces", str(path))]
            autoshard(
                "cost", "train", *traces, "--out", str(folder), "--seed", str(args.seed),
                "--max-epochs", str(args.max_epochs), "--network", network_name(current),
            )  # fmt: skip
            for name in ("communication.json", "policy.pt"):
                if (current / name).exists():
                    shutil.copy2(current / name, folder / name)
        current = folder
    print(f"refined over {args.rounds} round(s): the last model is {current}")


if __name__ == "__main__":
    main()

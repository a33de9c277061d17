"""The shipped policy's learning curve for docs: its evaluation score against PPO steps, from the
policy file's own record (``PolicyInfo.history``: every evaluation of the run that trained it).

    python lab/experiments/learning_curve.py --policy data/models/default/policy.pt \
        --out docs/images/policy_learning_curve.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autoshard.rl.policy import OptionPolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=ROOT / "data" / "models" / "default" / "policy.pt")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "policy_learning_curve.png")
    args = parser.parse_args()
    info = OptionPolicy.load(args.policy).info
    steps, ratios = zip(*info.history)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(steps, ratios, marker="o", ms=3, label="argmax plans / the greedy rule's (held-out tasks)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="the greedy rule it was cloned from")
    if info.warm_start_ratio is not None:
        ax.axhline(info.warm_start_ratio, color="tab:orange", lw=0.8, ls=":", label="warm start (clone, step 0)")
    ax.scatter([info.steps], [info.eval_ratio], color="tab:red", zorder=3, label=f"shipped ({info.steps:,} steps)")
    ax.set_xlabel("PPO steps")
    ax.set_ylabel("predicted max, geometric mean")
    ax.set_title("The sharding policy's evaluation during training (lower is better)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

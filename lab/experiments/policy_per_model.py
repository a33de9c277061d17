"""A policy under a cost model, on the held-out tasks its training scores it on: rl (argmax
alone), rl+refine, cost_greedy and the heuristics, predicted by that model (issue 62, part 4).

    python lab/experiments/policy_per_model.py --model torchrec --compute-device cuda \
        --out lab/results/policy_per_model/torchrec_own.json
    python lab/experiments/policy_per_model.py --model torchrec \
        --policy data/models/default/policy.pt --out lab/results/policy_per_model/torchrec_cpu_policy.json
    python lab/experiments/policy_per_model.py --model data/models/default \
        --policy data/models/torchrec/cuda/policy.pt --out lab/results/policy_per_model/cpu_torchrec_policy.json

A policy against the one before it (``--also``: its rl as ``rl@also``), after
``lab/experiments/policy_budget_train.py`` trained it into /tmp/new (issue 62 part 4, H8):

    python lab/experiments/policy_per_model.py --model torchrec --compute-device cuda --policy /tmp/new/policy.pt \
        --also data/models/torchrec/cuda/policy.pt \
        --out lab/results/policy_per_model/torchrec_cuda_retrained_vs_shipped.json

The tasks: ``policy train``'s held-out evaluation (``TrainConfig().eval_distribution``, its
``eval_tasks`` drawn with seed 1: test-pool tables, 40-160 tables, 4-16 devices). Asked: is a
policy trained against TorchRec's estimator at least cost_greedy's equal there, and does a policy
trained against one model plan well under the other?
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ALSO = "rl@also"
PLANNERS = (
    "round_robin",
    "size_greedy",
    "dim_greedy",
    "lookup_greedy",
    "size_lookup_greedy",
    "cost_greedy",
    "rl",
    "rl+refine",
)


def main() -> None:
    from autoshard.evaluation.grid import evaluate_grid, markdown, summarise
    from autoshard.planners.context import PlannerContext, PlannerKind
    from autoshard.planning.registry import PlannerSpec, _rl, register_planner
    from autoshard.profiles import load_profile_or_none
    from autoshard.rl.policy import OptionPolicy
    from autoshard.rl.train import TrainConfig, eval_tasks
    from cost_model.process import one_thread

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "data" / "models" / "default"))
    parser.add_argument("--compute-device", default=None)
    parser.add_argument("--policy", type=Path, default=None, help="default: the model's own")
    parser.add_argument("--also", type=Path, default=None, help="another policy, its rl as column 'rl@also'")
    parser.add_argument("--tasks", type=int, default=None, help="the first N held-out tasks (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    one_thread()
    profile, why = load_profile_or_none(Path(args.model), compute_device=args.compute_device)
    if profile is None:
        sys.exit(f"error: {why}")
    policy = OptionPolicy.load(args.policy) if args.policy else profile.policy
    if policy is None:
        sys.exit(f"error: no policy ({profile.policy_problem})")
    config = TrainConfig()
    assert config.eval_distribution is not None
    tasks = eval_tasks(config.eval_distribution, config.eval_tasks, config.seed + 1)[: args.tasks]
    context = PlannerContext(profile.model, policy, 0)
    mismatch = policy.model_mismatch(profile.model)
    also = OptionPolicy.load(args.also) if args.also else None
    names: tuple[str, ...] = PLANNERS
    if also is not None:  # the other policy's argmax, planned as rl plans (fitted to the model's memory)
        build = _rl(0, ALSO)
        register_planner(PlannerSpec(ALSO, PlannerKind.POLICY, lambda c: build(replace(c, policy=also)), default=False))
        names = (*PLANNERS, ALSO)
    rows = []
    for task in tasks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a policy planning with another model than its own: the point here
            rows += evaluate_grid([task], context, profile.communication, names, [False])
        print(task.name, {n: round(v, 4) for n, v in rows[-1].max_ms.items()}, flush=True)
    summary = summarise(rows)
    shown = ["rl", "rl+refine", "cost_greedy", *([ALSO] if also else [])]
    print(markdown(rows, summary, shown))
    worse = {
        name: [r.task for r in rows if name in r.max_ms and r.max_ms[name] > r.max_ms["cost_greedy"] * (1 + 1e-9)]
        for name in ("rl", "rl+refine", ALSO)
    }
    print("above cost_greedy:", json.dumps({n: len(t) for n, t in worse.items()}), "of", len(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "command": "python lab/experiments/policy_per_model.py " + " ".join(sys.argv[1:]),
            "model": profile.profile,
            "policy": policy.name,
            "policy_trained_against": policy.info.trained_against,
            "also": None if also is None else {"policy": also.name, "trained_against": also.info.trained_against},
            "mismatch": mismatch,
            "summary": {n: s.__dict__ if hasattr(s, "__dict__") else _slots(s) for n, s in summary.items()},
            "above_cost_greedy": worse,
            "rows": [r.to_dict() for r in rows],
        }
        args.out.write_text(json.dumps(report, indent=1, default=_finite) + "\n")


def _slots(value: object) -> dict:
    return {k: getattr(value, k) for k in value.__slots__}  # type: ignore[attr-defined]


def _finite(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


if __name__ == "__main__":
    main()

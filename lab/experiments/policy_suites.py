"""rl against cost_greedy under TorchRec's cuda estimator on the bundled giants and hosts suites
(issue 62): the shipped torchrec policy (first argument) and another (second), each plan's max
over cost_greedy's, and whether rl is at most the best heuristic.

    python lab/experiments/policy_suites.py data/models/torchrec/cuda/policy.pt OLD_POLICY \
        > lab/results/policy_per_model/torchrec_cuda_suites.txt
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEURISTICS = ("round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def main() -> None:
    from autoshard.core.task import load_suite
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.rl.policy import OptionPolicy
    from autoshard.torchrec.cost_model import TorchRecCostModel
    from cost_model.process import one_thread

    one_thread()
    warnings.simplefilter("ignore")  # TorchRec's reservation warning
    policies = {"shipped": OptionPolicy.load(Path(sys.argv[1])), "other": OptionPolicy.load(Path(sys.argv[2]))}
    print("command: python lab/experiments/policy_suites.py " + " ".join(sys.argv[1:]))
    ratios: dict[str, list[float]] = {name: [] for name in policies}
    for suite in ("giants", "hosts"):
        for task in load_suite(suite)[1]:
            maxima: dict[str, float] = {}
            for name, policy in policies.items():
                names = ("cost_greedy", "rl", *HEURISTICS) if name == "shipped" else ("rl",)
                report = plan(
                    task.workload,
                    task.topology,
                    Models(TorchRecCostModel(), policy=policy),
                    PlanOptions(planners=names),
                )
                found = {p.planner: p.max_cost_ms for p in report.plans}
                maxima.update({(f"rl@{name}" if k == "rl" else k): v for k, v in found.items()})
            best = min((maxima[k] for k in HEURISTICS if k in maxima), default=math.inf)
            row = {name: maxima[f"rl@{name}"] / maxima["cost_greedy"] for name in policies}
            for name, ratio in row.items():
                ratios[name].append(ratio)
            shown = " ".join(f"rl@{n} {r:.3f}" for n, r in row.items())
            print(f"{task.name}: {shown} rl@shipped<=best heuristic {maxima['rl@shipped'] <= best}", flush=True)
    for name, found in ratios.items():
        print(f"geomean rl@{name} / cost_greedy: {math.exp(sum(map(math.log, found)) / len(found)):.3f}")


if __name__ == "__main__":
    main()

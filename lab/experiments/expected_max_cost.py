"""What reporting each plan's expected max costs the service: ``plans_report`` of a load-test
request's nine plans (80 tables on 8 devices, every default planner), with the default
profile's measured device errors and without, interleaved, process CPU time.

    python benchmarks/expected_max_cost.py            # medians of 20 pairs of 50 reports each
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cost_model.process import one_thread  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.report import plans_report
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.core.workload_file import topology_from_dict, workload_from_dict  # noqa: E402
from autoshard.profiles import load_models  # noqa: E402
from service_support import plan_body  # noqa: E402

PLANNERS = ["random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy",
            "cost_greedy", "rl", "rl+refine"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--reports", type=int, default=50, help="Reports timed together, per side of a pair.")
    args = parser.parse_args()
    one_thread()
    loaded = load_models(ROOT / "data" / "models").resolve(None)
    if loaded is None or loaded.device_errors is None:
        sys.exit("the default profile has no device_errors.json (autoshard cost errors)")
    body = plan_body(80)
    workload, _ = workload_from_dict(body["workload"])
    topology = topology_from_dict(body["topology"])
    context = PlannerContext(loaded.model, loaded.policy, 0, False)
    plans = list(compare_planners(workload, topology, PLANNERS, context, loaded.communication).plans)

    def ms(errors) -> float:
        started = time.process_time()
        for _ in range(args.reports):
            plans_report(workload, topology, plans, (), "ms", errors)
        return (time.process_time() - started) / args.reports * 1e3

    sides: dict[str, list[float]] = {"with": [], "without": []}
    for k in range(args.pairs):
        order = (("with", loaded.device_errors), ("without", None))
        for name, errors in order if k % 2 else order[::-1]:
            sides[name].append(ms(errors))
    for name, values in sides.items():
        q = statistics.quantiles(values, n=4)
        print(f"{name:>8} device errors: {statistics.median(values):.3f} ms a request [{q[0]:.3f}, {q[2]:.3f}]")
    difference = statistics.median(sides["with"]) - statistics.median(sides["without"])
    print(f"difference of the medians: {difference:+.3f} ms")


if __name__ == "__main__":
    main()

"""The packing lookahead's first-fit (``packing.packable_many``) against another revision's, on
the calls cost_greedy makes planning a task under ``--model torchrec``: same answers, and the
seconds of each over those calls, interleaved (medians with spread).

    python lab/experiments/packing_speed.py grid400x16x8-giant --against 7d4dcc0 --calls 3000 --repeats 7

Captures the task's first ``--calls`` calls (the sizes and bins each was asked), then times both
implementations on all of them, alternating, ``--repeats`` times.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class _Enough(Exception):
    pass


def captured(task_name: str, count: int) -> list[tuple[list[int], object]]:
    import warnings

    from autoshard.evaluation.grid import GridConfig, grid_tasks
    from autoshard.planners import packing, packing_lookahead
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.torchrec.cost_model import TorchRecCostModel

    calls: list[tuple[list[int], object]] = []
    original = packing.packable_many

    def recording(sizes, free):  # type: ignore[no-untyped-def]
        if len(calls) >= count:
            raise _Enough
        calls.append((list(sizes), free.copy()))
        return original(sizes, free)

    packing_lookahead.packable_many = recording  # type: ignore[assignment]
    task = {t.name: t for t in grid_tasks(GridConfig())}[task_name]
    warnings.simplefilter("ignore")
    logging.disable(logging.ERROR)  # the planner's failure at ``_Enough`` is expected
    try:
        plan(task.workload, task.topology, Models(TorchRecCostModel()), PlanOptions(planners=("cost_greedy",)))
    except Exception:  # the planner stopped at ``_Enough`` (reported as its failure)
        pass
    finally:
        packing_lookahead.packable_many = original  # type: ignore[assignment]
    return calls


def main() -> None:
    from autoshard.planners.packing import packable_many
    from cost_model.process import one_thread

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--against", required=True, help="a git revision whose packing.py to compare")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    one_thread()
    source = subprocess.run(
        ["git", "show", f"{args.against}:autoshard/planners/packing.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    other = types.ModuleType("packing_other")
    exec(compile(source, "packing_other", "exec"), other.__dict__)
    calls = captured(args.task, args.calls)
    same = all((other.packable_many(*c) == packable_many(*c)).all() for c in calls)
    print(f"{args.task}: {len(calls)} calls captured; same answers: {same}")
    times: dict[str, list[float]] = {args.against: [], "this tree": []}
    for _ in range(args.repeats):
        for name, fn in ((args.against, other.packable_many), ("this tree", packable_many)):
            started = time.perf_counter()
            for c in calls:
                fn(*c)
            times[name].append(time.perf_counter() - started)
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})")
    ratios = [a / b for a, b in zip(times[args.against], times["this tree"])]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    print(f"{args.against} / this tree, per round: median {statistics.median(ratios):.2f}x ({spread})")


if __name__ == "__main__":
    main()

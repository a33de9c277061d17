"""How much of the cost model's per-device error on measured plans is the measurement's own noise?
The device sets that every given run of the same suites measured (``autoshard evaluate --measure
--json`` reports, compute only; each run a folder of reports), each set's error in each run as
``benchmarks/device_errors.py`` does (log(measured / predicted), less its task's median in
that run), split into the spread between runs (the measurement's noise: a run measures a set
once, as the median of its rounds) and what every run shares (the model's own error).

    python benchmarks/error_runs.py docs/figures/evaluation_session34_f25m1 docs/figures/evaluation_session36_f25m1 \\
        docs/figures/evaluation_session38_f25m1 --out docs/figures/error_runs.json

With k runs, a set's errors e_1..e_k: the noise variance is the mean within-set variance (k - 1
degrees of freedom), the model's variance that of the sets' mean errors less noise / k. Spreads
are given as standard deviations and as MAD sigmas (1.4826 x the median absolute deviation,
robust to the few sets a run measured far off).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.core.model_error import centred  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.core.stats import mad_sigma  # noqa: E402
from autoshard.core.types import Table  # noqa: E402

SUITES = ("default", ROOT / "autoshard" / "core" / "suites" / "rl_grid.json")
SetKey = tuple[str, tuple[str, ...]]
"""(task, the set's tables as name:dim, sorted): one device set of one task, in any run."""


@dataclass(frozen=True)
class Run:
    """A measured run, planned again (the planners are deterministic): each device set once,
    however many plans hold it (its tables, predicted and measured ms), and each plan's sets and
    measured max (median over rounds of the per-round max), by task."""

    sets: dict[SetKey, tuple[tuple[Table, ...], float, float]]
    plans: list[tuple[str, tuple[SetKey, ...], float]]


def run_sets(folder: Path, tasks: dict, context: PlannerContext) -> Run:
    """The ``Run`` of a folder of ``evaluate --measure --json`` reports."""
    found, plans = {}, []
    for path in sorted(folder.glob("*/report.json")):
        for entry in json.loads(path.read_text())["tasks"]:
            measured = {p["planner"]: p for p in entry["planners"] if p.get("measured_device_ms")}
            task = tasks[entry["task"]]
            for plan in compare_planners(task.workload, task.topology, list(measured), context).plans:
                keys = []
                for device, ms in zip(plan.devices, measured[plan.planner]["measured_device_ms"]):
                    tables = tuple(s.as_table for s in device.shards)
                    if tables and device.cost_ms > 0 and ms > 0:
                        keys.append((task.name, tuple(sorted(f"{t.name}:{t.embedding_dim}" for t in tables))))
                        found[keys[-1]] = (tables, device.cost_ms, ms)
                plans.append((task.name, tuple(keys), measured[plan.planner]["measured_max_ms"]))
    return Run(found, plans)


def errors_in_every_run(runs: list[Run]) -> tuple[list[SetKey], np.ndarray]:
    """The sets every run measured, and each one's log(measured / predicted) in each run less the
    median of its task's sets in that run (the host's speed that hour): ``[sets, runs]``."""
    common = sorted(set.intersection(*(set(r.sets) for r in runs)))
    errors = np.zeros((len(common), len(runs)))
    for k, run in enumerate(runs):
        logs = np.array([math.log(run.sets[key][2] / run.sets[key][1]) for key in common])
        for task in {key[0] for key in common}:
            at = np.array([key[0] == task for key in common])
            errors[at, k] = centred(logs[at])
    return common, errors


def measured_runs(description: str) -> tuple[argparse.Namespace, Any, dict, list[Run]]:
    """The command line of a script over run folders (``runs``, ``--out``), the shipped profile,
    the bundled suites' tasks by name and each run's ``run_sets``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders, each holding <suite>/report.json")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    profile, context, tasks = shipped_planning()
    return args, profile, tasks, [run_sets(folder, tasks, context) for folder in args.runs]


def shipped_planning() -> tuple[Any, PlannerContext, dict]:
    """On one thread: the shipped profile, a planner context of its model and policy, and the
    bundled suites' tasks by name (what made the measured reports' plans)."""
    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    return profile, PlannerContext(profile.model, profile.policy), {t.name: t for suite in SUITES
                                                                     for t in load_suite(suite)[1]}


def main() -> None:
    args, _, _, runs = measured_runs(__doc__)
    common, errors = errors_in_every_run(runs)
    k = errors.shape[1]
    means, within = errors.mean(1), errors - errors.mean(1, keepdims=True)
    noise_var = float((within ** 2).sum() / (len(common) * (k - 1)))
    summary = {
        "runs": [str(f) for f in args.runs], "sets_in_every_run": len(common),
        "one_run": {"sd": float(errors.std()), "mad_sigma": mad_sigma(errors.ravel())},
        "noise_between_runs": {"sd": math.sqrt(noise_var),
                               "mad_sigma": mad_sigma(within.ravel()) * math.sqrt(k / (k - 1))},
        "mean_of_runs": {"sd": float(means.std()), "mad_sigma": mad_sigma(means)},
        "model": {"sd": math.sqrt(max(float(means.var()) - noise_var / k, 0.0))},
    }
    sizes: dict[str, list[float]] = defaultdict(list)
    for (_, tables), mean in zip(common, means):
        n = len(tables)
        sizes["1" if n == 1 else "2-4" if n < 5 else "5-9" if n < 10 else "10-19" if n < 20 else "20+"].append(mean)
    summary["mean_of_runs_by_tables"] = {size: {"sets": len(v), "median": float(np.median(v)),
                                                "mad_sigma": mad_sigma(np.array(v))} for size, v in sizes.items()}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Does a measuring process give each device set an offset of its own, one that the median of
its rounds cannot average away? If so, rounds spread over several processes measure a set
closer to what another run will measure.

The sets are the device sets of the default suite's 80-table tasks as the six heuristics and
cost_greedy plan them (``--sets`` of them, drawn with a fixed seed). ``--processes`` fresh
processes, one after the other, each measure every set for ``--rounds`` rounds
(``bench.measure`` as ``evaluate --measure`` calls it, seeds by round and set). Each round's
measurements are centred by their median over the sets (the host's speed moves between rounds
and processes). Then, per set:

- **a run in one process**: the median of one process's rounds. Runs of different processes
  differ by the round-to-round noise left in a median and by any per-process offset;
- **a run spread over processes**: the median of the same number of rounds, each from another
  process (disjoint groups of processes), as ``evaluate --measure`` would measure if each round
  ran in a fresh process;
- **expected from the rounds alone**: the spread of a median of that many rounds whose noise is
  the within-process round-to-round spread (by resampling the rounds).

    python benchmarks/process_noise.py --processes 18 --rounds 3 --sets 32 --out docs/figures/process_noise.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.core.stats import mad_sigma  # noqa: E402

TASKS = ("syn80_s1", "syn80_s2", "syn80_s3", "syn80x4")


def device_sets(limit: int) -> tuple[list[list], int]:
    """``limit`` distinct device sets (as tables) of the suite's 80-table tasks, of the
    heuristics' and cost_greedy's plans; and the batch size."""
    from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.core.task import load_suite
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.compare import compare_planners

    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    context = PlannerContext(profile.model, profile.policy)
    seen, sets, batch = set(), [], None
    for task in load_suite("default")[1]:
        if task.name not in TASKS:
            continue
        batch = task.workload.batch_size
        names = ["random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy",
                 "cost_greedy"]
        result = compare_planners(task.workload, task.topology, names, context, profile.communication)
        for plan in result.plans:
            for device in plan.devices:
                if device.shards and device.set_key not in seen:
                    seen.add(device.set_key)
                    sets.append([s.as_table for s in device.shards])
    rng = np.random.default_rng(0)
    chosen = sorted(rng.choice(len(sets), size=min(limit, len(sets)), replace=False).tolist())
    return [sets[i] for i in chosen], int(batch)


def worker(path: Path, rounds: int) -> None:
    """Measure every set of the pickle at ``path`` for ``rounds`` rounds; print [round][set] ms."""
    from cost_model.process import one_thread
    from cost_model.bench.harness import BenchConfig, measure
    from autoshard.evaluation.measure_plan import MIN_DEVICE_MS

    one_thread()
    sets, batch = pickle.loads(path.read_bytes())
    config = BenchConfig(batch_size=batch)
    out = [[measure(tables, config, r * 7919 + k, MIN_DEVICE_MS).total.median for k, tables in enumerate(sets)]
           for r in range(rounds)]
    print(json.dumps(out))


def spread_between(runs: np.ndarray) -> float:
    """Runs ``[run, set]`` of log values: the MAD sigma of each set's deviation from its mean
    over runs, scaled to one run's (x sqrt(k / (k - 1)))."""
    k = runs.shape[0]
    return mad_sigma((runs - runs.mean(0)).ravel()) * float(np.sqrt(k / (k - 1)))


def analyse(logs: np.ndarray, rounds: int) -> dict:
    """``logs[process, round, set]``: log ms, each round centred by its median over the sets."""
    processes = logs.shape[0]
    one_process = np.median(logs, axis=1)  # [process, set]
    groups = processes // rounds
    spread = np.stack([np.median(np.stack([logs[g * rounds + j, j] for j in range(rounds)]), axis=0)
                       for g in range(groups)])  # round j of the group's j-th process
    within = logs - logs.mean(1, keepdims=True)  # round-to-round, within a process
    rng = np.random.default_rng(1)
    resampled = np.stack([np.median(within[:, rng.integers(0, rounds, rounds)], axis=1) for _ in range(200)])
    return {
        "processes": processes, "rounds": rounds, "sets": logs.shape[2],
        "round_to_round_mad_sigma": mad_sigma(within.ravel()) * float(np.sqrt(rounds / (rounds - 1))),
        "between_runs_one_process_each": spread_between(one_process),
        "between_runs_spread_over_processes": spread_between(spread),
        "runs_spread_over_processes": groups,
        "expected_from_round_noise_alone": mad_sigma(resampled.ravel()),
        "process_offset_mad_sigma": spread_between(logs.mean(1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sets", type=int, default=32)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rounds)
        return
    sets, batch = device_sets(args.sets)
    work = Path(f"/tmp/process_noise_{time.time_ns()}.pkl")
    work.write_bytes(pickle.dumps((sets, batch)))
    measured = []
    for p in range(args.processes):
        started = time.time()
        done = subprocess.run([sys.executable, __file__, "--worker", str(work), "--rounds", str(args.rounds)],
                              check=True, capture_output=True, text=True)
        measured.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {p + 1}/{args.processes}: {time.time() - started:.0f} s", flush=True)
    work.unlink()
    logs = np.log(np.array(measured))  # [process, round, set]
    logs -= np.median(logs, axis=2, keepdims=True)  # each round centred: the host's speed moves
    summary = analyse(logs, args.rounds) | {"set_tables": [len(s) for s in sets], "batch_size": batch,
                                            "measured_ms": measured}
    print(json.dumps({k: v for k, v in summary.items() if k != "measured_ms"}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()

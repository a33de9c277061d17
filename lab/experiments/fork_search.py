"""An experiment for rl+refine's search: forks of the argmax rollout instead of softmax samples.

rl+refine's samples mostly repeat greedy's placement (docs/rl.md). A fork replays the policy's
argmax rollout up to one of its least certain steps (the lowest softmax probability of the chosen
device), puts that step's unit on the second-best device, and lets the policy place the rest by
argmax; the ``--forks`` least certain steps give as many distinct placements. The two best then
get the local search rl+refine gives its samples. Per task this prints cost_greedy's, rl+refine's
and the forks' predicted max, and with ``--measure`` measures cost_greedy's plan and the forks'
interleaved (compute only: use ``--no-communication`` so that the plans optimise what is measured).

    python benchmarks/fork_search.py --no-communication --out docs/figures/fork_search.json
    python benchmarks/fork_search.py --no-communication --measure grid200x4,load0 --rounds 6

Tasks: the held-out grid (``autoshard policy eval``'s 20) and 15 requests of the load test's
shape (80 training-pool tables on 8 x 16 GiB). Set the harness's allocator settings in the
environment when measuring (docs/traces.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import one_thread  # noqa: E402
from autoshard.core.communication import CommunicationModel, WithCommunication  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.local_search import improve  # noqa: E402
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import assignment, build_plan
from autoshard.planners.placement import prepare_units  # noqa: E402
from autoshard.planners.placing import candidates
from autoshard.planners.shared import SharedWork  # noqa: E402
from autoshard.planners.units import model_costs  # noqa: E402
from autoshard.rl.env import guarded_state  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.rl.observation import observe_many  # noqa: E402
from autoshard.rl.policy import DevicePolicy  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.types import Topology  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402

PROFILE = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"
HEADROOM, CANDIDATES = 1.25, 32  # rl+refine's extrapolation guard and sampled candidates


def _scores(policy, state, allowed):
    rows = candidates(state, allowed, CANDIDATES)
    observed = observe_many([state], [rows], [state.costs_if_added(rows)], [None])
    return rows, policy.scores(observed)


def forked_placements(workload, topology, model, policy, forks: int):
    """The argmax rollout forked at its ``forks`` least certain steps (see the module docstring)."""
    batch = workload.batch_size
    units = prepare_units(workload, topology, model_costs(model, batch), False)
    steps = SharedWork(workload, topology).steps(workload, topology, units)
    state = guarded_state(units, topology, model, batch, HEADROOM, steps=steps)
    chosen, certainty, runner_up = [], [], []
    while not state.done:
        rows, scores = _scores(policy, state, np.flatnonzero(state.mask()))
        order = np.argsort(-scores)
        p = np.exp(scores - scores.max())
        chosen.append(int(rows[order[0]]))
        certainty.append(float(p[order[0]] / p.sum()) if len(order) > 1 else 1.0)
        runner_up.append(int(rows[order[1]]) if len(order) > 1 else None)
        state.apply(chosen[-1])
    placements = []
    for t in [t for t in np.argsort(certainty) if runner_up[t] is not None][:forks]:
        fork = guarded_state(units, topology, model, batch, HEADROOM, steps=steps)
        for device in [*chosen[:t], runner_up[t]]:
            fork.apply(device)
        while not fork.done:
            allowed = np.flatnonzero(fork.mask())
            if not len(allowed):
                break  # a dead end: this fork is dropped
            rows, scores = _scores(policy, fork, allowed)
            fork.apply(int(rows[np.argmax(scores)]))
        if fork.done:
            placements.append(fork.devices)
    return placements


def fork_search(workload, topology, model, policy, forks: int, refine_top: int = 2):
    started = time.perf_counter()
    placements = sorted(forked_placements(workload, topology, model, policy, forks),
                        key=lambda devices: max(d.load for d in devices))
    searched, best = set(), None
    for devices in placements[:refine_top]:
        if assignment(devices) in searched:
            continue
        searched.add(assignment(devices))
        devices = list(devices)
        improve(devices, model, workload.batch_size, 50, Deadline(time.perf_counter()))
        if best is None or max(d.load for d in devices) < max(d.load for d in best):
            best = devices
    return None if best is None else build_plan("forks", best, started, workload.batch_size, model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forks", type=int, default=4)
    parser.add_argument("--no-communication", action="store_true")
    parser.add_argument("--measure", default="", help="comma-separated task names to measure")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    base = load_cost_model(PROFILE / "cost_model.pt")
    policy = DevicePolicy.load(PROFILE / "policy.pt")
    communication = None if args.no_communication else CommunicationModel.load(PROFILE / "communication.json")
    tasks = [(t.name, t.workload, t.topology) for t in grid_tasks(GridConfig())]
    pool = generate_pool(PoolConfig(size=500, seed=0, max_log10_rows=7.0)).train
    tasks += [(f"load{d}", sample_task(pool, 80, np.random.default_rng(4000 + d), name=f"load{d}"), Topology(8, 16.0))
              for d in range(15)]
    measure = set(filter(None, args.measure.split(",")))
    rows = []
    for name, workload, topology in tasks:
        if measure and name not in measure:
            continue
        model = base if communication is None else WithCommunication(base, communication, topology.num_devices)
        plans = {p.planner: p for p in compare_planners(workload, topology, ["cost_greedy", "rl+refine"],
                                                        PlannerContext(base, policy), communication).plans}
        forked = fork_search(workload, topology, model, policy, args.forks)
        cg = plans["cost_greedy"]
        row = {"task": name, "cost_greedy_ms": cg.max_cost_ms, "cost_greedy_s": cg.plan_time_s,
               "rl+refine_ratio": plans["rl+refine"].max_cost_ms / cg.max_cost_ms,
               "rl+refine_s": plans["rl+refine"].plan_time_s,
               "forks_ratio": None if forked is None else forked.max_cost_ms / cg.max_cost_ms,
               "forks_s": None if forked is None else forked.plan_time_s}
        if measure and forked is not None:
            from cost_model.bench.harness import BenchConfig
            from autoshard.evaluation.measure_plan import measure_plans
            from cost_model.profile import default_mode

            measured = measure_plans([cg, forked], workload.batch_size, BenchConfig(mode=default_mode()),
                                     rounds=args.rounds)
            row.update(measured_cost_greedy_ms=measured[0].max_ms, measured_forks_ms=measured[1].max_ms,
                       measured_forks_ratio=measured[1].ratio_to_reference, measured_ci95=measured[1].ratio_ci95)
        rows.append(row)
        measured_text = (f"; measured {row['measured_forks_ratio']:.3f} [{row['measured_ci95'][0]:.3f}, "
                         f"{row['measured_ci95'][1]:.3f}]" if "measured_forks_ratio" in row else "")
        forks_text = "-" if forked is None else f"{row['forks_ratio']:.4f} ({row['forks_s'] * 1000:.0f} ms)"
        print(f"{name}: cost_greedy {cg.max_cost_ms:.3f} ms; rl+refine {row['rl+refine_ratio']:.4f} "
              f"({row['rl+refine_s'] * 1000:.0f} ms); forks {forks_text}{measured_text}", flush=True)
    lower = lambda key: sum(1 for r in rows if r[key] is not None and r[key] < 1 - 1e-6)  # noqa: E731
    print(f"below cost_greedy: rl+refine {lower('rl+refine_ratio')}, forks {lower('forks_ratio')} of {len(rows)}")
    if args.out:
        args.out.write_text(json.dumps({"forks": args.forks, "communication": communication is not None,
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

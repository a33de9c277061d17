"""Whether a change leaves the plans alone: plan a fixed set of tasks and every bundled suite in this
checkout, write every plan, and compare two such files.

    python benchmarks/plan_identity.py --out /tmp/new.json
    (cd /tmp/base && python /path/to/benchmarks/plan_identity.py --out /tmp/base.json)  # the commit before
    python benchmarks/plan_identity.py --compare /tmp/base.json /tmp/new.json

The fixed tasks: the held-out grid's 20-400 tables on 4-32 devices (400 tables without splits
only) and 20 of the load test's 80-table, 8-device requests, planned by cost_greedy, rl, rl+refine
and rl+refine_raw (each alone, and the four side by side as the service plans them, sharing their
work; with and without column splits) and the six heuristics (side by side, scored together as
the service scores them).

The suites (``--suites``, default ``all``: every ``autoshard/core/suites/*.json``): each task planned
as ``autoshard evaluate SUITE`` plans it (seed 0, column splits where the planner decides, each
device's all-to-all), by the same ten planners side by side. TorchRec's planner is left out (it is
a reference, and slow on the large tasks).

rl+refine starts a sample only within a second of wall time (``sample_budget_s``), so on a loaded
machine its plans move from run to run in one checkout; the script lifts that bound (every sample
runs) unless ``--product-sampling`` is given. Every plan uses the profile's model and policy.

The planners come from the checkout the script is run in (its working directory): the script
imports what it needs from either layout (``planning`` or, before the move of issue 60,
``evaluation``), so the same file runs in an older checkout too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np

PLANNERS = ("cost_greedy", "rl", "rl+refine", "rl+refine_raw")
HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
SUITE_SEED = 0
"""``autoshard evaluate``'s default seed (the random planner's, rl+refine's sampling)."""


def checkout_api() -> SimpleNamespace:
    """What the script needs from the checkout it runs in, from this layout or the one before."""
    try:
        from autoshard.planning.compare import compare_planners
    except ImportError:  # before issue 60: autoshard.evaluation.compare
        from autoshard.evaluation.compare import compare_planners  # type: ignore[no-redef]
    try:
        from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    except ImportError:  # the CLI's support module held them
        from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_exit  # type: ignore[no-redef]
    try:
        from cost_model.process import one_thread
    except ImportError:
        from autoshard.cli.support import one_thread  # type: ignore[no-redef]
    from autoshard.core import task as task_module
    from autoshard.planners.context import PlannerContext

    return SimpleNamespace(
        compare_planners=compare_planners,
        DEFAULT_MODEL=DEFAULT_MODEL,
        load_profile_or_exit=load_profile_or_exit,
        one_thread=one_thread,
        load_suite=task_module.load_suite,
        suites_folder=Path(task_module.__file__).parent / "suites",
        PlannerContext=PlannerContext,
    )


def every_sample_runs() -> None:
    """rl+refine starts a sample only within ``sample_budget_s`` of wall time, so on a loaded machine
    it draws fewer and its plan moves from run to run in one checkout. Lift that bound (the planner's
    default, in either layout) so that its plans depend on the code alone."""
    import dataclasses

    from autoshard.rl.planners import RLPlanner

    with_defaults = [
        f.name
        for f in dataclasses.fields(RLPlanner)
        if f.init and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
    ]
    defaults = list(RLPlanner.__init__.__defaults__ or ())
    if "sample_budget_s" in with_defaults and len(defaults) == len(with_defaults):
        defaults[with_defaults.index("sample_budget_s")] = float("inf")
        RLPlanner.__init__.__defaults__ = tuple(defaults)


def fixed_tasks(limit: int | None) -> list:
    """The held-out grid's tasks and 20 of the load test's requests (the first ``limit``)."""
    from load_test import Config, request_body

    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.task import Task, memory_for
    from autoshard.core.types import Topology
    from autoshard.core.workload_file import topology_from_dict, workload_from_dict

    tables, rng, tasks = generate_pool(PoolConfig(size=2000, seed=7)).test, np.random.default_rng(0), []
    for count in (20, 80, 200, 400):  # fixed here, whatever the held-out grid's defaults become
        for devices in (4, 8, 16, 32):
            workload = sample_task(tables, count, rng, 2048, f"grid{count}x{devices}")
            tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, 1.3))))
    for draw in range(1, 21):
        body = request_body(Config(), draw)
        tasks.append(Task(f"load{draw}", workload_from_dict(body["workload"])[0], topology_from_dict(body["topology"])))
    return tasks[:limit]


def record(plan) -> dict:
    """A plan as the file keeps it: its predicted max and every device's shards (table, columns,
    rows, sharding type, lookup share), in order."""
    return {
        "max_ms": plan.max_cost_ms,
        "devices": [
            [
                [
                    s.table.name,
                    s.column_offset,
                    s.width,
                    s.row_offset,
                    s.height,
                    s.sharding_type.value,
                    s.lookup_share,
                ]
                for s in d.shards
            ]
            for d in plan.devices
        ],
    }


def plan_fixed(api: SimpleNamespace, profile, limit: int | None, plans: dict) -> None:
    """The fixed tasks, whole and with splits: each planner alone, side by side, and the heuristics."""
    tasks = fixed_tasks(limit)
    for split in (False, True):
        for task in tasks:
            if split and len(task.workload.tables) > 200:
                continue
            context = api.PlannerContext(profile.model, profile.policy, 3, split)

            def side_by_side(names: tuple[str, ...]) -> list:
                return api.compare_planners(task.workload, task.topology, names, context, profile.communication).plans

            alone = [side_by_side((name,))[0] for name in PLANNERS]
            found = (("", alone), ("together/", side_by_side(PLANNERS)), ("heuristics/", side_by_side(HEURISTICS)))
            for how, got in found:
                for plan in got:
                    plans[f"{task.name}/{'split' if split else 'whole'}/{how}{plan.planner}"] = record(plan)


def suite_names(api: SimpleNamespace, chosen: str) -> list[str]:
    """The bundled suites ``chosen`` names: ``all``, ``none`` or a comma-separated list."""
    bundled = sorted(p.stem for p in api.suites_folder.glob("*.json"))
    if chosen == "all":
        return bundled
    if chosen == "none":
        return []
    names = [n.strip() for n in chosen.split(",") if n.strip()]
    unknown = [n for n in names if n not in bundled]
    if unknown:
        raise SystemExit(f"--suites: no bundled suite {', '.join(unknown)}; choose from {', '.join(bundled)}")
    return names


def plan_suites(api: SimpleNamespace, profile, names: list[str], plans: dict, log: Callable[[str], None]) -> None:
    """Every task of each named suite, as ``autoshard evaluate`` plans it: the ten planners side by side."""
    context = api.PlannerContext(profile.model, profile.policy, SUITE_SEED, None)
    for name in names:
        started = time.perf_counter()
        _, tasks = api.load_suite(name)
        for task in tasks:
            comparison = api.compare_planners(
                task.workload, task.topology, (*PLANNERS, *HEURISTICS), context, profile.communication
            )
            for plan in comparison.plans:
                plans[f"suite/{name}/{task.name}/{plan.planner}"] = record(plan)
            for planner, why in comparison.skipped:
                plans[f"suite/{name}/{task.name}/{planner}"] = {"skipped": str(why)}
        log(f"suite {name}: {len(tasks)} tasks in {time.perf_counter() - started:.0f} s")


def plan_all(out: Path, limit: int | None = None, suites: str = "all", product_sampling: bool = False) -> dict:
    """Plan the fixed tasks and the chosen suites in the working directory's checkout; write the plans to ``out``."""
    root = os.getcwd()
    sys.path[:0] = [root, os.path.join(root, "benchmarks")]
    api = checkout_api()
    api.one_thread()
    if not product_sampling:
        every_sample_runs()
    profile = api.load_profile_or_exit(api.DEFAULT_MODEL)
    plans: dict[str, dict] = {}
    started = time.perf_counter()
    plan_fixed(api, profile, limit, plans)
    print(f"fixed tasks: {len(plans)} plans in {time.perf_counter() - started:.0f} s", flush=True)
    plan_suites(api, profile, suite_names(api, suites), plans, lambda line: print(line, flush=True))
    result = {"checkout": root, "seconds": time.perf_counter() - started, "plans": plans}
    out.write_text(json.dumps(result))
    print(f"{len(plans)} plans in {time.perf_counter() - started:.0f} s -> {out}")
    return result


def compare(a: Path, b: Path) -> int:
    """Print the plans whose devices differ (or that only one file has) and those whose devices
    agree but whose predicted max moved; 1 when any plan differs."""
    left, right = (json.loads(p.read_text())["plans"] for p in (a, b))
    differ = [k for k in left if k not in right or left[k].get("devices") != right[k].get("devices")]
    added = [k for k in right if k not in left]
    rescored = [
        k
        for k in left
        if k not in differ and "max_ms" in left[k] and not np.isclose(left[k]["max_ms"], right[k]["max_ms"], 1e-9, 0)
    ]
    print(f"{len(left)} plans, {len(differ)} differ, {len(added)} only in {b.name}, {len(rescored)} rescored")
    for key in differ:
        before = left[key].get("max_ms", float("nan"))
        after = right[key].get("max_ms", float("nan")) if key in right else float("nan")
        print(f"  {key}: max {before:.4f} -> {after:.4f} ({after / before:.4f}x)")
    for key in added:
        print(f"  {key}: only in {b.name}")
    for key in rescored:
        print(f"  {key}: same devices, max {left[key]['max_ms']:.6f} -> {right[key]['max_ms']:.6f}")
    return 1 if differ or added else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="Plan every task and write the plans here.")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--limit", type=int, help="Plan only the first N fixed tasks (a smoke run).")
    parser.add_argument(
        "--suites",
        default="all",
        help="Bundled suites to plan too: 'all' (the default), 'none', or a comma-separated list of names.",
    )
    parser.add_argument(
        "--product-sampling",
        action="store_true",
        help="Keep rl+refine's wall-clock bound on starting samples (its plans then vary with the machine's load).",
    )
    args = parser.parse_args(argv)
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.out:
        parser.error("give --out FILE or --compare BEFORE AFTER")
    plan_all(args.out, args.limit, args.suites, args.product_sampling)


if __name__ == "__main__":
    main()

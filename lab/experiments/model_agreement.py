"""Where the learned model and TorchRec's estimator disagree (issue 62; the judges of issue 61):
every planner's plans on the held-out 4D grid, each priced by both models.

    nice -n 10 python lab/experiments/model_agreement.py                       # the grid's 20-200-table tasks
    nice -n 10 python lab/experiments/model_agreement.py --tasks grid20x1x4,grid80x1x8 --out /tmp/ma

The held-out grid is ``autoshard.evaluation.grid.grid_tasks(GridConfig())`` (tables from the test
split of a pool no cost model or policy trained on: ``EVAL_POOL``), what ``autoshard policy eval``
and ``lab/experiments/torchrec_objective.py grid`` run. By default the tasks of 20-200 tables (the
1,000-table ones take TorchRec's planner and ``--model torchrec`` minutes each).

For every task, the plans (through ``autoshard.planning.compare.compare_planners``):

- the heuristics, ``cost_greedy[learned]`` and ``rl[learned]``, planned under the learned profile
  (``--profile``, default the shipped default CPU profile) with its communication model;
- ``cost_greedy[torchrec]``: cost_greedy under ``--model torchrec`` (``torchrec_profile``:
  TorchRec's estimator for cuda, its storage reservation; an exact model: departure margin 0);
- ``torchrec`` and ``torchrec_cpu``: TorchRec's own ``EmbeddingShardingPlanner`` (the registry's
  planners: its search for cuda, and for cpu, where its sharder offers DP, TW, CW and TWCW only).

Kernels are fused (data parallel dense): UVM caching is chosen by ``planning.plan``, not here.

Each plan is then priced by:

- ``learned``: the learned profile's cost model plus its communication model, the way planning
  prices a plan (``rescored`` with ``WithCommunication``), at the product's batch convention
  (``autoshard.core.dmp_batch``, since 27172ab: B samples per rank, a sharded shard serving B x W
  bags, a replica its own B); its slowest rank's parts from ``judges.predict_ranks``;
- ``torchrec_cuda`` and ``torchrec_cpu``: TorchRec's ``EmbeddingPerfEstimator`` summed per rank
  (``judges.torchrec_estimate_ms``) for compute device cuda and cpu. Only ``torchrec_cpu`` prices
  the device the learned CPU profile was traced on; ``torchrec_cuda`` is what ``--model torchrec``
  minimises. Both use the topology's declared link bandwidths (TorchRec's 600 / 12.5 GB/s), the
  learned model its profile's measured collectives.

A plan's cost is its slowest rank. Per task: Spearman's rho between the learned model's costs and
each TorchRec column over the plans, and the plan each model prefers (ties: every plan at the
minimum; two models agree when their sets of preferred plans meet). Overall: the pooled rho of
costs normalised by each task's best plan under that model.

Writes ``OUT/tasks/<task>.json`` after every task (a rerun skips tasks already there, unless
``--fresh``), then ``OUT/summary.json`` and ``OUT/model_agreement.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scipy.stats import pearsonr, spearmanr  # noqa: E402

from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.core.stats import geomean  # noqa: E402
from autoshard.core.task import Task  # noqa: E402
from autoshard.core.types import ShardingPlan, Topology  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners, rescored  # noqa: E402
from autoshard.planning.registry import HEURISTICS  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, LoadedModel, load_profile_or_none, torchrec_profile  # noqa: E402
from autoshard.torchrec.judges import predict_ranks, torchrec_estimate_ms  # noqa: E402
from benchmarks.sharding_4d import _git_state, _types, sharding_counts  # noqa: E402
from cost_model.process import one_thread  # noqa: E402

DEFAULT_TABLES = (20, 80, 200)
PRICES = ("learned", "torchrec_cuda", "torchrec_cpu")
"""The models each plan is priced by (see the module docstring)."""
AGAINST = ("torchrec_cuda", "torchrec_cpu")


def task_plans(
    task: Task, learned: LoadedModel, time_limit_s: float, seed: int
) -> tuple[list[tuple[str, ShardingPlan]], dict[str, str]]:
    """Every planner's plan of ``task``, labelled, and (label, why not) for those without one."""
    workload, topology = task.workload, task.topology
    runs = (
        (
            "learned",
            PlannerContext(learned.model, learned.policy, seed, time_budget_s=time_limit_s),
            learned.communication,
            [*HEURISTICS, "cost_greedy", "rl"],
        ),
        (
            "torchrec",
            PlannerContext(torchrec_profile("cuda").model, None, seed, time_budget_s=time_limit_s),
            None,
            ["cost_greedy", "torchrec"],
        ),
        (
            "torchrec_cpu",
            PlannerContext(torchrec_profile("cpu").model, None, seed, time_budget_s=time_limit_s),
            None,
            ["torchrec_cpu"],
        ),
    )
    plans: list[tuple[str, ShardingPlan]] = []
    skipped: dict[str, str] = {}
    for model, context, communication, names in runs:
        result = compare_planners(workload, topology, names, context, communication)
        for name, plan in zip(result.planned, result.plans):
            plans.append((_label(name, model), plan))
        for name, why in result.skipped:
            skipped[_label(name, model)] = why
    return plans, skipped


def _label(name: str, model: str) -> str:
    """cost_greedy and rl carry the model they planned with; the heuristics and TorchRec's planners do not."""
    return f"{name}[{model}]" if name in ("cost_greedy", "rl") else name


def priced(plans: Sequence[ShardingPlan], task: Task, learned: LoadedModel) -> dict[str, list[Any]]:
    """Each plan's slowest rank under every model of ``PRICES`` (None where one could not price it),
    ``learned_parts``: the learned model's parts of its slowest rank (``_slowest_parts``),
    and ``fullest_share_<device>``: its fullest rank's share of what TorchRec's storage
    reservation leaves a rank (above 1: DMP under TorchRec's count would not fit it)."""
    from autoshard.torchrec.estimates import STORAGE_RESERVATION, TaskEstimates

    workload, topology = task.workload, task.topology
    batch = workload.batch_size
    with_comm = (
        WithCommunication(learned.model, learned.communication, topology) if learned.communication else learned.model
    )
    again = rescored(list(plans), range(len(plans)), with_comm, batch)
    out: dict[str, list[Any]] = {"learned": [p.max_cost_ms for p in again]}
    out["learned_parts"] = [_slowest_parts(p, batch, topology, learned) for p in plans]
    for device in ("cuda", "cpu"):
        column: list[float | None] = []
        fits: list[float | None] = []
        try:  # the reservation sets only the capacities: the perf estimates are the same
            shared = TaskEstimates(workload, topology, device, storage_reservation=STORAGE_RESERVATION)
        except Exception:  # noqa: BLE001 - a task TorchRec cannot estimate is left unpriced
            shared = None
        for p in plans:
            try:
                assert shared is not None
                column.append(max(torchrec_estimate_ms(p, workload, topology, device, shared)))
                used = [sum(e.bytes for e in shared.of([s.as_table for s in d.shards])) for d in p.devices]
                fits.append(max(u / max(c, 1) for u, c in zip(used, shared.capacities)))
            except Exception:  # noqa: BLE001 - a plan (or task) TorchRec cannot estimate is left unpriced
                column.append(None)
                fits.append(None)
        out[f"torchrec_{device}"] = column
        out[f"fullest_share_{device}"] = fits
    return out


def _slowest_parts(plan: ShardingPlan, batch: int, topology: Topology, learned: LoadedModel) -> dict[str, Any]:
    """The learned model's slowest rank of ``plan`` at the per-rank batch, in a DMP step's parts
    (``judges.predict_ranks``): the lookups, the outputs' collectives, the replicas' all-reduce, the ids'."""
    ranks = predict_ranks(plan, batch, topology, learned.model, learned.communication)
    slowest = max(ranks, key=lambda r: r.total_ms)
    return {
        "rank": slowest.rank,
        "lookup_ms": round(slowest.lookup_ms, 3),
        "output_dist_ms": round(slowest.output_dist_ms, 3),
        "allreduce_ms": round(slowest.allreduce_ms, 3),
        "input_dist_ms": _rounded(slowest.input_dist_ms, 3),
    }


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _rho(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pairs) < 3 or len({x for x, _ in pairs}) < 2 or len({y for _, y in pairs}) < 2:
        return None
    value = spearmanr([x for x, _ in pairs], [y for _, y in pairs]).statistic
    return None if math.isnan(value) else float(value)


def preferred(labels: Sequence[str], costs: Sequence[float | None], rel_tol: float = 1e-6) -> list[str]:
    """The plans at the minimum cost (ties within ``rel_tol``)."""
    judged = [c for c in costs if c is not None]
    if not judged:
        return []
    best = min(judged)
    return [n for n, c in zip(labels, costs) if c is not None and c <= best * (1 + rel_tol)]


def run_task(task: Task, learned: LoadedModel, time_limit_s: float, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    plans, skipped = task_plans(task, learned, time_limit_s, seed)
    labels = [name for name, _ in plans]
    prices = priced([p for _, p in plans], task, learned)
    topology = task.topology
    row: dict[str, Any] = {
        "task": task.name,
        "tables": len(task.workload.tables),
        "topology": f"{topology.num_hosts}x{topology.devices_per_host}",
        "batch_size": task.workload.batch_size,
        "plans": [
            {
                "plan": name,
                **{k: _rounded(prices[k][i], 4) for k in PRICES},
                **{f"fullest_share_{d}": _rounded(prices[f"fullest_share_{d}"][i], 3) for d in ("cuda", "cpu")},
                "learned_parts": prices["learned_parts"][i],
                "plan_time_s": round(plan.plan_time_s, 3),
                "sharding_types": sharding_counts(plan),
            }
            for i, (name, plan) in enumerate(plans)
        ],
        "skipped": skipped,
        "rho": {k: _rho(prices["learned"], prices[k]) for k in AGAINST},
        "prefers": {k: preferred(labels, prices[k]) for k in PRICES},
        "wall_s": 0.0,
    }
    row["agree"] = {k: bool(set(row["prefers"]["learned"]) & set(row["prefers"][k])) for k in AGAINST}
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def _normalised(rows: Sequence[dict[str, Any]], a: str, b: str) -> tuple[list[float], list[float]]:
    """Both models' costs of every plan, each divided by its task's best under that model."""
    xs, ys = [], []
    for row in rows:
        pairs = [(p[a], p[b]) for p in row["plans"] if p[a] is not None and p[b] is not None]
        if len(pairs) < 2:
            continue
        best_a, best_b = min(x for x, _ in pairs), min(y for _, y in pairs)
        xs += [x / best_a for x, _ in pairs]
        ys += [y / best_b for _, y in pairs]
    return xs, ys


PAIRS = (
    ("learned", "torchrec_cuda"),
    ("learned", "torchrec_cpu"),
    ("torchrec_cuda", "torchrec_cpu"),
)
"""The pairs of models the summary compares (the last: TorchRec's two devices, for reference)."""


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per pair of models: the pooled rank and log correlation of costs normalised per task, and
    over the tasks with at least 3 plans (``compared``), the median task rho, the tasks where it
    is negative, and those where both models prefer a plan in common."""
    compared = [r for r in rows if len(r["plans"]) >= 3]
    out: dict[str, Any] = {
        "tasks": len(rows),
        "tasks_compared": len(compared),
        "plans": sum(len(r["plans"]) for r in rows),
    }
    for a, b in PAIRS:
        xs, ys = _normalised(rows, a, b)
        rhos = [_rho([p[a] for p in r["plans"]], [p[b] for p in r["plans"]]) for r in compared]
        judged = [v for v in rhos if v is not None]
        labels = [[p["plan"] for p in r["plans"]] for r in compared]
        agree = [
            bool(set(preferred(n, [p[a] for p in r["plans"]])) & set(preferred(n, [p[b] for p in r["plans"]])))
            for n, r in zip(labels, compared)
        ]
        logs = ([math.log(x) for x in xs], [math.log(y) for y in ys])
        a_under_b = [_pick_under(r["plans"], a, b) for r in compared]
        b_under_a = [_pick_under(r["plans"], b, a) for r in compared]
        out[f"{a}_vs_{b}"] = {
            "pooled_spearman": float(spearmanr(xs, ys).statistic) if len(xs) > 2 else None,
            "pooled_pearson_log": float(pearsonr(*logs).statistic) if len(xs) > 2 else None,
            "median_task_rho": median(judged) if judged else None,
            "tasks_rho_below_0": sum(v < 0 for v in judged),
            "preferred_agree": sum(agree),
            f"{a}_pick_under_{b}_geomean": geomean([v for v in a_under_b if v is not None]) if any(a_under_b) else None,
            f"{b}_pick_under_{a}_geomean": geomean([v for v in b_under_a if v is not None]) if any(b_under_a) else None,
        }
    return out


def _pick_under(plans: Sequence[dict[str, Any]], a: str, b: str) -> float | None:
    """How much dearer model ``a``'s preferred plan is under model ``b`` than ``b``'s own best
    (1.0: ``b`` rates it best too)."""
    priced = [p for p in plans if p[a] is not None and p[b] is not None]
    if not priced:
        return None
    pick = min(priced, key=lambda p: p[a])
    return pick[b] / min(p[b] for p in priced)


def without_data_parallel(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with only the plans that replicate no table: what the models share once the
    replicas' pricing (the all-reduce above all) is left out."""
    return [{**r, "plans": [p for p in r["plans"] if "data_parallel" not in p["sharding_types"]]} for r in rows]


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _parts(parts: dict[str, Any]) -> str:
    keys = ("lookup_ms", "output_dist_ms", "allreduce_ms", "input_dist_ms")
    return " / ".join(_f(parts[k]) for k in keys)


def _short(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 2 else f"{names[0]} +{len(names) - 1} tied"


def markdown(report: dict[str, Any]) -> str:
    rows, s = report["rows"], report["summary"]
    lines = [
        "# The learned model against TorchRec's estimator on the same plans: the held-out 4D grid",
        "",
        f"`{report['command']}` ({report['started']}, profile `{report['profile']}`, time limit "
        f"{report['time_limit_s']:g} s a planner; 1-minute load {report['host_load_1min']:.1f} at start, "
        f"{report.get('host_load_1min_end', float('nan')):.1f} at end, 2 shared cores).",
        "",
        "rho: Spearman's rank correlation over the task's plans between the learned model (its CPU profile"
        " plus communication, as planning prices a plan) and TorchRec's estimator for cuda (what `--model"
        " torchrec` minimises) and for cpu (the device the profile was traced on: like with like)."
        " prefers: each model's cheapest plan.",
        "",
        "| task | plans | rho cuda | rho cpu | learned prefers | TorchRec cuda prefers | TorchRec cpu prefers "
        "| agree cuda/cpu |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p = r["prefers"]
        lines.append(
            f"| {r['task']} | {len(r['plans'])} | {_f(r['rho']['torchrec_cuda'])} | {_f(r['rho']['torchrec_cpu'])} "
            f"| {_short(p['learned'])} | {_short(p['torchrec_cuda'])} | {_short(p['torchrec_cpu'])} "
            f"| {'yes' if r['agree']['torchrec_cuda'] else 'no'}/{'yes' if r['agree']['torchrec_cpu'] else 'no'} |"
        )
    lines += [
        "",
        f"Over the {s['tasks_compared']} tasks with at least 3 plans (pooled: costs over the task's best plan):",
        "",
        "| models (A vs B) | pooled rho | pooled Pearson (log) | median task rho | tasks rho < 0 "
        "| preferred plan agrees | A's pick under B / B's best | B's pick under A / A's best |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    names = {
        "learned": "learned",
        "torchrec_cuda": "TorchRec cuda",
        "torchrec_cpu": "TorchRec cpu",
    }
    for title, summary in (("", s), (" (plans without data parallel)", report["summary_without_data_parallel"])):
        for a, b in PAIRS:
            v, n = summary[f"{a}_vs_{b}"], summary["tasks_compared"]
            lines.append(
                f"| {names[a]} vs {names[b]}{title} | {_f(v['pooled_spearman'])} | {_f(v['pooled_pearson_log'])} "
                f"| {_f(v['median_task_rho'])} | {v['tasks_rho_below_0']} of {n} | {v['preferred_agree']} of {n} "
                f"| {_f(v[f'{a}_pick_under_{b}_geomean'], 3)} | {_f(v[f'{b}_pick_under_{a}_geomean'], 3)} |"
            )
    lines += ["", "## Each task's plans (slowest rank, ms)", ""]
    for r in rows:
        lines += [
            f"**{r['task']}** ({r['tables']} tables, {r['topology']}, batch {r['batch_size']})"
            + (f"; no plan: {', '.join(sorted(r['skipped']))}" if r["skipped"] else ""),
            "",
            "| plan | learned | learned's slowest rank: lookup / outputs / all-reduce / ids "
            "| TorchRec cuda | TorchRec cpu | fullest / TorchRec cap (cuda, cpu) | types |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {p['plan']} | {_f(p['learned'], 3)} | {_parts(p['learned_parts'])} "
            f"| {_f(p['torchrec_cuda'], 3)} "
            f"| {_f(p['torchrec_cpu'], 3)} | {_f(p['fullest_share_cuda'])}, {_f(p['fullest_share_cpu'])} "
            f"| {_types(p['sharding_types'])} |"
            for p in r["plans"]
        ]
        lines.append("")
    return "\n".join(lines)


def held_out_tasks(names: str | None) -> list[Task]:
    """The held-out grid's tasks: those named, else those of ``DEFAULT_TABLES`` tables."""
    tasks = grid_tasks(GridConfig())
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        known = {t.name for t in tasks}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise SystemExit(f"--tasks: unknown task(s) {', '.join(unknown)}; the grid's: {', '.join(sorted(known))}")
        return [t for t in tasks if t.name in wanted]
    return [t for t in tasks if len(t.workload.tables) in DEFAULT_TABLES]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", help="grid tasks, comma-separated (default: those of 20, 80 and 200 tables)")
    parser.add_argument("--out", type=Path, default=ROOT / "lab" / "results" / "model_agreement")
    parser.add_argument("--profile", type=Path, default=DEFAULT_MODEL, help="the learned profile's folder")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds a searching planner a task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="plan every task again, even those already written")
    args = parser.parse_args(argv)
    command = "python " + " ".join(
        ["lab/experiments/model_agreement.py", *(argv if argv is not None else sys.argv[1:])]
    )
    one_thread()
    learned, missing = load_profile_or_none(args.profile, "--profile")
    if learned is None:
        raise SystemExit(f"--profile: {missing}")
    tasks = held_out_tasks(args.tasks)
    done = args.out / "tasks"
    done.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": command,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host_load_1min": os.getloadavg()[0],
        "git": _git_state(),
        "profile": learned.profile,
        "time_limit_s": args.time_limit,
        "seed": args.seed,
    }
    rows = []
    for task in tasks:
        path = done / f"{task.name}.json"
        if path.exists() and not args.fresh:
            rows.append(json.loads(path.read_text()))
            continue
        row = run_task(task, learned, args.time_limit, args.seed)
        row["host_load_1min"] = os.getloadavg()[0]
        path.write_text(json.dumps(row, indent=1) + "\n")
        rows.append(row)
        print(
            f"{task.name}: {len(row['plans'])} plans in {row['wall_s']:.0f} s;"
            f" rho cuda {_f(row['rho']['torchrec_cuda'])} cpu {_f(row['rho']['torchrec_cpu'])};"
            f" learned prefers {_short(row['prefers']['learned'])},"
            f" TorchRec cuda {_short(row['prefers']['torchrec_cuda'])}, cpu {_short(row['prefers']['torchrec_cpu'])}",
            flush=True,
        )
    report["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    report["host_load_1min_end"] = os.getloadavg()[0]
    report["summary"] = summarise(rows)
    report["summary_without_data_parallel"] = summarise(without_data_parallel(rows))
    report["rows"] = rows
    summary = {k: v for k, v in report.items() if k != "rows"}
    summary["tasks"] = [
        {k: r[k] for k in ("task", "tables", "topology", "rho", "prefers", "agree", "wall_s")} for r in rows
    ]
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "model_agreement.md").write_text(markdown(report))
    print(markdown(report).split("## Each task")[0])
    return report


if __name__ == "__main__":
    main()

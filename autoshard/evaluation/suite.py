"""Evaluation suites: tasks (workload + topology), every planner side by side, predicted and
measured figures, written as Markdown, CSV and a PNG chart per task.

Measurement is passed in (``PlanMeasurer``), so this module needs no benchmark code; the CLI
hands it ``autoshard.evaluation.measure_plan.measure_plans``.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from autoshard.core.communication import CommunicationModel
from autoshard.core.model_error import centred, device_errors, expected_max
from autoshard.core.stats import geomean, ratio_ci95, verdict
from autoshard.core.task import Task
from autoshard.core.types import MeasuredPlan, ShardingPlan, Workload
from autoshard.evaluation.verification import VERIFIED, Verification
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planning.compare import Comparison, compare_planners
from autoshard.planning.registry import planner_spec

Measured = MeasuredPlan
"""A plan measured in rounds (measured here, or read back from a report)."""

PlanMeasurer = Callable[[Sequence[ShardingPlan], int, int], Sequence[Measured]]  # plans, batch, reference


class DistributedMeasured(Protocol):
    @property
    def plan_name(self) -> str: ...

    @property
    def median_ms(self) -> float: ...

    @property
    def iqr_ms(self) -> float: ...


DistributedMeasurer = Callable[[Sequence[ShardingPlan], Workload], Sequence[DistributedMeasured]]


@dataclass(frozen=True, slots=True)
class TaskResult:
    task: Task
    comparison: Comparison
    measured: tuple[Measured, ...]  # empty when not measured
    reference: str
    distributed: tuple[DistributedMeasured, ...] = ()  # empty when not run distributed
    verification: Verification | None = None  # with a verifier: the measured choice, planned as ``verified``


Verifier = Callable[[Sequence[ShardingPlan], int], Verification]
"""(a task's plans, batch size) -> a measured choice among them (``autoshard.evaluation.verification.verify``)."""


def evaluate_task(
    task: Task,
    names: Sequence[str] | None,
    context: PlannerContext,
    measurer: PlanMeasurer | None = None,
    distributed: DistributedMeasurer | None = None,
    communication: CommunicationModel | None = None,
    verifier: Verifier | None = None,
) -> TaskResult:
    """Every planner on the task; measured ratios are to the first cost-model planner's plan
    (cost_greedy), or the first plan without one. With a ``verifier``, its choice among the plans
    (measured in rounds of its own, before the measurement here) joins them as ``verified``, so
    that the measurement here judges it on rounds that did not choose it."""
    comparison = compare_planners(task.workload, task.topology, names, context, communication)
    verification = verifier(comparison.plans, task.workload.batch_size) if verifier and comparison.plans else None
    if verification is not None:
        comparison = replace(
            comparison,
            plans=(*comparison.plans, replace(verification.plan, planner=VERIFIED)),
            planned=(*comparison.planned, VERIFIED),
        )
    plans = comparison.plans
    ref = next((i for i, p in enumerate(plans) if _kind(p.planner) is PlannerKind.COST_MODEL), 0)
    measured = tuple(measurer(plans, task.workload.batch_size, ref)) if measurer and plans else ()
    ran = tuple(distributed(plans, task.workload)) if distributed and plans else ()
    return TaskResult(task, comparison, measured, plans[ref].planner if plans else "", ran, verification)


def _kind(name: str) -> PlannerKind:
    """A plan's planner kind; the verified choice stands with the cost-model planners (it is not a heuristic)."""
    return PlannerKind.COST_MODEL if name == VERIFIED else planner_spec(name).kind


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One plan of a task in a suite's report (``task_rows``): predicted and measured figures (None
    where not measured), and the plan itself (each device's tables, a column shard named
    ``table[first:end]``, in the order of its devices). ``reference`` names the plan that
    ``measured_ratio_to_reference`` is to (the key ``measured_ratio_to_<reference>`` in its JSON)."""

    planner: str
    predicted_max_ms: float
    predicted_imbalance: float
    plan_time_s: float
    reused_s: float
    own_estimate_max_ms: float | None
    measured_max_ms: float | None
    measured_max_iqr_ms: float | None
    measured_imbalance: float | None
    reference: str
    measured_ratio_to_reference: float | None
    ratio_ci95: tuple[float, ...] | None
    measured_device_ms: tuple[float, ...] | None
    # each round's measurements, device by device, and what the model predicted for each device:
    # the noise and the model's error can be read from the report alone
    measured_round_device_ms: tuple[tuple[float, ...], ...] | None
    predicted_device_ms: tuple[float, ...]
    devices: tuple[tuple[str, ...], ...]  # the plan: each device's tables
    distributed_iteration_ms: float | None
    distributed_iqr_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        """Its JSON (the report's ``planners`` rows, and the task's CSV)."""
        return {
            "planner": self.planner,
            "predicted_max_ms": self.predicted_max_ms,
            "predicted_imbalance": self.predicted_imbalance,
            "plan_time_s": self.plan_time_s,
            "reused_s": self.reused_s,
            "own_estimate_max_ms": self.own_estimate_max_ms,
            "measured_max_ms": self.measured_max_ms,
            "measured_max_iqr_ms": self.measured_max_iqr_ms,
            "measured_imbalance": self.measured_imbalance,
            f"measured_ratio_to_{self.reference}": self.measured_ratio_to_reference,
            "ratio_ci95": _list(self.ratio_ci95),
            "measured_device_ms": _list(self.measured_device_ms),
            "measured_round_device_ms": (
                [list(r) for r in self.measured_round_device_ms] if self.measured_round_device_ms is not None else None
            ),
            "predicted_device_ms": list(self.predicted_device_ms),
            "devices": [list(d) for d in self.devices],
            "distributed_iteration_ms": self.distributed_iteration_ms,
            "distributed_iqr_ms": self.distributed_iqr_ms,
        }


def _list(values: tuple[float, ...] | None) -> list[float] | None:
    return list(values) if values is not None else None


def task_rows(result: TaskResult) -> list[TaskRow]:
    """One row per plan of a task (``TaskRow``)."""
    measured = {m.planner: m for m in result.measured}
    distributed = {d.plan_name: d for d in result.distributed}
    rows = []
    for plan in result.comparison.plans:
        m, dist = measured.get(plan.planner), distributed.get(plan.planner)
        rows.append(
            TaskRow(
                planner=plan.planner,
                predicted_max_ms=round(plan.max_cost_ms, 4),
                predicted_imbalance=round(plan.imbalance, 4),
                plan_time_s=round(plan.plan_time_s, 4),
                reused_s=round(plan.reused_s, 4),
                own_estimate_max_ms=round(max(plan.own_estimate_ms), 4) if plan.own_estimate_ms else None,
                measured_max_ms=round(m.max_ms, 4) if m else None,
                measured_max_iqr_ms=round(m.max_iqr_ms, 4) if m else None,
                measured_imbalance=round(max(m.device_ms) / float(np.mean(m.device_ms)) - 1, 4) if m else None,
                reference=result.reference,
                measured_ratio_to_reference=round(m.ratio_to_reference, 4) if m else None,
                ratio_ci95=tuple(round(v, 4) for v in m.ratio_ci95) if m else None,
                measured_device_ms=tuple(round(v, 4) for v in m.device_ms) if m else None,
                measured_round_device_ms=tuple(tuple(round(v, 4) for v in r) for r in m.round_device_ms) if m else None,
                predicted_device_ms=tuple(round(d.cost_ms, 4) for d in plan.devices),
                devices=tuple(tuple(s.as_table.name for s in d.shards) for d in plan.devices),
                distributed_iteration_ms=round(dist.median_ms, 4) if dist else None,
                distributed_iqr_ms=round(dist.iqr_ms, 4) if dist else None,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class AgainstHeuristic:
    """A planner's measured max over the best heuristic's, paired by round: the geometric mean
    with its 95% interval, and the verdict it allows (``faster``, ``tie``, ``slower``). The best
    heuristic is the one with the lowest measured max, chosen after measuring (which flatters
    the heuristics)."""

    planner: str
    heuristic: str
    ratio: float
    ci95: tuple[float, float]
    verdict: str


HeuristicRounds = tuple[str, Sequence[float]]
"""The heuristic(s) a planner is compared with, by name, and the max they stand for in each round."""


def _against(result: TaskResult, choose: Callable[[list[Measured]], HeuristicRounds | None]) -> list[AgainstHeuristic]:
    """Every planner that is not a heuristic against the per-round maxima that ``choose`` picks
    from the measured heuristics (empty when the task was not measured, no heuristic ran or
    ``choose`` declines)."""
    kind = {m.planner: _kind(m.planner) for m in result.measured}
    heuristics = [m for m in result.measured if kind[m.planner] is PlannerKind.HEURISTIC]
    chosen = choose(heuristics) if heuristics else None
    if chosen is None:
        return []
    name, against = chosen
    out = []
    for m in result.measured:
        if kind[m.planner] is not PlannerKind.HEURISTIC:
            ratio, low, high = ratio_ci95(m.round_max_ms, against)
            out.append(AgainstHeuristic(m.planner, name, ratio, (low, high), verdict(low, high)))
    return out


def against_best_heuristic(result: TaskResult) -> list[AgainstHeuristic]:
    """Every planner that is not a heuristic against the best heuristic of a measured task
    (empty when the task was not measured or no heuristic ran)."""

    def best(heuristics: list[Measured]) -> HeuristicRounds:
        found = min(heuristics, key=lambda m: m.max_ms)
        return found.planner, found.round_max_ms

    return _against(result, best)


def against_held_out_heuristic(result: TaskResult) -> list[AgainstHeuristic]:
    """``against_best_heuristic`` without the flattery of choosing the heuristic on the rounds it
    is compared on: the rounds' pairs (a round and its reversed-order twin) are folds, and each
    pair's rounds compare with the heuristic whose median max is lowest over the other pairs'
    rounds. ``heuristic`` names each chosen one (``a/b`` when folds chose differently). Empty
    with fewer than 2 pairs (4 rounds), when the task was not measured or no heuristic ran."""

    def held_out(heuristics: list[Measured]) -> HeuristicRounds | None:
        rounds = len(heuristics[0].round_max_ms)
        folds = rounds // 2
        if folds < 2:
            return None
        fold_of = [min(r // 2, folds - 1) for r in range(rounds)]  # an odd last round joins the last pair
        chosen = [
            min(
                heuristics, key=lambda m: statistics.median(m.round_max_ms[r] for r in range(rounds) if fold_of[r] != k)
            )
            for k in range(folds)
        ]
        return (
            "/".join(dict.fromkeys(m.planner for m in chosen)),
            [chosen[fold_of[r]].round_max_ms[r] for r in range(rounds)],
        )

    return _against(result, held_out)


@dataclass(frozen=True, slots=True)
class AgainstSummary:
    """A planner over a suite's measured tasks (``suite_summary``): the geometric mean of its ratio
    to each task's best heuristic, and on how many tasks its interval says faster, tie or slower."""

    geomean_vs_best_heuristic: float
    tasks: int
    faster: int
    tie: int
    slower: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "geomean_vs_best_heuristic": self.geomean_vs_best_heuristic,
            "tasks": self.tasks,
            "faster": self.faster,
            "tie": self.tie,
            "slower": self.slower,
        }


def suite_summary(per_task: Sequence[Sequence[AgainstHeuristic]]) -> dict[str, AgainstSummary]:
    """Per planner over the measured tasks (``AgainstSummary``)."""
    return {
        planner: AgainstSummary(
            round(geomean([r.ratio for r in got]), 4),
            len(got),
            *(sum(r.verdict == v for r in got) for v in ("faster", "tie", "slower")),
        )
        for planner, got in _by_planner(per_task).items()
    }


Row = TypeVar("Row", "AgainstHeuristic", "Expected")


def _by_planner(per_task: Sequence[Sequence[Row]]) -> dict[str, list[Row]]:
    """A suite's per-task rows (each with a ``planner``), gathered by planner."""
    rows: dict[str, list[Row]] = {}
    for task in per_task:
        for row in task:
            rows.setdefault(row.planner, []).append(row)
    return rows


OTHER_TASKS = "the other tasks' devices"
PROFILE_ERRORS = "the profile's measured device errors"


@dataclass(frozen=True, slots=True)
class Expected:
    """A planner's max over the best heuristic's (the one ``against_best_heuristic`` compares
    with): predicted, and expected under the cost model's errors on measured device sets (the
    optimizer's curse, ``autoshard.core.model_error``)."""

    planner: str
    heuristic: str
    predicted: float
    expected: float
    errors_from: str = OTHER_TASKS  # whose errors: ``OTHER_TASKS`` or ``PROFILE_ERRORS``


def expected_against_best_heuristic(
    results: Sequence[TaskResult],
    profile_errors: np.ndarray | None = None,
) -> list[list[Expected]]:
    """Per task of a measured suite, every planner that is not a heuristic against the best
    heuristic: its predicted ratio, and the ratio that the model's errors on the measured devices
    of the suite's *other* tasks lead to expect (nothing of the task's own measurement); where no
    other task was measured (a suite of one), under ``profile_errors`` (the profile's
    ``device_errors.json``) if given. Empty for a task that was not measured or had no heuristic,
    and where neither errors exist. Predicted and measured costs must be of one kind: compute
    only (``--no-communication``)."""
    errors = [task_device_errors(r) for r in results]
    out: list[list[Expected]] = []
    for i, result in enumerate(results):
        others = [e for j, e in enumerate(errors) if j != i and len(e)]
        heuristics = [m for m in result.measured if _kind(m.planner) is PlannerKind.HEURISTIC]
        has_profile = profile_errors is not None and len(profile_errors) > 0
        if not (others or has_profile) or not heuristics or result.comparison is None:
            out.append([])
            continue
        if others:
            pool, source = np.concatenate(others), OTHER_TASKS
        else:
            assert profile_errors is not None  # has_profile
            pool, source = profile_errors, PROFILE_ERRORS
        plans = {p.planner: p for p in result.comparison.plans}
        best = plans[min(heuristics, key=lambda m: m.max_ms).planner]
        against = expected_max([d.cost_ms for d in best.devices], pool)
        out.append(
            [
                Expected(
                    m.planner,
                    best.planner,
                    plans[m.planner].max_cost_ms / best.max_cost_ms,
                    expected_max([d.cost_ms for d in plans[m.planner].devices], pool) / against,
                    source,
                )
                for m in result.measured
                if _kind(m.planner) is not PlannerKind.HEURISTIC
            ]
        )
    return out


def task_device_errors(result: TaskResult) -> np.ndarray:
    """The model's error on each device set of a measured task (``model_error.device_errors``),
    less the task's median (``model_error.centred``)."""
    return centred(device_errors(*task_device_costs(result)))


def task_device_costs(result: TaskResult) -> tuple[np.ndarray, np.ndarray]:
    """The predicted and the measured cost of each device set of a measured task, once per set
    however many plans hold it."""
    plans = {p.planner: p for p in result.comparison.plans} if result.comparison is not None else {}
    by_set: dict[Any, tuple[float, float]] = {}
    for m in result.measured:
        for device, cost in zip(plans[m.planner].devices if m.planner in plans else (), m.device_ms):
            by_set.setdefault(device.set_key, (device.cost_ms, cost))
    predicted, measured = zip(*by_set.values()) if by_set else ((), ())
    return np.array(predicted, dtype=float), np.array(measured, dtype=float)


@dataclass(frozen=True, slots=True)
class ExpectedMeans:
    """A planner over a suite's tasks (``expected_summary``): the geometric means of its predicted
    and expected ratios to the best heuristic."""

    predicted: float
    expected: float


def expected_summary(per_task: Sequence[Sequence[Expected]]) -> dict[str, ExpectedMeans]:
    """Per planner over the tasks (``ExpectedMeans``)."""
    return {
        planner: ExpectedMeans(
            round(geomean([r.predicted for r in got]), 4), round(geomean([r.expected for r in got]), 4)
        )
        for planner, got in _by_planner(per_task).items()
    }


def write_task_outputs(result: TaskResult, out: Path) -> dict[str, str]:
    """``<task>.md``, ``<task>.csv`` and, when measured, ``<task>.png``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows, name = task_rows(result), result.task.name
    md = [
        f"### {name}: {len(result.task.workload.tables)} tables on {result.task.topology.num_devices} "
        f"x {result.task.topology.device_memory_gb:.3g} GiB",
        "",
        "| planner | predicted max (ms) | measured max (ms) | ratio to "
        + result.reference
        + " [95% CI] | measured imbalance | distributed iteration (ms) | plan time (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ratio, ci = r.measured_ratio_to_reference, r.ratio_ci95
        md.append(
            f"| {r.planner} | {r.predicted_max_ms:.3f} | "
            + (
                f"{r.measured_max_ms:.3f} | {ratio:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | {r.measured_imbalance:.1%}"
                if ratio is not None and ci is not None
                else "- | - | -"
            )
            + (
                f" | {r.distributed_iteration_ms:.2f} (IQR {r.distributed_iqr_ms:.2f})"
                if r.distributed_iteration_ms is not None
                else " | -"
            )
            + f" | {r.plan_time_s:.3g}"
            + (f" (+{r.reused_s:.3g} shared)" if r.reused_s else "")
            + " |"
        )
    against = against_best_heuristic(result)
    if against:
        md.append(
            f"\nagainst the best heuristic measured ({against[0].heuristic}), per round [95% CI]: "
            + "; ".join(f"{a.planner} {a.ratio:.3f} [{a.ci95[0]:.3f}, {a.ci95[1]:.3f}] {a.verdict}" for a in against)
        )
    for planner, reason in result.comparison.skipped:
        md.append(f"\nskipped {planner}: {reason.splitlines()[0]}")
    paths = {"markdown": str(out / f"{name}.md"), "csv": str(out / f"{name}.csv")}
    Path(paths["markdown"]).write_text("\n".join(md) + "\n")
    with open(paths["csv"], "w", newline="") as f:
        table = [r.to_dict() for r in rows]
        writer = csv.DictWriter(f, fieldnames=list(table[0]) if table else ["planner"])
        writer.writeheader()
        writer.writerows([{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in table])
    if result.measured:
        paths["chart"] = str(out / f"{name}.png")
        _chart(result, Path(paths["chart"]))
    return paths


def _chart(result: TaskResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = result.measured
    devices = max(len(m.device_ms) for m in measured)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(measured)), 4))
    width = 0.8 / devices
    for d in range(devices):
        ax.bar(
            [i + d * width for i in range(len(measured))],
            [m.device_ms[d] if d < len(m.device_ms) else 0 for m in measured],
            width,
        )
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(measured))])
    ax.set_xticklabels([m.planner for m in measured], rotation=30, ha="right")
    ax.set_ylabel("measured device cost (ms / iteration)")
    ax.set_title(f"{result.task.name}: per-device measured cost (one bar per device)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

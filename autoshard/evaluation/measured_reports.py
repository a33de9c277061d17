"""What measured evaluations ran, read back from their reports: the device sets, and a task's
result for ``evaluate --resume``.

``autoshard evaluate --measure --json --out DIR`` writes ``DIR/<suite>/report.json``; a report
holds each task's workload and each plan's devices beside their measured costs, which is what a
cost model can learn the order of a task's sets from
(``cost_model.relative_labels``; ``autoshard cost adapt --measured``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.shard_labels import plan_shards
from autoshard.core.task import Task
from autoshard.core.types import (
    DevicePlan,
    DeviceSet,
    MeasuredDeviceSet,
    MeasuredPlan,
    ShardingPlan,
    Table,
    TableShard,
)
from autoshard.core.workload_file import read_json_file, workload_from_dict
from autoshard.evaluation.suite import TaskResult
from autoshard.planning.compare import Comparison

OPTION = "--measured"


def report_paths(paths: list[Path]) -> list[Path]:
    """Each path as reports: a ``report.json`` file, or every ``report.json`` under a folder."""
    found = []
    for path in paths:
        if path.is_dir():
            inside = sorted(path.rglob("report.json"))
            if not inside:
                raise InputError(
                    OPTION,
                    f"no report.json under {path}",
                    "pass the --out folder of `autoshard evaluate --measure --json`, or a report.json",
                )
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise InputError(OPTION, f"{path} does not exist", "pass a report.json or a folder holding some")
    return found


def measured_device_sets(paths: list[Path]) -> list[MeasuredDeviceSet]:
    """Every measured device of every plan of the reports under ``paths``; each report is one run
    (its sets of a task were measured together, interleaved)."""
    return [m for path in report_paths(paths) for m in _report_sets(read_json_file(path, OPTION), str(path))]


def measured_on(path: Path) -> tuple[str | None, str | None]:
    """(device name, CPU) of the machine a report's plans were measured on, as its drift check
    recorded them (``machine_drift``; None where the report does not say)."""
    report = read_json_file(path, OPTION)
    before = ((report.get("machine_drift") or {}).get("before") or {}) if isinstance(report, dict) else {}
    return before.get("this_device"), before.get("this_cpu")


def _report_sets(report: Any, run: str) -> list[MeasuredDeviceSet]:
    tasks = report.get("tasks") if isinstance(report, dict) else None
    if not isinstance(tasks, list):
        raise InputError(
            OPTION,
            f"{run} is not a report of `autoshard evaluate --json` (no tasks)",
            "pass the report.json that `autoshard evaluate --measure --json --out DIR` writes",
        )
    found = []
    for task in tasks:
        rows = [p for p in task.get("planners", []) if p.get("measured_device_ms")]
        if not rows:
            continue
        if "workload" not in task or any("devices" not in p for p in rows):
            raise InputError(
                OPTION,
                f"{run}, task {task.get('task')!r}: the report does not hold its plans (made by an older version)",
                "measure again: `autoshard evaluate SUITE --measure --json --out DIR`",
            )
        workload, _ = workload_from_dict(task["workload"])
        tables = {t.name: t for t in workload.tables}
        for row in rows:
            shards = devices_of(row["devices"], tables, run)
            for index, (placed, ms) in enumerate(zip(shards, row["measured_device_ms"])):
                if placed and ms > 0:
                    device = DeviceSet(
                        (task["task"], row["planner"], index), tuple(s.as_table for s in placed), workload.batch_size
                    )
                    found.append(MeasuredDeviceSet(run, device, float(ms)))
    return found


def devices_of(
    names: list[list[str]],
    tables: dict[str, Table],
    run: str,
    option: str = OPTION,
    local_world_size: int | None = None,
) -> list[tuple[TableShard, ...]]:
    """A plan's devices as a report lists them (each device's table and shard labels), as shards
    (``plan_shards``); ``InputError`` naming a label that is no table of the task's workload."""
    try:
        return plan_shards(names, tables, local_world_size)
    except KeyError as error:
        raise InputError(
            option,
            f"{run}: a plan holds {error.args[0]!r}, which is not a table of its task's workload",
            "pass the report as `autoshard evaluate` wrote it",
        ) from None


def reported_result(task: Task, entry: dict[str, Any]) -> TaskResult:
    """A task's result as a report's entry for it holds it (its plans with their per-device
    predictions, and their rounds where measured): what ``evaluate --resume`` needs of a task an
    unfinished run did, to summarise the suite without planning or measuring it again. Raises
    ``InputError`` for an entry of a report made before reports held every round."""
    rows = entry["planners"]
    if any("predicted_device_ms" not in r or "measured_round_device_ms" not in r for r in rows):
        raise InputError(
            "--resume",
            f"task {task.name!r}: the unfinished report does not hold every round (made by an older version)",
            "run again without --resume",
        )
    tables = {t.name: t for t in task.workload.tables}
    plans, measured = [], []
    for row in rows:
        shards = devices_of(row["devices"], tables, task.name, "--resume", task.topology.local_world_size)
        devices = tuple(DevicePlan(placed, cost) for placed, cost in zip(shards, row["predicted_device_ms"]))
        plans.append(ShardingPlan(row["planner"], devices, row["plan_time_s"], reused_s=row["reused_s"]))
        rounds = row["measured_round_device_ms"]
        if rounds:
            measured.append(
                MeasuredPlan(
                    row["planner"],
                    tuple(row["measured_device_ms"]),
                    row["measured_max_ms"],
                    row["measured_max_iqr_ms"],
                    row[f"measured_ratio_to_{entry['reference']}"],
                    tuple(row["ratio_ci95"]),
                    tuple(max(r) for r in rounds),
                    tuple(tuple(r) for r in rounds),
                )
            )
    comparison = Comparison(
        tuple(plans),
        tuple((s["planner"], s["reason"]) for s in entry["skipped"]),
        (),
        planned=tuple(p.planner for p in plans),
    )
    return TaskResult(task, comparison, tuple(measured), entry["reference"])

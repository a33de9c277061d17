"""The device sets that measured evaluations ran, read back from their reports.

``autoshard evaluate --measure --json --out DIR`` writes ``DIR/<suite>/report.json``; since
2026-12-04 a report holds each task's workload and each plan's devices beside their measured
costs, which is what a cost model can learn the order of a task's sets from
(``cost_model.relative_labels``; ``autoshard cost adapt --measured``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from autoshard.errors import InputError
from autoshard.types import DeviceSet, MeasuredDeviceSet, Table, TableShard
from autoshard.workload_file import read_json_file, workload_from_dict

SHARD = re.compile(r"^(?P<table>.+)\[(?P<first>\d+):(?P<end>\d+)\]$")  # a column shard, as TableShard.as_table names it
OPTION = "--measured"


def report_paths(paths: list[Path]) -> list[Path]:
    """Each path as reports: a ``report.json`` file, or every ``report.json`` under a folder."""
    found = []
    for path in paths:
        if path.is_dir():
            inside = sorted(path.rglob("report.json"))
            if not inside:
                raise InputError(OPTION, f"no report.json under {path}",
                                 "pass the --out folder of `autoshard evaluate --measure --json`, or a report.json")
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


def _report_sets(report: Any, run: str) -> list[MeasuredDeviceSet]:
    tasks = report.get("tasks") if isinstance(report, dict) else None
    if not isinstance(tasks, list):
        raise InputError(OPTION, f"{run} is not a report of `autoshard evaluate --json` (no tasks)",
                         "pass the report.json that `autoshard evaluate --measure --json --out DIR` writes")
    found = []
    for task in tasks:
        rows = [p for p in task.get("planners", []) if p.get("measured_device_ms")]
        if not rows:
            continue
        if "workload" not in task or any("devices" not in p for p in rows):
            raise InputError(OPTION, f"{run}, task {task.get('task')!r}: the report does not hold its plans (made "
                             "before 2026-12-04)", "measure again: `autoshard evaluate SUITE --measure --json --out DIR`")
        workload, _ = workload_from_dict(task["workload"])
        tables = {t.name: t for t in workload.tables}
        for row in rows:
            for index, (names, ms) in enumerate(zip(row["devices"], row["measured_device_ms"])):
                if names and ms > 0:
                    device = DeviceSet((task["task"], row["planner"], index),
                                       tuple(_table(name, tables, run) for name in names), workload.batch_size)
                    found.append(MeasuredDeviceSet(run, device, float(ms)))
    return found


def _table(name: str, tables: dict[str, Table], run: str) -> Table:
    """A device's table by name: a workload table, or a column shard of one (``name[first:end]``)."""
    if name in tables:
        return tables[name]
    shard = SHARD.match(name)
    if shard is None or shard["table"] not in tables:
        raise InputError(OPTION, f"{run}: a plan holds {name!r}, which is not a table of its task's workload",
                         "pass the report as `autoshard evaluate` wrote it")
    first, end = int(shard["first"]), int(shard["end"])
    return TableShard(tables[shard["table"]], first, end - first).as_table

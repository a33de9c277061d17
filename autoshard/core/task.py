"""A task is a workload on a topology; a suite is a named list of tasks, read from a JSON file
(bundled ones live in ``suites/``) whose tasks name a preset, a workload file or a synthetic draw.

A task's topology: ``num_devices`` (one host), or ``num_hosts`` and ``devices_per_host`` (a
cluster of ``num_hosts`` x ``devices_per_host`` devices, rank r on host r // devices_per_host;
``num_devices`` may be left out, and must agree if given); with ``device_memory_gb`` (GiB per
device, or a list of one per device in rank order) or ``memory_slack`` (x an even share of the
tables' memory, but at least 1.25 x the largest table; default 1.3). A task that names none of
these takes its workload file's topology; one that does keeps the file's link bandwidths.

```json
{"name": "criteo_2x8", "workload": "criteo_terabyte", "num_hosts": 2, "devices_per_host": 8, "device_memory_gb": 8}
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autoshard.core.errors import InputError
from autoshard.core.presets import load_workload_or_preset
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.types import (
    GIB,
    INTER_HOST_BW_GBPS,
    INTRA_HOST_BW_GBPS,
    Topology,
    Workload,
    is_int,
    is_number,
)
from autoshard.core.workload_file import read_json_file


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    workload: Workload
    topology: Topology


LARGEST_TABLE_HEADROOM = 1.25  # lets TorchRec's planner (15% reservation + buffers) place it too


def memory_for(workload: Workload, num_devices: int, slack: float) -> float:
    """GiB per device: ``slack`` x an even share, but at least 1.25 x the largest table."""
    largest = max(t.memory_bytes for t in workload.tables)
    gib = max(slack * workload.memory_bytes / num_devices, largest * LARGEST_TABLE_HEADROOM) / GIB
    return round(gib, 6) or gib  # tiny workloads keep their few bytes rather than round to 0


def even_memory(workload: Workload, num_devices: int, slack: float) -> float:
    """GiB per device: ``slack`` x an even share, without ``memory_for``'s floor of the largest
    table (some tables may fit no device: they must be row-sharded)."""
    gib = slack * workload.memory_bytes / num_devices / GIB
    return round(gib, 6) or gib


TOPOLOGY_FIELDS = frozenset({"num_devices", "num_hosts", "devices_per_host", "device_memory_gb", "memory_slack"})
"""A task's own topology fields; a task naming none of them takes its workload file's topology."""
SYNTHETIC_FIELDS = ("pool_size", "pool_seed", "split", "num_tables", "seed", "batch_size", "max_log10_rows")
SYNTHETIC_EXAMPLE = '{"synthetic": {"num_tables": 80, "seed": 1}, "num_devices": 8}'


def _int_field(data: dict[str, Any], key: str, default: int | None, least: int, within: str = "") -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or not is_int(value) or value < least:
        raise InputError(
            within + key,
            f"must be an integer >= {least}, got {value!r}" if key in data else "is required",
            f"set {key!r} to an integer >= {least}",
        )
    return value  # type: ignore[return-value]


def _synthetic(s: Any, name: str) -> Workload:
    if not isinstance(s, dict):
        raise InputError("synthetic", f"must be a JSON object, got {type(s).__name__}", f"e.g. {SYNTHETIC_EXAMPLE}")
    for key in s:
        if key not in SYNTHETIC_FIELDS:
            raise InputError(f"synthetic.{key}", "unknown field", f"use one of {', '.join(SYNTHETIC_FIELDS)}")
    if s.get("split", "test") not in ("train", "test"):
        raise InputError(
            "synthetic.split", f"must be 'train' or 'test', got {s['split']!r}", "use 'test' (unseen tables)"
        )
    ints = {
        k: _int_field(s, k, d, least, "synthetic.")
        for k, d, least in (
            ("num_tables", None, 1),
            ("pool_size", 500, 2),
            ("pool_seed", 0, 0),
            ("seed", 0, 0),
            ("batch_size", 2048, 1),
        )
    }
    rows = {"max_log10_rows": s["max_log10_rows"]} if "max_log10_rows" in s else {}
    if rows and not (is_number(rows["max_log10_rows"]) and rows["max_log10_rows"] > 2):
        raise InputError(
            "synthetic.max_log10_rows",
            f"must be a number > 2, got {rows['max_log10_rows']!r}",
            "e.g. 6 (tables of up to a million rows)",
        )
    pool = generate_pool(PoolConfig(size=ints["pool_size"], seed=ints["pool_seed"], **rows))
    tables = pool.test if s.get("split", "test") == "test" else pool.train
    if ints["num_tables"] > len(tables):
        raise InputError(
            "synthetic.num_tables",
            f"the pool's {s.get('split', 'test')} split holds {len(tables)} tables, {ints['num_tables']} asked",
            "ask for fewer tables or a larger pool_size",
        )
    return sample_task(tables, ints["num_tables"], np.random.default_rng(ints["seed"]), ints["batch_size"], name)


def _task(raw: Any) -> Task:
    if not isinstance(raw, dict):
        raise InputError("task", f"must be a JSON object, got {type(raw).__name__}", f"e.g. {SYNTHETIC_EXAMPLE}")
    name = raw.get("name") or "task"
    if not isinstance(name, str):
        raise InputError("name", f"must be a string, got {name!r}", "name the task")
    file_topology = None
    if "synthetic" in raw:
        workload = _synthetic(raw["synthetic"], name)
    elif "workload" in raw:
        if not isinstance(raw["workload"], str):
            raise InputError(
                "workload",
                f"must be a file path or a bundled workload's name, got {raw['workload']!r}",
                'e.g. "criteo_kaggle"',
            )
        workload, file_topology = load_workload_or_preset(raw["workload"])
        if "batch_size" in raw:  # the same tables at another per-device batch
            workload = replace(workload, batch_size=_int_field(raw, "batch_size", None, 1), name=name)
    else:
        raise InputError(
            "workload", "a task needs 'workload' (a file or preset) or 'synthetic'", f"e.g. {SYNTHETIC_EXAMPLE}"
        )
    if file_topology is not None and not TOPOLOGY_FIELDS & raw.keys():
        return Task(name, workload, file_topology)  # the workload file's own: its hosts and per-device memory too
    hosts = _int_field(raw, "num_hosts", 1, 1)
    if "devices_per_host" in raw:  # a cluster: num_devices follows (and must agree if given too)
        per_host = _int_field(raw, "devices_per_host", None, 1)
        devices = _int_field(raw, "num_devices", hosts * per_host, 1)
    else:  # num_devices over num_hosts hosts (one host by default)
        per_host = 0
        devices = _int_field(raw, "num_devices", file_topology.num_devices if file_topology else None, 1)
    memory = raw.get("device_memory_gb")
    if memory is None and file_topology is not None and "memory_slack" not in raw:
        memory = file_topology.device_memory_gb  # the workload file's own
    if memory is None:
        slack = raw.get("memory_slack", 1.3)
        if not is_number(slack) or slack <= 0:
            raise InputError("memory_slack", f"must be a number > 0, got {slack!r}", "e.g. 1.3 (1.3 x an even share)")
        memory = memory_for(workload, devices, slack)
    caps: tuple[float, ...] = ()
    if isinstance(memory, list):  # one value per device, in rank order (``Topology`` checks each)
        caps = tuple(memory)
        memory = max((c for c in caps if is_number(c)), default=0.0)
    bandwidths = (INTRA_HOST_BW_GBPS, INTER_HOST_BW_GBPS)
    if file_topology is not None:  # the workload file's links
        bandwidths = (file_topology.intra_host_bw_gbps, file_topology.inter_host_bw_gbps)
    return Task(name, workload, Topology(devices, memory, hosts, per_host, *bandwidths, caps))


def load_suite(ref: str | Path) -> tuple[str, list[Task]]:
    """A suite file, or the name of a bundled suite (``default``)."""
    path = Path(ref)
    if not path.exists():
        bundled = Path(__file__).parent / "suites" / f"{ref}.json"
        if not bundled.exists():
            raise InputError(
                "suite",
                f"no suite file or bundled suite {str(ref)!r}",
                f"pass a suite JSON file or one of {', '.join(sorted(p.stem for p in bundled.parent.glob('*.json')))}",
            )
        path = bundled
    data = read_json_file(path, "suite")
    if not isinstance(data, dict):
        raise InputError("suite", f"must be a JSON object with 'tasks', got {type(data).__name__}", where=str(path))
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise InputError(
            "tasks", "must be a non-empty list of tasks", f'e.g. "tasks": [{SYNTHETIC_EXAMPLE}]', where=str(path)
        )
    tasks = []
    for i, raw in enumerate(raw_tasks):
        try:
            tasks.append(_task(raw))
        except InputError as error:
            raise error.located(f"{path}: tasks[{i}]") from None
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise InputError(
            "name",
            f"must be a plain folder name (letters, digits, _ . -), got {name!r}",
            "the report is written to --out/<name>/",
            where=str(path),
        )
    return name, tasks

"""The workload file format (JSON), with TorchRec's field names.

```json
{"name": "criteo", "batch_size": 2048,
 "tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 64,
             "pooling_factor": 2.0, "zipf_alpha": 1.0}],
 "topology": {"num_devices": 8, "device_memory_gb": 16}}
```

A cluster: ``"topology": {"num_hosts": 2, "devices_per_host": 4, "device_memory_gb": 16}``, with
``device_memory_gb`` optionally one value per device (rank order) and ``intra_host_bw_gbps`` /
``inter_host_bw_gbps`` in GiB/s (default TorchRec's 600 and 12.5).

Only ``tables[].name``, ``num_embeddings`` and ``embedding_dim`` are required; see the README for
every field and its default. Errors name the table and the field.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from autoshard.core.constraints import TableConstraints, constraints_from_dict
from autoshard.core.errors import InputError
from autoshard.core.types import Optimizer, Table, Topology, Workload, is_int

TABLE_FIELDS = tuple(f.name for f in fields(Table) if f.name != "sharding_type")  # a plan's, not a table's
TABLE_REQUIRED = ("name", "num_embeddings", "embedding_dim")
WORKLOAD_FIELDS = ("name", "batch_size", "tables", "topology", "constraints", "placement", "source", "notes")
TOPOLOGY_FIELDS = (
    "num_devices",
    "num_hosts",
    "devices_per_host",
    "device_memory_gb",
    "intra_host_bw_gbps",
    "inter_host_bw_gbps",
)


def _check_keys(data: Any, allowed: tuple[str, ...], required: tuple[str, ...], what: str) -> None:
    if not isinstance(data, dict):
        raise InputError(what, f"must be a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            raise InputError(str(key), "unknown field", f"use one of {', '.join(allowed)}")
    for key in required:
        if key not in data:
            raise InputError(key, "is required", f"add {key!r}")


def table_from_dict(data: Any) -> Table:
    _check_keys(data, TABLE_FIELDS, TABLE_REQUIRED, "table")
    values = dict(data)
    if "optimizer" in values:
        try:
            values["optimizer"] = Optimizer(values["optimizer"])
        except ValueError:
            raise InputError(
                "optimizer",
                f"unknown optimizer {values['optimizer']!r}",
                f"use one of {', '.join(o.value for o in Optimizer)}",
            ) from None
    return Table(**values)


def table_to_dict(table: Table) -> dict[str, Any]:
    return {
        "name": table.name,
        "num_embeddings": table.num_embeddings,
        "embedding_dim": table.embedding_dim,
        "pooling_factor": table.pooling_factor,
        "zipf_alpha": table.zipf_alpha,
        "bytes_per_element": table.bytes_per_element,
        "optimizer": table.optimizer.value,
    }


def topology_from_dict(data: Any) -> Topology:
    """``{"num_devices", "device_memory_gb"}`` (one host), or ``{"num_hosts", "devices_per_host",
    "device_memory_gb"}`` (``num_devices`` optional then, and must agree); ``device_memory_gb`` one
    value or a list of one per device; the bandwidths (GiB/s) optional. Absent = ``null``."""
    try:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if v is not None}
        _check_keys(data, TOPOLOGY_FIELDS, ("device_memory_gb",), "topology")
        if "num_devices" not in data and "devices_per_host" not in data:
            raise InputError(
                "num_devices",
                "is required (or num_hosts and devices_per_host)",
                "add 'num_devices' for one host, or 'num_hosts' and 'devices_per_host'",
            )
        values = dict(data)
        for key in ("num_hosts", "devices_per_host"):  # 0 would mean "derive it" to ``Topology``
            if key in values and not (is_int(values[key]) and values[key] >= 1):
                raise InputError(key, f"must be an integer >= 1, got {values[key]!r}", f"set {key}")
        if isinstance(values["device_memory_gb"], list):
            values["device_memory_gb"] = tuple(values["device_memory_gb"])
        if "num_devices" not in values:
            values["num_devices"] = values.get("num_hosts", 1) * values["devices_per_host"]
        return Topology(**values)
    except InputError as error:
        raise error.located("topology") from None


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """The file's ``topology`` object: ``{"num_devices", "device_memory_gb"}`` for one host with
    TorchRec's bandwidths, as always; the cluster fields where they are not the defaults."""
    return topology.to_dict()


def workload_from_dict(data: Any) -> tuple[Workload, Topology | None]:
    """A workload and the topology the file names, if any."""
    _check_keys(data, WORKLOAD_FIELDS, ("tables",), "workload")
    raw_tables = data["tables"]
    if not isinstance(raw_tables, list) or not raw_tables:
        raise InputError("tables", "must be a non-empty list of tables", "add at least one table")
    tables = []
    for i, raw in enumerate(raw_tables):
        name = raw.get("name") if isinstance(raw, dict) else None
        try:
            tables.append(table_from_dict(raw))
        except InputError as error:
            raise error.located(f"tables[{i}]" + (f" {name!r}" if name else "")) from None
        except TypeError as error:  # a value of the wrong JSON type deep inside
            raise InputError("table", str(error), where=f"tables[{i}]") from None
    name = data.get("name", "workload")
    if not isinstance(name, str) or not name:
        raise InputError("name", f"must be a non-empty string, got {name!r}", 'name the workload, e.g. "ranking"')
    constraints = constraints_from_dict(data.get("constraints"), data.get("placement"), {t.name for t in tables})
    workload = Workload(tuple(tables), data.get("batch_size", 2048), name, constraints)  # checks the batch size
    pooled = tuple(_with_pooling(t, constraints.of(t.name), workload.batch_size) for t in tables)
    workload = replace(workload, tables=pooled)  # the constraints' pooling factors win
    topology = topology_from_dict(data["topology"]) if data.get("topology") is not None else None
    return workload, topology


def _with_pooling(table: Table, constraints: TableConstraints | None, batch_size: int) -> Table:
    """``table`` with its constraints' pooling factor (TorchRec's lookups per sample,
    ``pooling_factor_of``), when they give one."""
    if constraints is None:
        return table
    try:
        pooling = constraints.pooling_factor(batch_size)
    except InputError as error:
        raise error.located(f"constraints.{table.name}") from None
    return table if pooling is None else replace(table, pooling_factor=pooling)


def workload_to_dict(workload: Workload, topology: Topology | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": workload.name,
        "batch_size": workload.batch_size,
        "tables": [table_to_dict(t) for t in workload.tables],
        **workload.constraints.to_dict(),
    }
    if topology is not None:
        out["topology"] = topology_to_dict(topology)
    return out


def read_json_file(path: str | Path, what: str = "path") -> Any:
    """A JSON file's content; a path that is missing, a folder, not UTF-8 or not JSON is an
    ``InputError`` naming ``what`` (the option or field that gave the path) and the fix."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(what, f"no such file: {path}", "check the path") from None
    except IsADirectoryError:
        raise InputError(what, f"{path} is a folder, not a JSON file", "pass the file inside it") from None
    except UnicodeDecodeError:
        raise InputError(what, f"{path} is not a UTF-8 text file", "pass a JSON file") from None
    except json.JSONDecodeError as error:
        raise InputError(
            "json", f"not valid JSON: {error.msg} at line {error.lineno}", "fix the JSON syntax", where=str(path)
        ) from None


def load_workload(path: str | Path) -> tuple[Workload, Topology | None]:
    """Read a workload file; every error names the file, the table and the field."""
    data = read_json_file(path)
    try:
        return workload_from_dict(data)
    except InputError as error:
        raise error.located(str(path)) from None


def save_workload(path: str | Path, workload: Workload, topology: Topology | None = None) -> None:
    Path(path).write_text(json.dumps(workload_to_dict(workload, topology), indent=1) + "\n")

"""The workload file format (JSON), with TorchRec's field names.

```json
{"name": "criteo", "batch_size": 2048,
 "tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 64,
             "pooling_factor": 2.0, "zipf_alpha": 1.0}],
 "topology": {"num_devices": 8, "device_memory_gb": 16}}
```

Only ``tables[].name``, ``num_embeddings`` and ``embedding_dim`` are required; see the README for
every field and its default. Errors name the table and the field.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.types import Optimizer, Table, Topology, Workload

TABLE_FIELDS = tuple(f.name for f in fields(Table))
TABLE_REQUIRED = ("name", "num_embeddings", "embedding_dim")
WORKLOAD_FIELDS = ("name", "batch_size", "tables", "topology", "source", "notes")
TOPOLOGY_FIELDS = tuple(f.name for f in fields(Topology))


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
    try:
        _check_keys(data, TOPOLOGY_FIELDS, TOPOLOGY_FIELDS, "topology")
        return Topology(**data)
    except InputError as error:
        raise error.located("topology") from None


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
    workload = Workload(tuple(tables), data.get("batch_size", 2048), name)
    topology = topology_from_dict(data["topology"]) if data.get("topology") is not None else None
    return workload, topology


def workload_to_dict(workload: Workload, topology: Topology | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": workload.name,
        "batch_size": workload.batch_size,
        "tables": [table_to_dict(t) for t in workload.tables],
    }
    if topology is not None:
        out["topology"] = {"num_devices": topology.num_devices, "device_memory_gb": topology.device_memory_gb}
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

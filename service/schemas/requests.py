"""What clients send. The workload uses the workload file format (TorchRec's field names).

These models describe the shape of a request (types, defaults, documentation, examples). The
rules a value must follow (rows >= 1, a pooling factor > 0, unique table names...) are enforced
in one place, ``autoshard.types`` via ``autoshard.workload_file``, which the route applies to the
parsed body; ``_doc`` only shows them in the OpenAPI schema (pydantic does not check them). The
upper bounds (``le=``) are the service's own guards, checked here, so that no value can overflow
a float or a tensor size.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autoshard.types import (MAX_BATCH, MAX_DEVICE_GB, MAX_DIM, MAX_POOLING, MAX_ROWS, MAX_ZIPF_ALPHA, Optimizer,
                             Table, Workload)

_TABLE_DEFAULTS = {f.name: f.default for f in fields(Table) if f.default is not MISSING}
_WORKLOAD_DEFAULTS = {f.name: f.default for f in fields(Workload) if f.default is not MISSING}

MAX_PLANNERS = 64

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def _doc(**constraints: Any) -> dict[str, Any]:
    """JSON-schema constraints shown in the docs (and to generated clients), enforced by
    ``autoshard.types``, not by pydantic."""
    return {"json_schema_extra": constraints}

EXAMPLE_TABLES = [
    {"name": "user_id", "num_embeddings": 4_000_000, "embedding_dim": 128, "pooling_factor": 1.0,
     "zipf_alpha": 1.1},
    {"name": "item_id", "num_embeddings": 1_000_000, "embedding_dim": 64, "pooling_factor": 20.0,
     "zipf_alpha": 0.9, "optimizer": "sgd"},
    {"name": "category", "num_embeddings": 1_000, "embedding_dim": 16},
    {"name": "history", "num_embeddings": 200_000, "embedding_dim": 64, "pooling_factor": 50.0,
     "bytes_per_element": 4},
]  # fp32 and SGD: what the shipped cost model was trained on (others are a 422 with it)
EXAMPLE_REQUEST: dict[str, Any] = {
    "workload": {"name": "example", "batch_size": 2048, "tables": EXAMPLE_TABLES},
    "topology": {"num_devices": 2, "device_memory_gb": 4},
    "planners": None,
}


class TableIn(BaseModel):
    """One embedding table, as in a workload file. Memory is derived, never sent."""

    model_config = _STRICT

    name: str = Field(description="Unique table name (TorchRec: EmbeddingBagConfig.name).", max_length=512,
                      **_doc(minLength=1, pattern=r"\S"))
    num_embeddings: int = Field(description="Rows, an integer >= 1.", le=MAX_ROWS, **_doc(minimum=1))
    embedding_dim: int = Field(description="Dimension, an integer >= 1.", le=MAX_DIM, **_doc(minimum=1))
    pooling_factor: float = Field(_TABLE_DEFAULTS["pooling_factor"], le=MAX_POOLING,
                                  description="Mean lookups per sample, > 0 (1 for one-hot features).",
                                  **_doc(exclusiveMinimum=0))
    zipf_alpha: float = Field(_TABLE_DEFAULTS["zipf_alpha"],
                              description="Access skew: 0 uniform, about 1 production-like, at most 3.",
                              **_doc(minimum=0, maximum=MAX_ZIPF_ALPHA))
    bytes_per_element: int = Field(_TABLE_DEFAULTS["bytes_per_element"],
                                   description="1, 2, 4 (fp32) or 8. The profile's cost model must have been "
                                               "trained on it (the shipped one: 4 only), else 422.",
                                   **_doc(enum=[1, 2, 4, 8]))
    optimizer: Optimizer = Field(_TABLE_DEFAULTS["optimizer"],
                                 description="sgd, rowwise_adagrad (+4 B/row state) or adagrad (+dim x 4 B/row). "
                                             "The profile's cost model must have been trained on it (the "
                                             "shipped one: sgd only), else 422.")


class TopologyIn(BaseModel):
    """Identical devices: how many, and the memory each offers to embedding tables."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False,
                              json_schema_extra={"examples": [{"num_devices": 8, "device_memory_gb": 16}]})

    num_devices: int = Field(description="Number of devices, >= 1 (the service caps it, see AUTOSHARD_MAX_DEVICES).",
                             **_doc(minimum=1))
    device_memory_gb: float = Field(description="Memory per device for embeddings, GiB, > 0.",
                                    le=MAX_DEVICE_GB, **_doc(exclusiveMinimum=0))


class WorkloadIn(BaseModel):
    """A workload file's content: its tables and batch size (and optionally a topology)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False,
                              json_schema_extra={"examples": [EXAMPLE_REQUEST["workload"]]})

    name: str = Field(_WORKLOAD_DEFAULTS["name"], max_length=512)
    batch_size: int = Field(_WORKLOAD_DEFAULTS["batch_size"], le=MAX_BATCH,
                            description="Samples per iteration each device processes, >= 1.",
                            **_doc(minimum=1))
    tables: list[TableIn] = Field(description="At least one table; names unique (the service caps "
                                              "the count, see AUTOSHARD_MAX_TABLES).",
                                  **_doc(minItems=1))
    topology: TopologyIn | None = Field(None, description="Used when the request has no top-level topology.")
    source: str | None = Field(None, description="Free text: where the workload comes from.")
    notes: str | None = Field(None, description="Free text.")

    def to_file_dict(self) -> dict[str, Any]:
        """The workload file dict, with only the fields the client sent (defaults come from
        ``autoshard.types``)."""
        return self.model_dump(mode="json", exclude_unset=True)


class PlanRequest(BaseModel):
    """Plan a workload onto a topology with one or several planners, side by side."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False,
                              json_schema_extra={"examples": [EXAMPLE_REQUEST]})

    workload: WorkloadIn
    topology: TopologyIn | None = Field(None, description="Required unless the workload holds one.")
    planners: list[str] | None = Field(
        None, max_length=MAX_PLANNERS,
        description="Planner names (GET /v1/planners). Default: every planner the service loaded "
                    "except torchrec, which runs when asked.")
    profile: str | None = Field(None, max_length=200,
                                description="Cost model profile (GET /v1/profiles); default: the service's default.")
    allow_column_split: bool | None = Field(
        None, description="Which planners may split costly or large tables column-wise. null (the default): the "
                          "cost-model planners (cost_greedy, rl, rl+refine keep a split plan only where it is "
                          "predicted more than 10% lower) and TorchRec's; the heuristics place whole tables, as the "
                          "classic baselines do. true: every planner; false: none.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the random planner.")
    time_budget_s: float | None = Field(
        None, gt=0, le=3600,
        description="Planning time budget; the service's own budget (AUTOSHARD_PLAN_TIMEOUT_S) caps it.")


Format = Literal["json", "torchrec"]

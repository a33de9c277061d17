"""What clients send. The workload uses the workload file format (TorchRec's field names).

These models describe the shape of a request (types, defaults, documentation, examples). The
rules a value must follow (rows >= 1, a pooling factor > 0, unique table names...) are enforced
in one place, ``autoshard.core.types`` via ``autoshard.core.workload_file``, which the route applies to the
parsed body; ``_doc`` only shows them in the OpenAPI schema (pydantic does not check them). The
upper bounds (``le=``) are the service's own guards, checked here, so that no value can overflow
a float or a tensor size.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autoshard.core.types import (
    MAX_BATCH,
    MAX_DEVICE_GB,
    MAX_DEVICES,
    MAX_DIM,
    MAX_POOLING,
    MAX_ROWS,
    MAX_ZIPF_ALPHA,
    Optimizer,
    Table,
    Workload,
)
from autoshard.profiles import MAX_DDR_CAP_GB

_TABLE_DEFAULTS = {f.name: f.default for f in fields(Table) if f.default is not MISSING}
_WORKLOAD_DEFAULTS = {f.name: f.default for f in fields(Workload) if f.default is not MISSING}

MAX_PLANNERS = 64

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def _doc(**constraints: Any) -> dict[str, Any]:
    """JSON-schema constraints shown in the docs (and to generated clients), enforced by
    ``autoshard.core.types``, not by pydantic."""
    return {"json_schema_extra": constraints}


EXAMPLE_TABLES = [
    {"name": "user_id", "num_embeddings": 4_000_000, "embedding_dim": 128, "pooling_factor": 1.0, "zipf_alpha": 1.1},
    {
        "name": "item_id",
        "num_embeddings": 1_000_000,
        "embedding_dim": 64,
        "pooling_factor": 20.0,
        "zipf_alpha": 0.9,
        "optimizer": "sgd",
    },
    {"name": "category", "num_embeddings": 1_000, "embedding_dim": 16},
    {"name": "history", "num_embeddings": 200_000, "embedding_dim": 64, "pooling_factor": 50.0, "bytes_per_element": 4},
]  # fp32 and SGD: what the shipped cost model was trained on (others are a 422 with it)
EXAMPLE_REQUEST: dict[str, Any] = {
    "workload": {"name": "example", "batch_size": 2048, "tables": EXAMPLE_TABLES},
    "topology": {"num_devices": 2, "device_memory_gb": 4},
    "planners": None,
}


Profile = Annotated[
    str | None,
    Field(
        max_length=200,
        description="Cost model profile (GET /v1/profiles), or `torchrec`: TorchRec's own estimators for "
        "`compute_device`; default: the service's default.",
    ),
]
ComputeDevice = Annotated[
    Literal["cuda", "cpu"] | None,
    Field(
        description="With profile `torchrec`: the device TorchRec's estimators price, `cuda` (the default) or "
        "`cpu` (its CPU perf model, memory as DDR). A trained profile prices the device it was traced on: "
        "given with one, a 422.",
    ),
]
DdrCapGb = Annotated[
    float | None,
    Field(
        gt=0,
        le=MAX_DDR_CAP_GB,
        description="With profile `torchrec` and compute_device `cuda`: each rank's host memory (DDR) in GiB, "
        "TorchRec's Topology ddr_cap, which holds UVM tables' weights (default: TorchRec's 128 GiB); a plan past "
        "it is refused. Given with another profile, or on `cpu` (where the topology's device memory is the host "
        "memory), a 422.",
    ),
]


class TableIn(BaseModel):
    """One embedding table, as in a workload file. Memory is derived, never sent."""

    model_config = _STRICT

    name: str = Field(
        description="Unique table name (TorchRec: EmbeddingBagConfig.name).",
        max_length=512,
        **_doc(minLength=1, pattern=r"\S"),
    )
    num_embeddings: int = Field(description="Rows, an integer >= 1.", le=MAX_ROWS, **_doc(minimum=1))
    embedding_dim: int = Field(description="Dimension, an integer >= 1.", le=MAX_DIM, **_doc(minimum=1))
    pooling_factor: float = Field(
        _TABLE_DEFAULTS["pooling_factor"],
        le=MAX_POOLING,
        description="Mean lookups per sample, > 0 (1 for one-hot features).",
        **_doc(exclusiveMinimum=0),
    )
    zipf_alpha: float = Field(
        _TABLE_DEFAULTS["zipf_alpha"],
        description="Access skew: 0 uniform, about 1 production-like, at most 3.",
        **_doc(minimum=0, maximum=MAX_ZIPF_ALPHA),
    )
    bytes_per_element: int = Field(
        _TABLE_DEFAULTS["bytes_per_element"],
        description="1, 2 (fp16), 4 (fp32) or 8. The profile's cost model must have been "
        "trained on it (the shipped CPU profiles: 2 or 4; the GPU profile: 4), else 422.",
        **_doc(enum=[1, 2, 4, 8]),
    )
    optimizer: Optimizer = Field(
        _TABLE_DEFAULTS["optimizer"],
        description="sgd, rowwise_adagrad (+4 B/row state) or adagrad (+dim x 4 B/row). "
        "The profile's cost model must have been trained on it (the shipped CPU "
        "profiles: sgd or rowwise_adagrad; the GPU profile: sgd), else 422.",
    )


class TopologyIn(BaseModel):
    """The devices: ``num_devices`` on one host, or ``num_hosts`` x ``devices_per_host`` (ranks fill
    host 0 first), and the memory each offers to embedding tables (one value, or one per rank).
    Contradictions (``num_hosts * devices_per_host != num_devices``, a per-device list of another
    length) are 422 naming the field."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"num_devices": 8, "device_memory_gb": 16},
                {"num_hosts": 2, "devices_per_host": 4, "device_memory_gb": 16},
            ]
        },
    )

    num_devices: int | None = Field(
        None,
        description="Number of devices, >= 1: one host (the service caps it, see AUTOSHARD_MAX_DEVICES). "
        "Optional with num_hosts and devices_per_host; given with them, it must equal their product.",
        **_doc(minimum=1),
    )
    num_hosts: int | None = Field(None, description="Hosts, >= 1 (default 1).", **_doc(minimum=1))
    devices_per_host: int | None = Field(
        None, description="Devices in each host, >= 1 (default num_devices / num_hosts).", **_doc(minimum=1)
    )
    device_memory_gb: float | list[float] = Field(
        description="Memory per device for embeddings, GiB, > 0 (at most 10^6): one value for every device, or a "
        "list of one per rank (num_hosts x devices_per_host of them)."
    )
    intra_host_bw_gbps: float | None = Field(
        None,
        description="Bandwidth between the devices of a host, GiB/s (default TorchRec's 600).",
        **_doc(exclusiveMinimum=0),
    )
    inter_host_bw_gbps: float | None = Field(
        None, description="Bandwidth between hosts, GiB/s (default TorchRec's 12.5).", **_doc(exclusiveMinimum=0)
    )


class WorkloadIn(BaseModel):
    """A workload file's content: its tables and batch size (and optionally a topology)."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, json_schema_extra={"examples": [EXAMPLE_REQUEST["workload"]]}
    )

    name: str = Field(_WORKLOAD_DEFAULTS["name"], max_length=512)
    batch_size: int = Field(
        _WORKLOAD_DEFAULTS["batch_size"],
        le=MAX_BATCH,
        description=(
            "Samples per rank per iteration (TorchRec's batch_size), >= 1: a sharded table serves every "
            "rank's samples, batch_size x ranks bags; a data-parallel replica its own rank's."
        ),
        **_doc(minimum=1),
    )
    tables: list[TableIn] = Field(
        description="At least one table; names unique (the service caps the count, see AUTOSHARD_MAX_TABLES).",
        **_doc(minItems=1),
    )
    topology: TopologyIn | None = Field(None, description="Used when the request has no top-level topology.")
    constraints: dict[str, dict[str, Any]] | None = Field(
        None,
        description="Per table name, TorchRec's ParameterConstraints fields: sharding_types, compute_kernels "
        "('fused'; 'dense' for data_parallel), min_partition, pooling_factors, num_poolings, batch_sizes, "
        "is_weighted, feature_names.",
    )
    placement: list[dict[str, Any]] | None = Field(
        None,
        description='Placement constraints: {"pin": {"table", "ranks" or "hosts"}}, {"colocate": [tables], '
        '"level": "device" or "host"}, {"apart": [tables]}.',
    )
    source: str | None = Field(None, description="Free text: where the workload comes from.")
    notes: str | None = Field(None, description="Free text.")

    def to_file_dict(self) -> dict[str, Any]:
        """The workload file dict, with only the fields the client sent (defaults come from
        ``autoshard.core.types``)."""
        return self.model_dump(mode="json", exclude_unset=True)


class PlanRequest(BaseModel):
    """Plan a workload onto a topology with one or several planners, side by side."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra={"examples": [EXAMPLE_REQUEST]})

    workload: WorkloadIn
    topology: TopologyIn | None = Field(None, description="Required unless the workload holds one.")
    planners: list[str] | None = Field(
        None,
        max_length=MAX_PLANNERS,
        description="Planner names (GET /v1/planners). Default: every planner the service loaded "
        "except torchrec, which runs when asked.",
    )
    profile: Profile = None
    compute_device: ComputeDevice = None
    ddr_cap_gb: DdrCapGb = None
    allow_column_split: bool | None = Field(
        None,
        description="Which planners may split costly or large tables column-wise. null (the default): the "
        "cost-model planners (cost_greedy, rl, rl+refine keep a split plan only where it is "
        "predicted more than 10% lower) and TorchRec's; the heuristics place whole tables, as the "
        "classic baselines do. true: every planner; false: none.",
    )
    sharding_types: list[str] | None = Field(
        None,
        max_length=7,
        description="Sharding types the planners may choose, TorchRec's names (data_parallel, table_wise, "
        "column_wise, row_wise, table_row_wise, table_column_wise, grid_shard). null (the default): all of them; "
        "column_wise also follows allow_column_split.",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the random planner.")
    time_budget_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="Planning time budget; the service's own budget (AUTOSHARD_PLAN_TIMEOUT_S) caps it.",
    )
    stats: bool = Field(
        False,
        description="Add the best plan's stats (per rank, per table, balance, critical path, memory pressure, "
        "what makes the max) as its `stats`: one more cost-model call, and a larger answer.",
    )


Format = Literal["json", "torchrec"]


MAX_BUDGETS = 8
MAX_TABLES_BOUND = 10**6  # a budget of moves beyond any workload's shards


class PlacedShardIn(BaseModel):
    """Where one shard of a table lives in the current plan: its columns and, for the row-cutting
    types (row_wise, table_row_wise, grid_shard), its rows."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=0, le=MAX_DEVICES, description="The device (TorchRec rank) that holds it.")
    row_offset: int = Field(0, ge=0, description="Its first row (read for the types that cut rows).")
    rows: int | None = Field(None, ge=0, description="Its rows (read for the types that cut rows; 0: an empty block).")
    column_offset: int = Field(ge=0, le=MAX_DIM, description="Its first column.")
    columns: int = Field(ge=1, le=MAX_DIM, description="Its width.")


class PlacedTableIn(BaseModel):
    """A table of the current plan: its shards (a whole table is one shard of every column), and,
    as a TorchRec export or a re-plan's ``placement`` gives them, its ``sharding_type`` (default
    table_wise; any of TorchRec's), ``compute_kernel`` (default fused) and ``cache_params``. Its
    other fields (ranks, pooling_factor) may come along, and are not read. A re-plan keeps its
    table- and column-wise shards (they may move), and keeps a row-wise, table-row-wise, grid or
    data-parallel table where it is while that layout holds on the topology (else it places the
    table anew); with ``profile`` torchrec each kept table runs its ``compute_kernel``."""

    model_config = ConfigDict(extra="allow")

    shards: list[PlacedShardIn] = Field(min_length=1, max_length=MAX_DEVICES)


class CurrentPlanIn(BaseModel):
    """The plan running today: a re-plan's `placement` from this service, or the file `autoshard plan
    --format torchrec --out` writes (its other fields are not read)."""

    model_config = ConfigDict(extra="allow")

    world_size: int = Field(ge=1, le=MAX_DEVICES, description="The plan's number of devices.")
    tables: dict[str, PlacedTableIn] = Field(description="Per table name, where its shards are.")


class ReplanRequest(BaseModel):
    """Re-plan the plan running today for a changed workload, moving few of its shards."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "workload": EXAMPLE_REQUEST["workload"],
                    "topology": EXAMPLE_REQUEST["topology"],
                    "current_plan": {
                        "world_size": 2,
                        "tables": {
                            "user_id": {"shards": [{"rank": 0, "column_offset": 0, "columns": 128}]},
                            "item_id": {"shards": [{"rank": 1, "column_offset": 0, "columns": 64}]},
                        },
                    },
                    "max_moves": [1, 2],
                }
            ]
        },
    )

    workload: WorkloadIn = Field(description="The workload as it is now.")
    topology: TopologyIn | None = Field(None, description="Required unless the workload holds one.")
    current_plan: CurrentPlanIn
    max_moves: list[Annotated[int, Field(ge=0, le=MAX_TABLES_BOUND)]] = Field(
        [4],
        min_length=1,
        max_length=MAX_BUDGETS,
        description="Budgets: how many of the current plan's shards may move to another device (tables new to "
        "it are placed freely); one re-plan each.",
    )
    max_moved_gb: float | None = Field(
        None,
        ge=0,
        le=MAX_DEVICE_GB * MAX_DEVICES,
        description="And at most this many GiB of them (weights and optimizer state: "
        "what a reshard copies), for every budget; null: any.",
    )
    profile: Profile = None
    compute_device: ComputeDevice = None
    ddr_cap_gb: DdrCapGb = None
    allow_column_split: bool = Field(
        True,
        description="Whether new tables (and cost_greedy's plan from scratch) "
        "may split column-wise where the model predicts more than "
        "10% gain; the current plan's shards stay as they are.",
    )
    time_budget_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="Planning time budget; the service's own budget (AUTOSHARD_PLAN_TIMEOUT_S) caps it.",
    )

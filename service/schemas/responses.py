"""What the service answers. Plans are built by ``autoshard.planners.report`` (shared with the
CLI); these models document that JSON in the OpenAPI schema and let clients validate it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autoshard.core.types import INTER_HOST_BW_GBPS, INTRA_HOST_BW_GBPS


class ShardOut(BaseModel):
    table: str
    sharding_type: str = Field(
        "table_wise",
        description="TorchRec's sharding type of the table: data_parallel, table_wise, column_wise, row_wise, "
        "table_row_wise, table_column_wise or grid_shard.",
    )
    row_offset: int = Field(0, description="Its first row.")
    rows: int = Field(0, description="Its rows (a data-parallel replica: all of them).")
    column_offset: int
    columns: int


class DeviceOut(BaseModel):
    host: int = Field(0, description="The device's host: rank // devices_per_host (0 on one host).")
    tables: list[str] = Field(
        description="Table names; a column shard reads 'name[a:b]', a row block 'name[ra:rb]' "
        "('name[ra:rb,a:b]' in a grid), a data-parallel replica 'name[dp]'."
    )
    shards: list[ShardOut] = Field(description="The same, structured: table, sharding type, rows and columns.")
    cost_ms: float = Field(description="Predicted cost of the device (see cost_unit).")
    compute_ms: float = Field(description="The part of cost_ms that is the device's own compute.")
    communication_ms: float = Field(
        0.0, description="The part of cost_ms that is its all-to-all (0 where the profile has no communication model)."
    )
    communication_by_tier_ms: dict[Literal["intra", "inter"], float] | None = Field(
        None,
        description="communication_ms per link tier: intra (between ranks of the device's host) and inter "
        "(to other hosts); they add up to communication_ms. Null where the communication model prices one "
        "figure for both tiers across hosts (an old one-figure profile).",
    )
    memory_bytes: int


class TorchRecShardOut(BaseModel):
    rank: int
    row_offset: int = Field(0, description="Its first row.")
    rows: int = Field(0, description="Its rows (TorchRec lists empty row blocks too: 0).")
    column_offset: int
    columns: int


class TorchRecTableOut(BaseModel):
    sharding_type: str
    ranks: list[int]
    compute_kernel: str
    pooling_factor: float
    shards: list[TorchRecShardOut]


class RankStatsOut(BaseModel):
    rank: int
    host: int
    cost_ms: float = Field(description="The rank's predicted cost: compute_ms + communication_ms (see cost_unit).")
    compute_ms: float = Field(
        description="The cost model's prediction of the rank's whole set: forward, backward and the update "
        "together (the model is not split into forward and backward)."
    )
    communication_ms: float = Field(description="Its all-to-all (0 without a communication model).")
    memory_bytes: int = Field(description="Its shards' weights and optimizer state.")
    memory_cap_bytes: int = Field(description="Its device's memory for embeddings.")
    memory_share: float = Field(description="memory_bytes / memory_cap_bytes.")
    input_bytes: float = Field(
        description="Ids in an iteration: B x pooling factor x lookup share x 8 bytes, summed over its shards."
    )
    output_bytes: float = Field(
        description="Pooled outputs an iteration: B x width x 4 bytes per shard (a data-parallel replica: "
        "B / world size samples)."
    )
    shards: dict[str, int] = Field(description="Its shards per sharding type (TorchRec's names).")


class TableStatsOut(BaseModel):
    table: str
    sharding_type: str = Field(description="TorchRec's sharding type of the table.")
    ranks: list[int] = Field(description="The ranks of its shards, ascending.")
    shards: int
    cost_alone_ms: float = Field(
        description="compute_alone_ms + communication_ms: its shards' costs alone, summed. It ranks tables; "
        "it does not split a rank's cost (costs do not add)."
    )
    compute_alone_ms: float = Field(
        description="Each shard priced by the cost model as the only table on a device, summed."
    )
    communication_ms: float = Field(
        description="What its shards add to their ranks' all-to-alls (a rank pays the latency once)."
    )
    memory_bytes: int = Field(description="Weights and optimizer state, every shard together.")
    pooling_factor: float


class ImbalanceOut(BaseModel):
    max_over_mean: float = Field(description="max / mean over ranks - 1.")
    total_variation: float = Field(description="TorchRec's: max |p_i - 1/k| of the distribution over k ranks.")
    kl_divergence: float = Field(description="TorchRec's: KL divergence from even / log k (0 even, 1 on one rank).")


class PlanImbalanceOut(BaseModel):
    cost: ImbalanceOut
    memory: ImbalanceOut


class MaxRankOut(BaseModel):
    rank: int = Field(description="The costliest rank (the lowest of those tied).")
    host: int
    cost_ms: float = Field(description="Its cost: the plan's predicted max.")
    mean_cost_ms: float = Field(description="The mean over ranks.")
    expected_max_ms: float | None = Field(
        None, description="The plan's expected max under the model's measured error (null without it)."
    )


class CriticalPathOut(BaseModel):
    rank: int
    compute_ms: float
    communication_ms: float
    total_ms: float = Field(
        description="The max rank's compute plus its own all-to-all (= the predicted max): each rank computes, "
        "then communicates, and ranks wait for the slowest."
    )
    sum_of_maxima_ms: float = Field(
        description="The max compute over ranks plus the max communication over ranks: the iteration if "
        "every phase were synchronised, as TorchRec's critical path assumes."
    )


class MemoryPressureOut(BaseModel):
    rank: int
    host: int
    memory_bytes: int
    memory_cap_bytes: int
    memory_share: float


class MaxRankShardOut(BaseModel):
    shard: str = Field(description="The shard's label ('name', 'name[a:b]', 'name[ra:rb]', 'name[dp]').")
    table: str
    sharding_type: str
    cost_alone_ms: float = Field(description="Its cost alone: compute alone plus what it adds to the all-to-all.")
    share_of_rank: float = Field(description="cost_alone_ms / the max rank's cost (shares need not sum to 1).")


class PlanStatsOut(BaseModel):
    """A plan's stats (``autoshard.planners.stats``), laid out like TorchRec's ``EmbeddingStats``;
    costs are the learned model's predictions (docs/concepts.md, "Reading a plan's stats")."""

    planner: str
    cost_unit: str
    batch_size: int
    ranks: list[RankStatsOut]
    tables: list[TableStatsOut] = Field(description="Per table, in the workload's order.")
    imbalance: PlanImbalanceOut
    max: MaxRankOut
    critical_path: CriticalPathOut
    nearest_memory_cap: list[MemoryPressureOut] = Field(description="The 3 ranks with the highest memory_share.")
    max_rank_shards: list[MaxRankShardOut] = Field(description="The max rank's shards, costliest alone first.")


class PlanOut(BaseModel):
    planner: str
    max_cost_ms: float = Field(description="The plan's cost: the max over devices.")
    expected_max_ms: float | None = Field(
        None,
        description="The max that the profile's measured device errors (model_error) lead to expect: each "
        "device's cost times exp(an error drawn from them), independently; the max's mean. "
        "Above max_cost_ms the more devices sit near the max. Null without measured errors.",
    )
    imbalance: float = Field(description="max / mean device cost - 1 (0 = balanced).")
    plan_time_s: float
    reused_s: float = Field(
        0.0,
        description="Planning time of placements this planner took from the request's other "
        "planners instead of computing them (rl+refine starts from cost_greedy's "
        "and rl's): alone, it would plan for about plan_time_s + reused_s.",
    )
    best: bool
    devices: list[DeviceOut]
    torchrec: dict[str, TorchRecTableOut] | None = Field(
        None, description="With ?format=torchrec: per table, its TorchRec sharding (ParameterConstraints / plan)."
    )
    stats: PlanStatsOut | None = Field(
        None, description="With stats: true in the request, the best plan's stats; null on every other plan."
    )


class ModelErrorOut(BaseModel):
    """The profile's measured device errors (``device_errors.json``, ``autoshard cost errors``)."""

    sets: int = Field(description="Measured device sets of plans the errors come from.")
    tasks: int = Field(description="Tasks those plans planned.")
    spread: float = Field(description="Standard deviation of log(measured / predicted), centred per task.")


class WorkloadSummary(BaseModel):
    name: str
    tables: int
    batch_size: int
    memory_bytes: int


class TopologyOut(BaseModel):
    num_devices: int
    num_hosts: int = 1
    devices_per_host: int = Field(0, description="Devices in each host (num_devices / num_hosts).")
    device_memory_gb: float | list[float] = Field(description="GiB per device: one value, or one per rank.")
    intra_host_bw_gbps: float = Field(INTRA_HOST_BW_GBPS, description="Within a host, GiB/s.")
    inter_host_bw_gbps: float = Field(INTER_HOST_BW_GBPS, description="Between hosts, GiB/s.")

    @model_validator(mode="after")
    def _per_host(self) -> TopologyOut:
        if not self.devices_per_host:
            self.devices_per_host = self.num_devices // max(self.num_hosts, 1)
        return self


class SkippedOut(BaseModel):
    planner: str
    reason: str


PLAN_EXAMPLE: dict[str, Any] = {
    "workload": {"name": "example", "tables": 2, "batch_size": 2048, "memory_bytes": 2_052_000_000},
    "topology": {"num_devices": 2, "device_memory_gb": 4.0},
    "cost_unit": "ms",
    "profile": "cpu-example-fbgemm_tbe-t1",
    "model_error": {"sets": 412, "tasks": 11, "spread": 0.094},
    "plans": [
        {
            "planner": "cost_greedy",
            "max_cost_ms": 3.1,
            "expected_max_ms": 3.32,
            "imbalance": 0.02,
            "plan_time_s": 0.004,
            "best": True,
            "torchrec": None,
            "devices": [
                {
                    "tables": ["user_id"],
                    "cost_ms": 3.1,
                    "memory_bytes": 2_048_000_000,
                    "shards": [
                        {
                            "table": "user_id",
                            "sharding_type": "table_wise",
                            "row_offset": 0,
                            "rows": 4_000_000,
                            "column_offset": 0,
                            "columns": 128,
                        }
                    ],
                },
                {
                    "tables": ["category"],
                    "cost_ms": 3.0,
                    "memory_bytes": 4_000_000,
                    "shards": [
                        {
                            "table": "category",
                            "sharding_type": "table_wise",
                            "row_offset": 0,
                            "rows": 62_500,
                            "column_offset": 0,
                            "columns": 16,
                        }
                    ],
                },
            ],
        }
    ],
    "best": "cost_greedy",
    "improvement_over": {"size_greedy": 0.12},
    "skipped": [],
    "partial": False,
    "timed_out": [],
    "elapsed_s": 0.01,
    "warnings": [],
}


class JudgeOut(BaseModel):
    judge: Literal["autoshard", "torchrec_estimator", "torchrec_estimator_measured_links", "dmp"] = Field(
        description="Our cost model; TorchRec's EmbeddingPerfEstimator on each plan's shards at the topology's "
        "declared links; the same estimator at the profile's measured links (only where the profile measured "
        "them); DMP measured."
    )
    max_ms: list[float | None] = Field(
        description="Each plan's slowest rank under this judge, in the order of `plans` (null: not judged)."
    )
    prefers: str | None = Field(description="The plan this judge rates fastest (null: it judged none).")
    note: str | None = Field(None, description="How it judged (TorchRec's compute device; why DMP did not).")


class JudgesOut(BaseModel):
    """Three judges of the plans side by side (``autoshard.torchrec.judges``): the service never
    measures, so DMP's verdict is empty (`autoshard plan ... --verify dmp` measures it)."""

    plans: list[str] = Field(description="The judged plans, by planner.")
    judges: list[JudgeOut]
    agree: bool = Field(description="Whether every judge that judged prefers the same plan.")
    disagreement: str | None = Field(description="Where they differ: each judge's choice, and how to measure.")


class CommunicationOut(BaseModel):
    """What priced each device's communication, for clients to say how far to trust it."""

    source: Literal["measured", "declared", "one figure"] = Field(
        description="'measured' per collective and link tier; 'declared': the profile's declared constants "
        "(TorchRec's, in a GPU profile made without GPUs), not measurements; 'one figure': one bandwidth "
        "and latency for both tiers."
    )
    description: str = Field(description="Where the figures come from, in one line.")


class PlanResponse(BaseModel):
    """Every planner's plan side by side, the best one, and how much it beats each heuristic."""

    model_config = ConfigDict(json_schema_extra={"examples": [PLAN_EXAMPLE]})

    workload: WorkloadSummary
    topology: TopologyOut
    cost_unit: str = Field(description="'ms' with a cost model; otherwise a proxy unit.")
    profile: str | None = Field(description="The cost model profile that scored every plan.")
    model_error: ModelErrorOut | None = Field(
        None,
        description="The profile's measured device errors that expected_max_ms is computed under; null "
        "when the profile has none.",
    )
    plans: list[PlanOut]
    best: str = Field(
        description="The planner with the lowest max cost (of plans tied on it, the one whose "
        "next costliest devices are lowest)."
    )
    improvement_over: dict[str, float] = Field(
        description="Per heuristic that planned: 1 - best / heuristic max cost (0.12 = 12% faster)."
    )
    skipped: list[SkippedOut] = Field(description="Planners that did not plan, and why.")
    partial: bool = Field(description="True when the time budget ran out: plans holds those that finished.")
    timed_out: list[str] = Field(description="Planners that did not run within the time budget.")
    judges: JudgesOut | None = Field(
        None, description="With stats: true in the request, three judges of the plans side by side; else null."
    )
    communication: CommunicationOut | None = Field(
        None, description="What priced each device's communication; null where the plans were priced without it."
    )
    elapsed_s: float = Field(description="Time spent on the request's planning, queueing included.")
    warnings: list[str] = Field(
        default_factory=list,
        description="Inputs the profile's cost model extrapolates to (rows, dim, pooling, skew or batch size "
        "beyond its trained ranges): the plans are still made, their costs less certain. Inputs it "
        "cannot answer at all (a precision or optimizer it was not trained on) are a 422 instead.",
    )


class MoveOut(BaseModel):
    shard: str = Field(description="The shard ('name', or 'name[a:b]' for a column shard).")
    from_rank: int | None = Field(description="Where the current plan holds it (null: not in that form).")
    to_rank: int = Field(description="Where this plan puts it.")
    memory_bytes: int = Field(description="What moves: its weights and optimizer state.")


class CacheParamsOut(BaseModel):
    load_factor: float = Field(description="The share of the table's rows its cache holds in device memory.")


class PlacedTableOut(BaseModel):
    sharding_type: str = Field(description="TorchRec's sharding type of the table.")
    compute_kernel: str = Field(
        description="TorchRec's kernel: fused (in device memory), fused_uvm_caching, fused_uvm (in host memory), "
        "dense (data parallel). A re-plan keeps a kept table's kernel."
    )
    cache_params: CacheParamsOut | None = Field(None, description="A fused_uvm_caching table's cache.")
    shards: list[TorchRecShardOut]


class PlacementOut(BaseModel):
    """A plan in the form `current_plan` takes: send it back as the next re-plan's `current_plan`."""

    world_size: int
    tables: dict[str, PlacedTableOut]


class ReplanOut(BaseModel):
    plan: str = Field(
        description="'keep' (every current shard where it is), 'replan (<= N moves)', or 'cost_greedy' (from scratch)."
    )
    max_cost_ms: float
    expected_max_ms: float | None = Field(
        None, description="As in POST /v1/plans: the max the profile's measured device errors lead to expect."
    )
    partial: bool = Field(description="True when the time budget ran out: the best plan found so far.")
    plan_time_s: float
    shards_moved: int = Field(description="Shards of tables the current plan holds that this plan puts elsewhere.")
    bytes_moved: int
    moves: list[MoveOut]
    devices: list[DeviceOut]
    placement: PlacementOut


class ReplanResponse(BaseModel):
    """The plan that keeps every current shard, a re-plan per budget of moves, and cost_greedy's plan
    from scratch, each with the shards it moves."""

    workload: str
    tables: int
    topology: TopologyOut
    profile: str = Field(description="The cost model profile that scored every plan.")
    max_moves: list[int]
    max_moved_bytes: int | None = Field(None, description="The byte budget of every re-plan (max_moved_gb).")
    new_tables: list[str] = Field(description="Tables the current plan does not hold: placed freely.")
    dropped: list[str] = Field(description="Tables of the current plan gone from the workload.")
    replaced: list[str] = Field(description="Tables whose current shards no longer tile their columns: placed anew.")
    plans: list[ReplanOut]
    elapsed_s: float = Field(description="Time spent on the request, queueing included.")
    warnings: list[str] = Field(default_factory=list, description="As in POST /v1/plans.")


class ArtifactOut(BaseModel):
    """A loaded model file: a cost model, an RL policy, or the model's measured device errors."""

    kind: Literal["cost_model", "policy", "device_errors"]
    file: str
    sha256: str
    metrics: dict[str, Any] = Field(
        description="Training metrics stored with it (and metrics.json); for device "
        "errors, their summary and the reports they came from."
    )


class ProfileOut(BaseModel):
    profile: str = Field(description="The profile name (its folder under the model directory).")
    default: bool
    device: dict[str, Any] = Field(description="Where the traces were measured: device, mode, threads, versions.")
    artifacts: list[ArtifactOut]


class ProfilesResponse(BaseModel):
    profiles: list[ProfileOut]
    problems: list[str] = Field(description="Model files that could not be loaded, and why.")


class PlannerOut(BaseModel):
    name: str
    kind: Literal["heuristic", "cost_model", "policy", "reference"]
    available: bool
    default: bool = Field(description="Runs when a request names no planners.")
    reason: str | None = Field(None, description="Why it is unavailable.")
    policy: str | None = Field(None, description="The trained policy it plans with (policy planners).")


class PlannersResponse(BaseModel):
    planners: list[PlannerOut]
    default_profile: str | None


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    status: Literal["ready", "degraded"]
    reasons: list[str] = Field(description="Why the service is degraded (empty when ready).")
    default_planners: list[str]
    profiles: list[str]


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(description="Where: e.g. ['body', 'workload', 'tables', 3, 'embedding_dim'].")
    msg: str = Field(description="What is wrong and how to fix it.")
    type: str
    ctx: dict[str, Any] | None = None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "loc": ["body", "workload", "tables", 3, "embedding_dim"],
                            "msg": "tables[3] 'history': embedding_dim: must be an integer >= 1, got 0 "
                            "(fix: set the embedding dimension)",
                            "type": "value_error",
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ErrorItem]

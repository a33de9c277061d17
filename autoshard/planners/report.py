"""Plans side by side as a typed report (``PlansReport``), shared by the CLI and the HTTP service;
``to_dict()`` is their JSON (`autoshard plan --json`, ``POST /v1/plans``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.core.collectives import Tier
from autoshard.core.communication import CommunicationModel, Links
from autoshard.core.model_error import DeviceErrors
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload


def shard_label(shard: TableShard) -> str:
    """``name`` for a whole table, ``name[a:b]`` for a column shard, ``name[ra:rb]`` for a row
    block (``name[ra:rb,a:b]`` in a grid), ``name[dp]`` for a data-parallel replica."""
    return shard.label


@dataclass(frozen=True, slots=True)
class ShardReport:
    """A shard of a device: its table, its sharding type (TorchRec's name), its column range
    (``column_offset``, ``columns``) and row range (``row_offset``, ``rows``)."""

    table: str
    column_offset: int
    columns: int
    sharding_type: str = "table_wise"
    row_offset: int = 0
    rows: int = 0

    @classmethod
    def of(cls, shard: TableShard) -> ShardReport:
        kind = shard.sharding_type.value
        return cls(shard.table.name, shard.column_offset, shard.width, kind, shard.row_offset, shard.height)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sharding_type": self.sharding_type,
            "row_offset": self.row_offset,
            "rows": self.rows,
            "column_offset": self.column_offset,
            "columns": self.columns,
        }


def tier_split(
    model: CommunicationModel, tables: Sequence[Table], batch_size: int, where: Topology | int
) -> tuple[float, float] | None:
    """A device's communication (its shards ``tables``) as (intra-host ms, inter-host ms): a per-tier
    model's ``breakdown`` summed by tier, so the two add up to exactly what it prices per
    (collective, tier). A one-figure model prices both tiers as one figure: on one host it is all
    intra-host; across hosts it cannot be split (None)."""
    if model.per_tier:
        split = dict.fromkeys(Tier, 0.0)
        for key, ms in model.breakdown(tables, batch_size, where).items():
            split[Tier(key.rsplit(" ", 1)[1])] += ms
        return split[Tier.INTRA], split[Tier.INTER]
    links = Links.of(where)
    if links.devices_per_host < links.num_devices:
        return None
    return model.cost_ms(tables, batch_size, where), 0.0


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """A device of a plan: its tables (``shard_label``), the same structured, its cost and memory,
    and its host (``Topology.host_of`` its rank; 0 on one host). ``communication_ms``: the part of
    ``cost_ms`` that is its communication (0 where the plan was priced without it); the rest is
    compute. ``communication_by_tier_ms``: that communication as (intra-host, inter-host) ms,
    which add up to ``communication_ms``; None where the model cannot split it (``tier_split``)."""

    tables: tuple[str, ...]
    shards: tuple[ShardReport, ...]
    cost_ms: float
    memory_bytes: int
    host: int = 0
    communication_ms: float = 0.0
    communication_by_tier_ms: tuple[float, float] | None = (0.0, 0.0)

    @property
    def compute_ms(self) -> float:
        return self.cost_ms - self.communication_ms

    @classmethod
    def of(
        cls,
        device: DevicePlan,
        host: int = 0,
        communication_ms: float = 0.0,
        by_tier: tuple[float, float] | None = (0.0, 0.0),
    ) -> DeviceReport:
        return cls(
            tuple(shard_label(s) for s in device.shards),
            tuple(ShardReport.of(s) for s in device.shards),
            device.cost_ms,
            device.memory_bytes,
            host,
            communication_ms,
            by_tier,
        )

    @classmethod
    def all_of(
        cls,
        plan: ShardingPlan,
        topology: Topology | None = None,
        priced: tuple[CommunicationModel, int] | None = None,
    ) -> tuple[DeviceReport, ...]:
        """The plan's devices, each with its host in ``topology`` (without one: host 0) and, where
        the plan was priced with ``priced`` (the communication model and the batch size), its
        share of it, per tier where the model splits it (a per-tier model's total is the sum of
        its tiers, so the two always agree)."""
        n = len(plan.devices)
        hosts = [0] * n if topology is None else [topology.host_of(r) for r in range(n)]
        where = topology if topology is not None else n
        reports = []
        for device, host in zip(plan.devices, hosts):
            if priced is None:
                reports.append(cls.of(device, host))
                continue
            model, batch_size = priced
            tables = [s.as_table for s in device.shards]
            split = tier_split(model, tables, batch_size, where)
            total = sum(split) if split is not None else model.cost_ms(tables, batch_size, where)
            reports.append(cls.of(device, host, total, split))
        return tuple(reports)

    def to_dict(self, shards: bool = False) -> dict[str, Any]:
        """``{"host", "tables", "cost_ms", "compute_ms", "communication_ms",
        "communication_by_tier_ms", "memory_bytes"}``, the split as ``{"intra": ms, "inter": ms}``
        (null where the model cannot split it); with ``shards``, the structured shards after the
        tables."""
        out: dict[str, Any] = {"host": self.host, "tables": list(self.tables)}
        if shards:
            out["shards"] = [s.to_dict() for s in self.shards]
        split = self.communication_by_tier_ms
        out.update(
            cost_ms=self.cost_ms,
            compute_ms=self.compute_ms,
            communication_ms=self.communication_ms,
            communication_by_tier_ms=None if split is None else {"intra": split[0], "inter": split[1]},
            memory_bytes=self.memory_bytes,
        )
        return out


@dataclass(frozen=True, slots=True)
class PlanReport:
    """One plan of a ``PlansReport``. ``expected_max_ms``: its max under the profile's measured device
    errors (None without them); ``own_estimate_max_ms``: the planner's own estimate of the max, if it
    has one (TorchRec's perf model, next to ours)."""

    planner: str
    max_cost_ms: float
    expected_max_ms: float | None
    imbalance: float
    plan_time_s: float
    reused_s: float
    best: bool
    partial: bool
    devices: tuple[DeviceReport, ...]
    own_estimate_max_ms: float | None = None

    @classmethod
    def of(
        cls,
        plan: ShardingPlan,
        best: bool = False,
        device_errors: DeviceErrors | None = None,
        topology: Topology | None = None,
        priced: tuple[CommunicationModel, int] | None = None,
    ) -> PlanReport:
        """The plan; with ``device_errors``, its ``expected_max_ms`` under them (``DeviceErrors.expected_max``:
        what the model's measured error on each device leads to expect of the max), else None; each
        device with its host in ``topology`` (host 0 without one)."""
        expected = device_errors.expected_max([d.cost_ms for d in plan.devices]) if device_errors else None
        return cls(
            plan.planner,
            plan.max_cost_ms,
            expected,
            plan.imbalance,
            plan.plan_time_s,
            plan.reused_s,
            best,
            plan.partial,
            DeviceReport.all_of(plan, topology, priced),
            max(plan.own_estimate_ms) if plan.own_estimate_ms else None,
        )

    def to_dict(self, shards: bool = False) -> dict[str, Any]:
        """Its JSON; ``own_estimate_max_ms`` only where the planner has an estimate of its own."""
        out: dict[str, Any] = {
            "planner": self.planner,
            "max_cost_ms": self.max_cost_ms,
            "expected_max_ms": self.expected_max_ms,
            "imbalance": self.imbalance,
            "plan_time_s": self.plan_time_s,
            "reused_s": self.reused_s,
            "best": self.best,
            "partial": self.partial,
            "devices": [d.to_dict(shards) for d in self.devices],
        }
        if self.own_estimate_max_ms is not None:
            out["own_estimate_max_ms"] = self.own_estimate_max_ms
        return out


TIE = 1e-6
"""Plans whose max cost is within this share of the lowest tie with it (one set priced by a
running accumulator and by a whole-set call differs in its last bits)."""


def costs_descending(plan: ShardingPlan) -> list[float]:
    """The plan's device costs, costliest first: plans tied on the max compare on the next ones."""
    return sorted((d.cost_ms for d in plan.devices), reverse=True)


def best_plan_index(plans: Sequence[ShardingPlan]) -> int:
    """The plan with the lowest max cost; of those tied with it (``TIE``), the one whose next
    costliest devices are lowest (a device near the max is the likeliest to measure above it),
    then the first. -1 for no plans."""
    if not plans:
        return -1
    lowest = min(p.max_cost_ms for p in plans)
    tied = [i for i, p in enumerate(plans) if p.max_cost_ms <= lowest * (1 + TIE)]
    return min(tied, key=lambda i: costs_descending(plans[i])[1:])


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    name: str
    tables: int
    batch_size: int
    memory_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tables": self.tables,
            "batch_size": self.batch_size,
            "memory_bytes": self.memory_bytes,
        }


@dataclass(frozen=True, slots=True)
class TopologyReport:
    """The topology planned for, as the workload file writes it (``Topology.to_dict``):
    ``{"num_devices", "device_memory_gb"}`` for one host, plus ``num_hosts`` and
    ``devices_per_host`` for a cluster, ``device_memory_gb`` a list of one per rank where devices
    differ, and bandwidths (GiB/s) where they are not TorchRec's defaults."""

    topology: Topology

    @classmethod
    def of(cls, topology: Topology) -> TopologyReport:
        return cls(topology)

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    @property
    def device_memory_gb(self) -> float:
        return self.topology.device_memory_gb

    def to_dict(self) -> dict[str, Any]:
        return self.topology.to_dict()


@dataclass(frozen=True, slots=True)
class Skipped:
    """A planner that did not plan, and why."""

    planner: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"planner": self.planner, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class CommunicationReport:
    """What priced the plans' communication, for outputs to say how far to trust it: ``source``
    "measured" (per collective and tier), "declared" (a profile's declared constants, not
    measurements: a GPU profile made without GPUs) or "one figure" (one bandwidth and latency
    for both tiers); ``description``, the model's own line (``CommunicationModel.describe``)."""

    source: str
    description: str

    @classmethod
    def of(cls, model: CommunicationModel) -> CommunicationReport:
        source = "declared" if model.declared else "measured" if model.per_tier else "one figure"
        return cls(source, model.describe())

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "description": self.description}


@dataclass(frozen=True, slots=True)
class PlansReport:
    """Several plans of one workload side by side (``plans_report``). ``model_error``: the summary of
    the profile's measured device errors (``DeviceErrors.summary``) that each plan's expected max is
    computed under, None without them. ``communication``: what priced each device's
    communication (None where the plans were priced without it)."""

    workload: WorkloadReport
    topology: TopologyReport
    cost_unit: str
    model_error: dict[str, float | int] | None
    plans: tuple[PlanReport, ...]
    skipped: tuple[Skipped, ...]
    communication: CommunicationReport | None = None

    @property
    def best(self) -> PlanReport | None:
        """The plan flagged ``best``; None for no plans."""
        return next((p for p in self.plans if p.best), None)

    def to_dict(self, shards: bool = False) -> dict[str, Any]:
        """Its JSON; with ``shards``, each device's shards structured too (the service's answer)."""
        return {
            "workload": self.workload.to_dict(),
            "topology": self.topology.to_dict(),
            "cost_unit": self.cost_unit,
            "model_error": self.model_error,
            "plans": [p.to_dict(shards) for p in self.plans],
            "skipped": [s.to_dict() for s in self.skipped],
            "communication": self.communication.to_dict() if self.communication is not None else None,
        }


def plans_report(
    workload: Workload,
    topology: Topology,
    plans: Sequence[ShardingPlan],
    skipped: Sequence[tuple[str, str]] = (),
    cost_unit: str = "ms",
    device_errors: DeviceErrors | None = None,
    communication: CommunicationModel | None = None,
) -> PlansReport:
    """Several plans of one workload side by side; the ``best_plan_index`` one is flagged
    ``best``. ``skipped`` lists (planner, reason). With the profile's ``device_errors``, each
    plan's expected max under them, and their summary as ``model_error``. With the
    ``communication`` the plans were priced with, each device's compute and communication apart
    (and its communication per tier), and what priced it (``CommunicationReport``)."""
    best = best_plan_index(plans)
    priced = (communication, workload.batch_size) if communication is not None and cost_unit == "ms" else None
    return PlansReport(
        WorkloadReport(workload.name, len(workload.tables), workload.batch_size, workload.memory_bytes),
        TopologyReport.of(topology),
        cost_unit,
        device_errors.summary() if device_errors else None,
        tuple(PlanReport.of(p, i == best, device_errors, topology, priced) for i, p in enumerate(plans)),
        tuple(Skipped(name, reason) for name, reason in skipped),
        CommunicationReport.of(priced[0]) if priced is not None else None,
    )

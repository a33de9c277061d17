"""The three judges of ``benchmarks/sharding_4d.py``'s two plans (cost_greedy's, TorchRec's), side
by side: our model, TorchRec's ``EmbeddingPerfEstimator`` on each plan's shards, and (with
``--measure``) the plans measured here. Each judge's slowest rank of each plan, split into
compute and communication, the plan each prefers, and where our model and TorchRec's estimator
prefer different plans, the visible cause: compute or communication priced differently (with the
link bandwidths each prices), data parallel, memory counted differently, or the estimator pricing
cuda kernels because TorchRec's CPU sharder lacks a type cost_greedy's plan uses.

The verdicts and the disagreement sentence are the product's (``autoshard.torchrec.judges``); the
estimates, with their compute / communication split, are ``sharding_4d.torchrec_rank_parts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoshard.core.collectives import Collective, Tier
from autoshard.core.communication import CommunicationModel
from autoshard.core.sharding import ShardingType
from autoshard.core.types import ShardingPlan, Topology
from autoshard.torchrec.judges import CPU_TYPES, Judges, Verdict
from autoshard.torchrec.measured_links import MEASURED_LINKS, MEASURED_LINKS_TITLE

PLANS = ("cost_greedy", "torchrec")
NOT_ON_CPU = "TorchRec's CPU sharder offers only data-parallel, table-, column- and table-column-wise"


@dataclass(frozen=True, slots=True)
class JudgedPlan:
    """One judge's figures for one plan: its slowest rank, and the largest compute and the largest
    communication over its ranks (ms per iteration)."""

    max_ms: float
    compute_ms: float
    comm_ms: float

    @classmethod
    def of(cls, ranks: list[tuple[float, float]]) -> JudgedPlan:
        """From each rank's (compute, communication)."""
        return cls(max(c + m for c, m in ranks), max(c for c, _ in ranks), max(m for _, m in ranks))

    def to_dict(self) -> dict[str, float]:
        return {
            "max_ms": round(self.max_ms, 4),
            "compute_ms": round(self.compute_ms, 4),
            "comm_ms": round(self.comm_ms, 4),
        }


def types_not_on_cpu(plan: ShardingPlan) -> list[str]:
    """The sharding types of ``plan`` that TorchRec's CPU sharder does not offer."""
    kinds = {s.sharding_type for d in plan.devices for s in d.shards}
    return sorted(k.value for k in kinds - CPU_TYPES)


def replicated(plan: ShardingPlan) -> int:
    """Tables ``plan`` replicates (data parallel)."""
    return len({s.table.name for d in plan.devices for s in d.shards if s.sharding_type is ShardingType.DATA_PARALLEL})


def links(communication: CommunicationModel | None, topology: Topology) -> str:
    """The pooled all-to-all's bandwidths our model prices on ``topology``, intra / inter host, in
    GB/s (1e9 bytes: a profile's fits; the topology's declared figures are GiB/s, TorchRec's unit)."""
    if communication is None:
        return "no communication"
    if not communication.per_tier:
        return f"{communication.bandwidth_gbps:.3g} GB/s on both tiers"
    intra = communication.fit(Collective.ALL_TO_ALL, Tier.INTRA, topology).bandwidth_gbps
    inter = communication.fit(Collective.ALL_TO_ALL, Tier.INTER, topology).bandwidth_gbps
    kind = "declared" if communication.declared else "measured"
    return f"{kind} {intra:.3g} / {inter:.3g} GB/s"


def verdicts(
    ours: dict[str, JudgedPlan],
    estimated: dict[str, JudgedPlan] | None,
    estimator_note: str,
    measured_ms: tuple[float, float] | None,
    at_links: dict[str, JudgedPlan] | None = None,
) -> Judges:
    """The product's ``Judges`` on the two plans: our model, TorchRec's estimator (at the declared
    links, and at the profile's measured links where there is ``at_links``), measured here."""
    found = [
        Verdict("autoshard", tuple(ours[p].max_ms for p in PLANS)),
        Verdict(
            "torchrec_estimator",
            tuple(estimated[p].max_ms for p in PLANS) if estimated else (None, None),
            estimator_note,
        ),
    ]
    if at_links:
        found.append(Verdict(MEASURED_LINKS, tuple(at_links[p].max_ms for p in PLANS), MEASURED_LINKS_TITLE))
    if measured_ms is not None:
        note = "each rank's shards microbenchmarked here, plus the modelled communication"
        found.append(Verdict("measured", measured_ms, note))
    return Judges(PLANS, tuple(found))


def cause(
    ours: dict[str, JudgedPlan],
    estimated: dict[str, JudgedPlan],
    plans: dict[str, ShardingPlan],
    context: dict[str, Any],
) -> str:
    """Why our model and TorchRec's estimator prefer different plans, as far as their split
    shows. ``context``: ``our_links``, ``declared_links`` (what each prices), ``estimator_device``,
    ``torchrec_device``, ``torchrec_over_our_cap``, ``cost_greedy_over_torchrec_cap`` (bools or
    None), ``at_measured_links`` (the plan TorchRec's estimator prefers at the profile's measured
    links, or None)."""
    reasons = []
    ours_compute = ours["cost_greedy"].compute_ms / ours["torchrec"].compute_ms
    theirs_compute = estimated["cost_greedy"].compute_ms / estimated["torchrec"].compute_ms
    comm = (
        f"communication: ours prices {context['our_links']} (max comm cost_greedy "
        f"{ours['cost_greedy'].comm_ms:.3g} vs torchrec {ours['torchrec'].comm_ms:.3g} ms), "
        f"TorchRec's estimator the topology's declared {context['declared_links']} "
        f"({estimated['cost_greedy'].comm_ms:.3g} vs {estimated['torchrec'].comm_ms:.3g} ms)"
    )
    ours_prefer = "cost_greedy" if ours["cost_greedy"].max_ms <= ours["torchrec"].max_ms else "torchrec"
    if context.get("at_measured_links") == ours_prefer:
        reasons.append(f"the links: at the profile's measured links TorchRec's estimator prefers {ours_prefer} too")
    elif context.get("at_measured_links"):
        reasons.append(
            f"not the links alone: at the profile's measured links TorchRec's estimator still prefers "
            f"{context['at_measured_links']}"
        )
    if (ours_compute < 1) == (theirs_compute < 1):
        reasons.append(comm + f"; compute alone both prefer the same plan ({ours_compute:.2f}, {theirs_compute:.2f})")
    else:
        reasons.append(
            f"compute: cost_greedy / torchrec compute alone is {ours_compute:.2f} under ours, "
            f"{theirs_compute:.2f} under TorchRec's"
        )
        reasons.append(comm)
    dp = {p: replicated(plans[p]) for p in PLANS}
    if any(dp.values()):
        reasons.append(
            f"data parallel: cost_greedy replicates {dp['cost_greedy']} tables, torchrec {dp['torchrec']} "
            f"(ours: replicas at B, their gradients' all-reduce at the profile's {context['our_links'].split()[0]} "
            "fits; TorchRec's: its all-reduce at the declared bandwidths)"
        )
    if context.get("torchrec_over_our_cap"):
        reasons.append("memory counted differently: TorchRec's plan is over our per-device cap")
    if context.get("cost_greedy_over_torchrec_cap"):
        reasons.append("memory counted differently: cost_greedy's plan is over TorchRec's reserved capacity")
    missing = types_not_on_cpu(plans["cost_greedy"])
    if context["torchrec_device"] == "cpu" and missing:
        reasons.append(
            f"{NOT_ON_CPU}: cost_greedy's plan uses {', '.join(missing)}, so TorchRec's estimator prices "
            f"both plans as {context['estimator_device']} plans while torchrec_cpu planned for cpu"
        )
    return "; ".join(reasons)


def cause_at_links(
    ours: dict[str, JudgedPlan], at_links: dict[str, JudgedPlan], plans: dict[str, ShardingPlan], device: str
) -> str:
    """Why our model and TorchRec's estimator at the profile's measured links prefer different
    plans: the links are the same, so their compute or their communication formulas differ (a
    replica's above all: TorchRec's all-reduce runs at ``local_world_size`` x the measured
    all-reduce, one NIC a device, where ours prices the two-level ring)."""
    ratio = {
        "compute": (
            ours["cost_greedy"].compute_ms / ours["torchrec"].compute_ms,
            at_links["cost_greedy"].compute_ms / at_links["torchrec"].compute_ms,
        ),
        "communication": (
            ours["cost_greedy"].comm_ms / ours["torchrec"].comm_ms,
            at_links["cost_greedy"].comm_ms / at_links["torchrec"].comm_ms,
        ),
    }
    split = [part for part, (a, b) in ratio.items() if (a < 1) != (b < 1)] or ["the sum of compute and communication"]
    said = ", ".join(f"{part} {a:.2f} under ours, {b:.2f} under TorchRec's" for part, (a, b) in ratio.items())
    reasons = [
        f"at measured links, formulas not links: they split over {' and '.join(split)} "
        f"(cost_greedy / torchrec: {said}; TorchRec's priced on {device})"
    ]
    dp = {p: replicated(plans[p]) for p in PLANS}
    if any(dp.values()):
        reasons.append(
            f"data parallel: cost_greedy replicates {dp['cost_greedy']} tables, torchrec {dp['torchrec']}; "
            "TorchRec prices a replica's gradient all-reduce at local_world_size x the measured all-reduce "
            "bandwidth (one NIC a device), ours as a two-level ring over the measured intra- and inter-host fits"
        )
    return "; ".join(reasons)


__all__ = [
    "MEASURED_LINKS",
    "MEASURED_LINKS_TITLE",
    "NOT_ON_CPU",
    "PLANS",
    "JudgedPlan",
    "cause",
    "cause_at_links",
    "links",
    "replicated",
    "types_not_on_cpu",
    "verdicts",
]

"""`--verify dmp`: the best distinct plans run under TorchRec's DMP, each rank's prediction
beside its measurement, part by part, and the three judges side by side.

``verify_dmp`` takes a task's plans, keeps the ``top`` best-predicted distinct placements (a
placement several planners made is one candidate, named by the first), measures them
interleaved under DMP (``dmp_verify.measure_plans_dmp``) and chooses the one whose slowest rank
measured fastest. Each candidate's report (``PlanVerification.to_dict``) is the ``verify``
entry of a plan in ``autoshard plan --json``.

Each rank's ``predicted_ms`` is the product's one price, as DMP runs the batch
(shared/DESIGN.md, "The batch, as DMP runs it"; ``autoshard.core.dmp_batch``): ``batch_size``
samples per rank, a sharded shard serving every rank's (B x W bags), a replica its own B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.core.communication import CommunicationModel
from autoshard.core.costing import bound_to_task
from autoshard.core.errors import InputError
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.report import costs_descending
from autoshard.torchrec.dmp_verify import DmpMeasurement, DmpVerifyConfig, RankMeasurement, measure_plans_dmp
from autoshard.torchrec.judges import Judges, RankPrediction, estimator_device, predict_ranks, torchrec_estimate_ms

PART_GROUPS = (
    ("input_dist", ("input_dist",)),
    ("lookup", ("lookup_forward", "lookup_backward")),
    ("output_dist", ("output_dist_forward", "output_dist_backward")),
    ("allreduce", ("allreduce",)),
)
"""The parts the model prices, in the measured parts of a step (a one-figure communication model
prices no input distribution: its prediction there is null)."""


@dataclass(frozen=True, slots=True)
class PlanVerification:
    """One candidate: its planners, its DMP measurement, and per rank our model's prediction
    and TorchRec's estimate."""

    plan: ShardingPlan
    planners: tuple[str, ...]
    measurement: DmpMeasurement
    predicted: tuple[RankPrediction, ...]
    torchrec_estimate_ms: tuple[float, ...] | None

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "method": "dmp",
            "world_size": m.world_size,
            "ranks_per_host": m.ranks_per_host,
            "oversubscribed": m.oversubscribed,
            "network": m.network,
            "batch_size_per_rank": m.batch_size,
            "rounds": m.rounds,
            "outputs_match": m.outputs_match,
            "max_abs_error": m.max_abs_error,
            "malloc_settings_active": m.malloc_settings_active,
            "measured_max_ms": round(m.max_busy_ms, 4),
            "predicted_max_ms": round(max(p.total_ms for p in self.predicted), 4),
            "ranks": [self._rank(r, k) for k, r in enumerate(m.ranks)],
        }

    def _rank(self, measured: RankMeasurement, k: int) -> dict[str, Any]:
        predicted = self.predicted[k]
        parts = dict(measured.parts)
        priced = {
            "input_dist": predicted.input_dist_ms,
            "lookup": predicted.lookup_ms,
            "output_dist": predicted.output_dist_ms,
            "allreduce": predicted.allreduce_ms,
        }
        return {
            "rank": measured.rank,
            "predicted_ms": round(predicted.total_ms, 4),
            "measured_ms": round(measured.busy_ms, 4),
            "torchrec_estimate_ms": None
            if self.torchrec_estimate_ms is None
            else round(self.torchrec_estimate_ms[k], 4),
            "step_wall_ms": round(measured.wall_ms, 4),
            "pipeline_ms": None if measured.pipeline_ms is None else round(measured.pipeline_ms, 4),
            "iqr_ms": round(measured.iqr_ms, 4),
            "steps": measured.steps,
            "parts": [
                {
                    "part": group,
                    "predicted_ms": None if priced[group] is None else round(priced[group], 4),  # type: ignore[arg-type]
                    "measured_ms": round(sum(parts[p] for p in members), 4),
                    **({"measured": {p: round(parts[p], 4) for p in members}} if len(members) > 1 else {}),
                }
                for group, members in PART_GROUPS
            ],
        }


@dataclass(frozen=True, slots=True)
class DmpVerification:
    """The candidates (best predicted first), the one measured fastest, and the judges."""

    candidates: tuple[PlanVerification, ...]
    chosen: int
    judges: Judges

    @property
    def plan(self) -> ShardingPlan:
        return self.candidates[self.chosen].plan

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "dmp",
            "chosen": list(self.candidates[self.chosen].planners),
            "changed": self.chosen != 0,
            "candidates": [{"planners": list(c.planners), "verify": c.to_dict()} for c in self.candidates],
            "judges": self.judges.to_dict(),
        }


def distinct_best(plans: Sequence[ShardingPlan], top: int) -> list[tuple[ShardingPlan, tuple[str, ...]]]:
    """The ``top`` best-predicted distinct placements, each with every planner that made it."""
    if top < 1:
        raise InputError("verify_top", f"must be at least 1, got {top}", "verify at least the predicted best plan")
    groups: dict[tuple, list[ShardingPlan]] = {}
    for plan in plans:
        key = tuple(sorted(d.set_key for d in plan.devices))
        groups.setdefault(key, []).append(plan)
    found = sorted(groups.values(), key=lambda same: costs_descending(same[0]))
    return [(same[0], tuple(p.planner for p in same)) for same in found[:top]]


def verify_dmp(
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    communication: CommunicationModel | None,
    config: DmpVerifyConfig,
    top: int = 4,
) -> DmpVerification:
    """Measure the ``top`` best-predicted distinct plans under DMP; keep the fastest measured."""
    from autoshard.torchrec.judges import Verdict, measured_links_verdict

    if topology.num_devices != config.run.world_size or topology.local_world_size != config.ranks_per_host:
        raise InputError(
            "world_size",
            f"the plans are for {topology.num_hosts} x {topology.local_world_size} devices, the run has "
            f"{config.run.world_size} ranks, {config.ranks_per_host} a host",
            "verify with the topology's world size and devices per host",
        )
    best = distinct_best(plans, top)
    priced = bound_to_task(cost_model, workload, topology)  # a model that prices per task (--model torchrec)
    assert priced is not None
    measured = measure_plans_dmp([p for p, _ in best], workload, config)
    device = estimator_device([p for p, _ in best])
    candidates = tuple(
        PlanVerification(
            plan,
            names,
            m,
            tuple(predict_ranks(plan, workload.batch_size, topology, priced, communication)),
            _estimate(plan, workload, topology, device),
        )
        for (plan, names), m in zip(best, measured)
    )
    chosen = min(range(len(candidates)), key=lambda k: candidates[k].measurement.max_busy_ms)
    names = tuple(c.planners[0] for c in candidates)
    estimates = tuple(None if c.torchrec_estimate_ms is None else max(c.torchrec_estimate_ms) for c in candidates)
    judges = Judges(
        names,
        (
            Verdict("autoshard", tuple(c.plan.max_cost_ms for c in candidates)),
            Verdict("torchrec_estimator", estimates, f"TorchRec's estimator on {device}"),
            *filter(None, [measured_links_verdict([c.plan for c in candidates], workload, topology, communication)]),
            Verdict("dmp", tuple(c.measurement.max_busy_ms for c in candidates), "slowest rank, measured under DMP"),
        ),
    )
    return DmpVerification(candidates, chosen, judges)


def _estimate(plan: ShardingPlan, workload: Workload, topology: Topology, device: str) -> tuple[float, ...] | None:
    try:
        return tuple(torchrec_estimate_ms(plan, workload, topology, device))
    except Exception:  # noqa: BLE001 - a plan TorchRec cannot estimate still verifies
        return None


__all__ = ["DmpVerification", "PlanVerification", "distinct_best", "verify_dmp"]

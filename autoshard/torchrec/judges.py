"""Three judges of a set of plans: our cost model, TorchRec's own estimator, and DMP measured.

- **autoshard**: each plan's max device cost as its planner priced it (the cost model's compute
  plus the modelled communication), and per rank its parts (``predict_ranks``).
- **torchrec_estimator**: TorchRec's ``EmbeddingPerfEstimator`` on each plan's own shards, what
  TorchRec's planner minimises (``torchrec_estimate_ms``, through the shared per-shard cache of
  ``autoshard.torchrec.estimates``). TorchRec's sharder offers row-wise, table-row-wise and grid
  sharding only on cuda, so plans that use them are estimated as cuda plans (HBM bandwidths);
  plans of data-parallel, table-, column- and table-column-wise tables alone can be estimated on
  the CPU (``estimator_device``).
- **torchrec_estimator_measured_links** (where the profile measured its links): the same
  estimator with the profile's measured per-(collective, tier) bandwidths in place of the
  topology's declared ones (``autoshard.torchrec.measured_links``): TorchRec's formulas at our links,
  so that a disagreement with ours that it does not share was the links'.
- **dmp**: each plan's slowest rank measured under TorchRec's DMP (``dmp_verify``), where the
  ranks fit this machine.

Each judge prefers the plan it rates fastest; ``Judges.disagreement`` says where they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.core.collectives import Collective
from autoshard.core.communication import CommunicationModel
from autoshard.core.costing import predict_nonempty
from autoshard.core.dmp_batch import at_dmp_batch
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Table, Topology, Workload

if TYPE_CHECKING:
    from torchrec.distributed.planner.types import GeneralizedCommsBandwidth

    from autoshard.torchrec.estimates import TaskEstimates

CPU_TYPES = frozenset(
    {ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE}
)
"""The sharding types TorchRec's ``EmbeddingBagCollectionSharder`` offers on the CPU (1.8)."""
VERIFY_HINT = "run `autoshard plan ... --verify dmp` to measure them under TorchRec's DMP"


@dataclass(frozen=True, slots=True)
class RankPrediction:
    """Our model's cost of one rank, in the parts a DMP step has (ms). ``input_dist_ms`` is None
    where the communication model does not price the ids (a one-figure model)."""

    rank: int
    lookup_ms: float  # forward + backward + fused update: the cost model's compute
    output_dist_ms: float  # the pooled outputs' all-to-all / reduce-scatter / all-gather, both ways
    allreduce_ms: float  # the data-parallel replicas' gradients
    input_dist_ms: float | None = None  # the ids' all-to-all

    @property
    def total_ms(self) -> float:
        return self.lookup_ms + self.output_dist_ms + self.allreduce_ms + (self.input_dist_ms or 0.0)


def predict_ranks(
    plan: ShardingPlan,
    batch_size: int,
    topology: Topology,
    cost_model: CostModel,
    communication: CommunicationModel | None,
) -> list[RankPrediction]:
    """Each rank of ``plan`` priced by the cost model (and ``communication``) at ``batch_size``
    samples per rank, each shard at the bags DMP gives it (``autoshard.core.dmp_batch``: a
    sharded shard every rank's samples, a replica its own rank's)."""
    sets = [[s.as_table for s in d.shards] for d in plan.devices]
    compute = predict_nonempty(at_dmp_batch(cost_model, topology.num_devices), sets, batch_size)
    return [
        _rank_prediction(rank, compute[rank], tables, batch_size, topology, communication)
        for rank, tables in enumerate(sets)
    ]


def _rank_prediction(
    rank: int,
    compute_ms: float,
    tables: Sequence[Table],
    batch_size: int,
    topology: Topology,
    communication: CommunicationModel | None,
) -> RankPrediction:
    """One rank's parts: a per-tier model's breakdown by collective, or the one-figure model's
    all-to-all and all-reduce (it prices no ids)."""
    if communication is None or not tables:
        return RankPrediction(rank, compute_ms, 0.0, 0.0, None if communication is None else 0.0)
    if communication.per_tier:
        by_collective = {c.value: 0.0 for c in Collective}
        for key, ms in communication.breakdown(tables, batch_size, topology).items():
            by_collective[key.split()[0]] += ms
        allreduce = by_collective.pop(Collective.ALL_REDUCE.value)
        ids = by_collective.pop(Collective.INPUT_DIST.value) + by_collective.pop(Collective.INPUT_DIST_ROW_WISE.value)
        return RankPrediction(rank, compute_ms, sum(by_collective.values()), allreduce, ids)
    allreduce = sum(communication.allreduce_ms(t, topology) for t in tables)
    return RankPrediction(rank, compute_ms, communication.cost_ms(tables, batch_size, topology) - allreduce, allreduce)


def estimator_device(plans: Sequence[ShardingPlan]) -> str:
    """``cpu`` if TorchRec's CPU sharder offers every type the plans use, else ``cuda``."""
    kinds = {s.sharding_type for p in plans for d in p.devices for s in d.shards}
    return "cpu" if kinds <= CPU_TYPES else "cuda"


def torchrec_estimate_ms(
    plan: ShardingPlan,
    workload: Workload,
    topology: Topology,
    compute_device: str = "cuda",
    estimates: TaskEstimates | None = None,
) -> list[float]:
    """TorchRec's own perf estimate of each rank of ``plan`` (ms per iteration): the sum of its
    shards' ``EmbeddingPerfEstimator`` totals on ``topology`` (its world size, local world size,
    bandwidths), as TorchRec's planner sums a rank (``autoshard.torchrec.estimates``; pass
    ``estimates`` to share its cache across plans). On TorchRec's own plan it gives back the
    estimate its planner kept."""
    from autoshard.torchrec.estimates import TaskEstimates

    found = estimates or TaskEstimates(workload, topology, compute_device, storage_reservation=None)
    return [sum(e.ms for e in found.of([s.as_table for s in d.shards])) for d in plan.devices]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One judge's slowest rank of each plan (ms; None where it could not judge that plan)."""

    judge: str
    max_ms: tuple[float | None, ...]
    note: str = ""

    @property
    def prefers(self) -> int | None:
        """The index of the plan it rates fastest (None if it judged none)."""
        judged = [(v, k) for k, v in enumerate(self.max_ms) if v is not None]
        return min(judged)[1] if judged else None


@dataclass(frozen=True, slots=True)
class Judges:
    """The judges' verdicts on the same plans (named by their planners)."""

    plans: tuple[str, ...]
    verdicts: tuple[Verdict, ...]

    def preferred(self) -> dict[str, str | None]:
        return {v.judge: None if v.prefers is None else self.plans[v.prefers] for v in self.verdicts}

    @property
    def agree(self) -> bool:
        return len({p for p in self.preferred().values() if p is not None}) <= 1

    def disagreement(self) -> str | None:
        """A sentence naming each judge's choice where they differ, pointing to the measurement."""
        if self.agree:
            return None
        choices = ", ".join(f"{judge} prefers {plan}" for judge, plan in self.preferred().items() if plan)
        measured = any(v.judge == "dmp" and v.prefers is not None for v in self.verdicts)
        return f"the judges disagree: {choices}" + ("" if measured else f"; {VERIFY_HINT}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "plans": list(self.plans),
            "judges": [
                {
                    "judge": v.judge,
                    "max_ms": [None if m is None else round(m, 4) for m in v.max_ms],
                    "prefers": None if v.prefers is None else self.plans[v.prefers],
                    **({"note": v.note} if v.note else {}),
                }
                for v in self.verdicts
            ],
            "agree": self.agree,
            "disagreement": self.disagreement(),
        }


def judge_plans(
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    measured_max_ms: Sequence[float | None] | None = None,
    communication: CommunicationModel | None = None,
) -> Judges:
    """The judges on ``plans``: our model (each plan's priced max), TorchRec's estimator on each
    plan's shards at the topology's declared links, and again at the links ``communication``
    measured (where it measured them), and DMP measured (``measured_max_ms``, each plan's slowest
    rank; None: not measured)."""
    verdicts = [
        Verdict("autoshard", tuple(p.max_cost_ms for p in plans)),
        *estimator_verdicts(plans, workload, topology, communication),
    ]
    if measured_max_ms is not None:
        verdicts.append(Verdict("dmp", tuple(measured_max_ms), "each plan's slowest rank, measured under DMP"))
    else:
        verdicts.append(Verdict("dmp", tuple(None for _ in plans), f"not measured: {VERIFY_HINT}"))
    return Judges(tuple(p.planner for p in plans), tuple(verdicts))


def estimator_verdicts(
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    communication: CommunicationModel | None = None,
) -> tuple[Verdict, ...]:
    """TorchRec's estimator on each plan's shards: at the topology's declared links
    (``torchrec_estimator``), then at the links ``communication`` measured
    (``measured_links_verdict``; none where it measured none)."""
    bandwidths = f"{topology.intra_host_bw_gbps:g} / {topology.inter_host_bw_gbps:g} GiB/s"
    note = f"{_where(plans)}; the topology's declared links, {bandwidths}"
    declared = _estimator_verdict("torchrec_estimator", plans, workload, topology, note)
    measured = measured_links_verdict(plans, workload, topology, communication)
    return (declared,) if measured is None else (declared, measured)


def measured_links_verdict(
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    communication: CommunicationModel | None,
) -> Verdict | None:
    """TorchRec's estimator on each plan's shards at the links ``communication`` measured, per
    collective and tier (``torchrec_estimator_measured_links``); None where it measured none."""
    from autoshard.torchrec.measured_links import MEASURED_LINKS, measured_links

    links = measured_links(communication, topology)
    if links is None:
        return None
    return _estimator_verdict(MEASURED_LINKS, plans, workload, topology, f"{_where(plans)}; {links.describe()}", links)


def _where(plans: Sequence[ShardingPlan]) -> str:
    if estimator_device(plans) == "cuda":
        return (
            "TorchRec's CPU sharder offers only data-parallel, table-, column- and table-column-wise: "
            "these plans are estimated as cuda plans"
        )
    return "estimated on the CPU"


def _estimator_verdict(
    judge: str,
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    note: str,
    links: GeneralizedCommsBandwidth | None = None,
) -> Verdict:
    """TorchRec's estimator's slowest rank of each plan (``links``: its comms bandwidths; None:
    the topology's); a plan or task it cannot estimate is None, said in the note."""
    from autoshard.torchrec.estimates import TaskEstimates

    device = estimator_device(plans)
    failed: list[str] = []
    try:
        shared = TaskEstimates(workload, topology, device, storage_reservation=None, comms_bandwidths=links)
    except Exception as error:  # noqa: BLE001 - a task TorchRec cannot estimate (a precision it lacks) is said
        return Verdict(judge, tuple(None for _ in plans), f"{note}; {type(error).__name__}: {error}")
    estimates: list[float | None] = []
    for plan in plans:
        try:
            estimates.append(max(torchrec_estimate_ms(plan, workload, topology, device, shared)))
        except Exception as error:  # noqa: BLE001 - a plan TorchRec cannot estimate is reported, not fatal
            estimates.append(None)
            failed.append(f"{plan.planner}: {type(error).__name__}: {error}")
    return Verdict(judge, tuple(estimates), "; ".join([note, *failed]))


__all__ = [
    "CPU_TYPES",
    "Judges",
    "RankPrediction",
    "Verdict",
    "estimator_device",
    "estimator_verdicts",
    "judge_plans",
    "measured_links_verdict",
    "predict_ranks",
    "torchrec_estimate_ms",
]

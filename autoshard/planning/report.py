"""What ``autoshard.planning.plan.plan`` answers: the plans side by side, typed
(``PlanningReport``); ``to_dict()`` is `autoshard plan --json`, ``to_dict(detail=True)`` the
service's ``POST /v1/plans`` answer (less its ``elapsed_s``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from autoshard.core.types import ShardingPlan, Topology, Workload
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.report import PlansReport
from autoshard.planners.stats import PlanStats, plan_stats
from autoshard.planning.options import Models
from autoshard.planning.registry import HEURISTICS

if TYPE_CHECKING:
    from autoshard.core.communication import CommunicationModel
    from autoshard.torchrec.judges import Judges


@dataclass(frozen=True, slots=True)
class PlanningReport:
    """The plans of one workload on one topology, side by side.

    ``comparison``: each plan's costs, devices and expected max, the skipped planners and the
    best plan (``autoshard.planners.report.PlansReport``); ``plans``: the plans themselves, in its
    order. ``warnings``: what the cost model says of the workload's tables, then of the shards
    the plans spread (inputs beyond its trained ranges). ``profile``: whose costs these are.
    ``timed_out``: the planners a deadline kept from planning. ``exports``: each plan as TorchRec
    sharding where asked for (None each otherwise). ``stats``: the stats of the plan at
    ``stats_of`` (the best, unless a caller chose another: ``with_stats``); ``judges``, with the
    stats: every plan judged by our model and by TorchRec's estimator, side by side
    (``autoshard.torchrec.judges``; DMP measures them under `plan --verify dmp`)."""

    workload: Workload
    topology: Topology
    comparison: PlansReport
    plans: tuple[ShardingPlan, ...]
    warnings: tuple[str, ...] = ()
    profile: str | None = None
    timed_out: tuple[str, ...] = ()
    exports: tuple[dict[str, Any] | None, ...] = ()
    stats: PlanStats | None = None
    stats_of: int | None = None
    judges: Judges | None = None

    @property
    def best_index(self) -> int:
        """The position of the plan flagged best (lowest max; ties broken by the next costliest devices)."""
        return next(i for i, p in enumerate(self.comparison.plans) if p.best)

    @property
    def best_plan(self) -> ShardingPlan:
        return self.plans[self.best_index]

    @property
    def cost_unit(self) -> str:
        return self.comparison.cost_unit

    @property
    def partial(self) -> bool:
        """Whether a time budget or a deadline cut some planner short."""
        return bool(self.timed_out) or any(p.partial for p in self.plans)

    @property
    def improvement_over(self) -> dict[str, float]:
        """By heuristic that planned: how much lower the best plan's max is than its (a share of its max)."""
        best = self.best_plan.max_cost_ms
        return {
            p.planner: (1.0 - best / p.max_cost_ms) if p.max_cost_ms > 0 else 0.0
            for p in self.plans
            if p.planner in HEURISTICS
        }

    def with_stats(self, plan: ShardingPlan, models: Models) -> PlanningReport:
        """This report with the stats of ``plan``, one of its plans (or an equal plan that a
        caller chose among them, e.g. the one that measured fastest: it stands at the first
        plan of its planner), priced as the report's plans were (``models``)."""
        index = next((i for i, p in enumerate(self.plans) if p is plan), None)
        if index is None:
            index = next(i for i, p in enumerate(self.plans) if p.planner == plan.planner)
        found = plan_stats(
            plan,
            self.workload,
            self.topology,
            models.cost_model if models.cost_model is not None else ProxyCostModel(),
            models.communication if models.cost_model is not None else None,
            models.device_errors,
            self.cost_unit,
        )
        communication = models.communication if models.cost_model is not None else None
        return replace(self, stats=found, stats_of=index, judges=_judges(self, communication))

    def to_dict(self, detail: bool = False) -> dict[str, Any]:
        """Its JSON: ``PlansReport``'s, the stats under their plan's entry, then ``warnings`` and
        ``profile`` (`autoshard plan --json`). With ``detail``, each device's shards structured
        and each plan's ``torchrec`` export too, and ``best``, ``improvement_over``, ``partial``
        and ``timed_out`` (the service's answer)."""
        out = self.comparison.to_dict(shards=detail)
        for i, entry in enumerate(out["plans"]):
            if detail:
                entry["torchrec"] = self.exports[i] if self.exports else None
            if self.stats is not None and i == self.stats_of:
                entry["stats"] = self.stats.to_dict()
        if self.judges is not None:
            out["judges"] = self.judges.to_dict()
        out["warnings"] = list(self.warnings)
        out["profile"] = self.profile
        if detail:
            out.update(
                best=self.best_plan.planner,
                improvement_over=self.improvement_over,
                partial=self.partial,
                timed_out=list(self.timed_out),
            )
        return out

    def alone_on_max(self, plan: ShardingPlan) -> str | None:
        """The table alone and whole on ``plan``'s costliest device, if it could be split
        column-wise there (a shard alone there is a split that was weighed already): no placement
        lowers that device, a split can."""
        from autoshard.planners.column_split import split_ways

        slowest = max(plan.devices, key=lambda d: d.cost_ms)
        if len(slowest.shards) != 1 or slowest.shards[0].columns is not None:
            return None
        table = slowest.shards[0].table
        return table.name if split_ways(table.embedding_dim, self.topology.num_devices) else None


def _judges(report: PlanningReport, communication: CommunicationModel | None) -> Judges | None:
    """Our model and TorchRec's estimator (at the declared links, and at ``communication``'s
    measured ones) on the report's plans (None where TorchRec does not import here: the judges
    need its estimator)."""
    try:
        from autoshard.torchrec.judges import judge_plans

        return judge_plans(report.plans, report.workload, report.topology, communication=communication)
    except ImportError:
        return None

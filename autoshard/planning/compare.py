"""Run several planners on one task side by side: what the CLI, the evaluation and the service share."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import predict_nonempty
from autoshard.core.dmp_batch import as_run
from autoshard.core.errors import PlannerError
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planning.memory_fit import fitted
from autoshard.planning.registry import available_planners, make_planner, planner_spec


@dataclass(frozen=True, slots=True)
class Comparison:
    plans: tuple[ShardingPlan, ...]
    skipped: tuple[tuple[str, str], ...]  # (planner, why it did not plan)
    errors: tuple[PlannerError, ...]
    not_started: tuple[str, ...] = ()  # refused by ``may_start``
    planned: tuple[str, ...] = ()  # the name each plan was asked for, in order (a plan's own may differ)


def compare_planners(
    workload: Workload,
    topology: Topology,
    names: Sequence[str] | None,
    context: PlannerContext,
    communication: CommunicationModel | None = None,
    may_start: Callable[[float], bool] | None = None,
) -> Comparison:
    """Plans of every named planner (``None``: every one that can run here, TorchRec's included), all scored
    by ``context.cost_model`` (with ``communication``: compute plus each device's all-to-all),
    or without one by ``ProxyCostModel`` so that plans still compare like with like; planners
    whose needs are not met are skipped with the reason. The planners share the placements they
    compute alike (``context.cache``: the task's ``TaskCache``, a new one if the caller gave none).
    ``may_start(longest_s)``, asked before every planner but the first with the longest time a
    planner has taken so far, may refuse the rest (``not_started``: a caller's deadline)."""
    context = context.for_task(workload, topology)
    if context.cost_model is not None and communication is not None:
        context = replace(context, cost_model=WithCommunication(context.cost_model, communication, topology))
    skipped: list[tuple[str, str]] = []
    if names is None:
        names, unavailable = available_planners(context, defaults_only=False)
        skipped.extend(unavailable)
    # without a trained model, every plan is scored by one proxy, so that plans compare like with like
    scored = context if context.cost_model is not None else replace(context, cost_model=ProxyCostModel())
    assert scored.cost_model is not None
    plans, errors, unscored_at, planned = [], [], [], []
    unscored = replace(scored, cost_model=None)
    longest, not_started = 0.0, list[str]()
    for name in names:
        if not_started or (may_start is not None and name != names[0] and not may_start(longest)):
            not_started.append(name)
            continue
        started = time.perf_counter()
        try:
            spec = planner_spec(name)
            unmet = spec.unmet(context)  # its needs, against what the caller really has
            if unmet is not None:
                raise unmet
            heuristic = spec.kind is PlannerKind.HEURISTIC  # placed by its proxy, scored below with the others
            planner = make_planner(name, unscored if heuristic else scored)
            if heuristic:  # within the memory the scoring model counts, where it counts its own
                planner = fitted(planner, scored.cost_model)
            plans.append(planner.plan(workload, topology))
            planned.append(name)
            if heuristic:
                unscored_at.append(len(plans) - 1)
        except PlannerError as error:
            errors.append(error)
            skipped.append((name, str(error)))
        longest = max(longest, time.perf_counter() - started)
    return Comparison(
        tuple(rescored(plans, unscored_at, scored.cost_model, workload.batch_size)),
        tuple(skipped),
        tuple(errors),
        tuple(not_started),
        tuple(planned),
    )


def rescored(
    plans: list[ShardingPlan],
    at: Sequence[int],
    cost_model: CostModel,
    batch_size: int,
) -> list[ShardingPlan]:
    """``plans`` with the device costs of those at positions ``at`` predicted by ``cost_model``, all
    in one batched call (the heuristics' plans: a call per plan cost more than their placement);
    each such plan's ``plan_time_s`` gains its share of the call."""
    if not at:
        return plans
    started = time.perf_counter()
    sets = [[s.as_table for s in d.shards] for i in at for d in plans[i].devices]
    costs = iter(predict_nonempty(cost_model, sets, batch_size))
    share = (time.perf_counter() - started) / len(at)
    out = list(plans)
    for i in at:
        plan = plans[i]
        devices = tuple(replace(d, cost_ms=float(next(costs))) for d in plan.devices)
        out[i] = replace(plan, devices=devices, plan_time_s=plan.plan_time_s + share)
    return out


def shard_warnings(cost_model: CostModel | None, plans: Sequence[ShardingPlan]) -> tuple[str, ...]:
    """The cost model's range warnings for the shards that plans spread (row blocks, grid blocks,
    replicas): their share of a table's lookups may fall below what the model was trained on,
    where the workload's own tables do not (a model that cannot tell: none). Each as it is priced:
    a replica at its full pooling factor (``dmp_batch.as_run``)."""
    check = getattr(cost_model, "check_tables", None)
    shards = {as_run(s.as_table, len(p.devices)) for p in plans for d in p.devices for s in d.shards if s.sharding}
    if check is None or not shards:
        return ()
    return tuple(check(sorted(shards, key=lambda t: t.name)))

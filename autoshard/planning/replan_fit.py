"""Re-plans within the memory a cost model counts, where it counts its own and chooses each table's
kernel (TorchRec's estimator, ``--model torchrec``), as ``planning.kernels`` and
``planning.memory_fit`` have the planners plan under it:

- the kept tables run the kernels the current placement gives them (``CurrentPlacement``; moving a
  table between HBM and host memory is a reshard), and the others (new, or placed anew) the kernels
  the model chooses beside them (``choose_kernels(..., keep=...)``), for each of ``FILLS`` in turn
  while the re-plans do not fit the model's count (or a new table fits nowhere);
- memory is counted as the model counts it: the re-plans place on ``planning_topology`` (each
  device's memory as TorchRec's storage reservation leaves it), a UVM-caching shard counts its
  cache (``Table.memory_bytes``), the model's price holds devices within its storage estimate and
  ranks within their host memory, and a re-plan (one of the budgets; not keep) past a rank's
  memory by TorchRec's count (the device's, or host memory: ``ddr_cap``) is refused
  (``check_memory``), as ``autoshard plan`` refuses such a plan.

Any other cost model re-plans the workload as it is, on the topology.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import bound_to_task
from autoshard.core.errors import PlannerError
from autoshard.core.types import CostModel, Topology, Workload
from autoshard.planners.current_placement import kept_tables
from autoshard.planners.incremental import CurrentPlacement, MoveBudget, Replanned, replans
from autoshard.planning.kernels import distinct_fills
from autoshard.torchrec.kernel_choice import chooses_kernels


def fitted_replans(
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    current: CurrentPlacement,
    budgets: Sequence[MoveBudget],
    names: Sequence[str],
    time_budget_s: float | None,
    allow_split: bool,
    communication: CommunicationModel | None,
    unchecked: int = 0,
) -> tuple[list[Replanned], Workload]:
    """``replans`` of ``workload`` (its kernels as the module docstring says), priced by
    ``cost_model`` bound to the task and, with ``communication``, its all-to-all, and the workload
    with the kernels the current placement runs (what ``moves_from`` compares a plan with). The
    first ``unchecked`` re-plans (``compare_replans``' keep) are not refused past host memory."""
    if not chooses_kernels(cost_model):
        plain = bound_to_task(cost_model, workload, topology) or cost_model
        scorer = _scorer(plain, communication, topology)
        return replans(workload, topology, scorer, current, budgets, names, time_budget_s, allow_split), workload
    started = time.perf_counter()
    held, _ = kept_tables(current, workload, topology)
    kept = current.with_kernels(workload, list(held))
    base: Any = bound_to_task(cost_model, kept, topology)  # chooses the kernels of every fill on one task
    fitting: tuple[list[Replanned], Any] | None = None
    error: PlannerError | None = None
    for chosen in distinct_fills(lambda fill: base.choose_kernels(kept, topology, fill, keep=held)):
        model: Any = bound_to_task(base, chosen, topology)
        scorer = _scorer(model, communication, topology)
        try:
            found = replans(
                chosen, model.planning_topology(topology), scorer, current, budgets, names, time_budget_s, allow_split
            )
        except PlannerError as failed:  # a new table fits nowhere beside the kept shards: more in host memory
            error = failed
            continue
        fitting = found, model
        spent = time.perf_counter() - started
        if all(model.overflow_bytes(r.plan) <= 0 for r in found) or (time_budget_s and spent > time_budget_s):
            break
    if fitting is None:
        assert error is not None
        raise error
    found, model = fitting
    for replanned in found[unchecked:]:
        _check_memory(model, replanned)
    return found, kept


def _check_memory(model: Any, replanned: Replanned) -> None:
    """``check_memory`` of a re-plan, its error naming the re-plan."""
    try:
        model.check_memory(replanned.plan)
    except PlannerError as error:
        raise PlannerError(error.kind, f"{replanned.plan.planner}: {error.message}", error.fixes) from None


def _scorer(model: CostModel, communication: CommunicationModel | None, topology: Topology) -> CostModel:
    return model if communication is None else WithCommunication(model, communication, topology)

"""Each table's compute kernel, chosen where the cost model prices kernels (TorchRec's
estimator, ``--model torchrec``, on cuda: its ``choose_kernels``), else ``fused``.

The learned profiles measured TorchRec's ``fused`` kernel alone, so under them every table stays
``fused`` (data parallel: ``dense``) until a profile measures the others; a table whose
constraints allow only the UVM kernels (``fused_uvm_caching``, ``fused_uvm``) is then an
``InputError`` naming it, as is one under TorchRec's model on ``cpu``, where its sharder offers
``fused`` alone.

Under a model that chooses, kernels are chosen twice:

- ``with_kernels``, before any planner runs: the fewest tables in host memory for the task to
  fit the memory the model counts at all (``fill`` 1), so that the request's checks (the tables'
  total against the devices') see each table's device part;
- ``KernelFitted``, around each planner: it plans the kernels of ``FILLS[0]``, and while the plan
  does not fit the model's memory count (or the planner finds none) those of the next fill, more
  tables in host memory each time, and keeps the first plan that fits. A UVM kernel is far
  slower in TorchRec's estimate, so the first fill that fits is the fastest plan there is to keep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from autoshard.core.constraints import FUSED
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import FUSED_UVM_CACHING, CostModel, Planner, ShardingPlan, Topology, Workload
from autoshard.planners.sharding_options import spread_option_memo
from autoshard.torchrec.kernel_choice import chooses_kernels

FILLS = (1.0, 0.9, 0.8, 0.7, 0.6)
"""The shares of the devices' memory (as the model counts it) the kernels are chosen to fill,
in the order ``KernelFitted`` tries them."""


def with_kernels(cost_model: CostModel | None, workload: Workload, topology: Topology) -> Workload:
    """``workload`` with its kernels as ``cost_model`` chooses them to fit at all (see the module
    docstring), or checked to need none but ``fused``."""
    if chooses_kernels(cost_model):
        return cost_model.choose_kernels(workload, topology, FILLS[0])  # type: ignore[union-attr, no-any-return]
    for name, own in workload.constraints.tables:
        if own.compute_kernels is not None and own.sharded_kernels and FUSED not in own.sharded_kernels:
            raise InputError(
                "compute_kernels",
                f"allows {list(own.compute_kernels)}; this cost model measured the fused kernel alone",
                "plan with --model torchrec (TorchRec's estimator prices the UVM kernels on cuda), or allow fused",
                where=f"constraints.{name}",
            )
    return workload


class KernelFitted:
    """``planner`` on the kernels of each fill in turn until its plan fits (module docstring)."""

    def __init__(self, planner: Planner, cost_model: object) -> None:
        self.planner, self.cost_model = planner, cost_model

    @property
    def name(self) -> str:
        return self.planner.name

    def __getattr__(self, name: str) -> object:  # the planner's own settings (time_budget_s, ...)
        if name in ("planner", "cost_model"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.planner, name)

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        with spread_option_memo():  # the fills share the tables whose kernel stays, and their shards' prices
            return self._plan(workload, topology)

    def _plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        start, plan, error = time.perf_counter(), None, None
        choose = self.cost_model.choose_kernels  # type: ignore[attr-defined]
        for chosen in distinct_fills(lambda fill: choose(workload, topology, fill)):
            try:
                plan = self.planner.plan(chosen, topology)
            except PlannerError as failed:
                error = failed
                continue
            if plan.partial or self.cost_model.overflow_bytes(plan) <= 0:  # type: ignore[attr-defined]
                break
        if plan is None:
            assert error is not None
            raise error
        check = getattr(self.cost_model, "check_memory", None)
        if check is not None:
            try:
                check(plan)  # device and host memory as the model counts them: refused past either
            except PlannerError as over:
                if not plan.partial:
                    raise
                raise PlannerError(  # cut short before a plan fitted: a budget issue, not a memory one
                    PlannerErrorKind.TIME_BUDGET,
                    f"{self.name} was cut short by its time budget before its plan fitted the memory "
                    f"the model counts ({over.message})",
                    ("allow more time (--time-budget, a request's time_budget_s)", *over.fixes),
                ) from None
        return replace(plan, plan_time_s=time.perf_counter() - start)  # every fill's, the failed ones too


def distinct_fills(choose: Callable[[float], Workload]) -> Iterator[Workload]:
    """The workload ``choose(fill)`` gives for each of ``FILLS`` in turn, each choice of kernels once."""
    tried: set[tuple] = set()
    for fill in FILLS:
        chosen = choose(fill)
        kernels = tuple((t.compute_kernel, t.cache_load_factor) for t in chosen.tables)
        if kernels not in tried:
            tried.add(kernels)
            yield chosen


def kernel_fitted(planner: Planner, cost_model: object) -> Planner:
    """``planner`` choosing kernels with ``cost_model`` where it chooses them (``KernelFitted``)."""
    return KernelFitted(planner, cost_model) if chooses_kernels(cost_model) else planner


def kernel_notes(plan: ShardingPlan, shown: int = 5) -> tuple[str, ...]:
    """One line per kernel other than ``fused`` that tables of ``plan`` run: how many, the first
    ``shown`` names (a UVM-caching table with its cache load factor)."""
    tables = {s.table.name: s.table for d in plan.devices for s in d.shards}
    by_kernel: dict[str, list[str]] = {}
    for t in tables.values():
        if t.compute_kernel != FUSED:
            label = f"{t.name} ({t.load_factor:g})" if t.compute_kernel == FUSED_UVM_CACHING else t.name
            by_kernel.setdefault(t.compute_kernel, []).append(label)
    return tuple(
        f"{plan.planner}: {len(names)} of {len(tables)} tables run TorchRec's {kernel} kernel (in host memory"
        + ("; a cache of its load factor's share in device memory" if kernel == FUSED_UVM_CACHING else "")
        + f"): {', '.join(names[:shown])}{', ...' if len(names) > shown else ''}"
        for kernel, names in sorted(by_kernel.items())
    )

"""Each table's compute kernel under TorchRec's cost model: ``fused`` where the task fits the
devices' memory, ``fused_uvm_caching`` (then ``fused_uvm``) for the tables it costs least to move
to host memory where it does not, as TorchRec's own planner does when its tables exceed HBM.

TorchRec's sharder offers a sharded table on ``cuda`` the kernels ``fused`` (weights in HBM),
``fused_uvm_caching`` (weights in host memory, a cache of ``cache_load_factor`` of them in HBM)
and ``fused_uvm`` (weights in host memory, read over the bus); on ``cpu`` ``fused`` alone. Its
estimator prices the UVM kernels far slower (a UVM-caching lookup at a tenth of the mix of HBM and
PCIe bandwidths), so a kernel other than ``fused`` pays only where memory forces it. The choice:

1. Each table's kernels: those its constraints allow (``compute_kernels``, ``cache_params``'
   load factor), else all three; each priced whole (table-wise) by TorchRec's estimators.
2. Every table starts at its first allowed kernel (``fused`` when allowed). While TorchRec's
   storage of the whole task passes ``fill`` of the memory its reservation leaves all devices,
   the table whose next kernel (``fused`` -> ``fused_uvm_caching`` -> ``fused_uvm``) saves device
   memory at the least added time per byte saved moves to it: least-hot bytes first, every table
   to caching before any to plain UVM.
3. The planners then place the tables as they run (``Table.memory_bytes`` counts a UVM-caching
   table's cache, a UVM table nothing), and the export carries each kernel and its ``CacheParams``.

``fill`` (default ``FILL``: the fewest tables in host memory for the task to fit at all) may
leave room for what packing cannot fill: ``autoshard.planning.kernels.KernelFitted`` lowers it
until a planner's plan fits. The learned profiles measured ``fused`` alone: they keep it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autoshard.core.errors import InputError
from autoshard.core.types import FUSED, FUSED_UVM_CACHING, TABLE_KERNELS, Table, Workload

if TYPE_CHECKING:  # TorchRec's estimators load with it; TorchRec's planner needs table_kernels alone
    from autoshard.torchrec.estimates import TaskEstimates

FILL = 1.0
"""The share of the devices' memory (after TorchRec's reservation) the chosen kernels may fill
in TorchRec's storage count, unless asked for less."""


@dataclass(frozen=True, slots=True)
class KernelStep:
    """Moving table ``index`` to its next kernel: ``added_ms`` more time, ``saved_bytes`` less
    device memory, in TorchRec's estimate of the whole table."""

    index: int
    added_ms: float
    saved_bytes: int

    @property
    def ms_per_byte(self) -> float:
        return self.added_ms / self.saved_bytes


def chooses_kernels(cost_model: object) -> bool:
    """Whether ``cost_model`` chooses each table's kernel (TorchRec's estimator does): planners,
    TorchRec's planner among them, may then choose any kernel ``table_kernels`` offers."""
    return all(hasattr(cost_model, m) for m in ("choose_kernels", "overflow_bytes"))


def table_kernels(workload: Workload, table: Table, compute_device: str) -> tuple[Table, ...]:
    """``table`` under each kernel it may run, in ``TABLE_KERNELS`` order (most device memory
    first): those its constraints allow that ``compute_device`` offers. ``InputError`` naming the
    table when its constraints allow none there."""
    own = workload.constraints.of(table.name)
    allowed = TABLE_KERNELS if own is None else own.sharded_kernels
    if own is not None and own.compute_kernels is not None and not allowed:
        return (table,)  # data parallel only: dense, whatever the table's kernel
    offered = allowed if compute_device == "cuda" else tuple(k for k in allowed if k == FUSED)
    if not offered:
        raise InputError(
            "compute_kernels",
            f"allows {list(allowed)}, which TorchRec's sharder does not offer on {compute_device} (fused only)",
            "allow fused, or plan for cuda (--compute-device cuda)",
            where=f"constraints.{table.name}",
        )
    factor = own.cache_load_factor if own is not None else None
    return tuple(_with_kernel(table, k, factor if k == FUSED_UVM_CACHING else None) for k in offered)


def _with_kernel(table: Table, kernel: str, factor: float | None) -> Table:
    """``table`` under ``kernel``: the very table where it runs it already (planning then finds
    its estimates by identity, and a workload whose kernels all stay is itself)."""
    if (kernel, factor) == (table.compute_kernel, table.cache_load_factor):
        return table
    return replace(table, compute_kernel=kernel, cache_load_factor=factor)


def choose_kernels(
    workload: Workload, estimates: TaskEstimates, fill: float | None = None, keep: Collection[str] = ()
) -> Workload:
    """``workload`` with each table's kernel chosen (see the module docstring; ``fill``: in place
    of ``FILL``), the tables named in ``keep`` (a re-plan's kept tables) under their own kernel;
    the workload itself when every table keeps its own."""
    fill = FILL if fill is None else fill
    options = [
        (t,) if t.name in keep else table_kernels(workload, t, estimates.compute_device) for t in workload.tables
    ]
    room = fill * sum(max(c, 0) for c in estimates.capacities)
    firsts = [o[0] for o in options]
    used = sum(e.bytes for e in estimates.of(firsts))  # every table at its first kernel: one estimator call
    if used <= room:
        tables = tuple(firsts)  # nothing to move to host memory: the other kernels need no pricing
        return workload if tables == workload.tables else replace(workload, tables=tables)
    flat = estimates.of([t for o in options for t in o])  # the misses in one estimator call per option
    starts = [0]
    for o in options:
        starts.append(starts[-1] + len(o))
    priced = [flat[a:b] for a, b in zip(starts, starts[1:])]
    chosen = [0] * len(options)
    for level in (1, 2):  # every table one kernel further (caching) before any two (plain UVM)
        steps = sorted(
            (
                KernelStep(i, p[level].ms - p[level - 1].ms, p[level - 1].bytes - p[level].bytes)
                for i, p in enumerate(priced)
                if chosen[i] == level - 1 and len(p) > level and p[level - 1].bytes > p[level].bytes
            ),
            key=lambda s: s.ms_per_byte,
        )
        for step in steps:
            if used <= room:
                break
            chosen[step.index] = level
            used -= step.saved_bytes
    tables = tuple(o[c] for o, c in zip(options, chosen))
    return workload if tables == workload.tables else replace(workload, tables=tables)


__all__ = ["FILL", "KernelStep", "choose_kernels", "chooses_kernels", "table_kernels"]

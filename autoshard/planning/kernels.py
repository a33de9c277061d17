"""Each table's compute kernel, chosen before the planners run: by the cost model where it
prices kernels (TorchRec's estimator, ``--model torchrec``: ``choose_kernels``), else ``fused``.

The learned profiles measured TorchRec's ``fused`` kernel alone, so under them every table stays
``fused`` (data parallel: ``dense``) until a profile measures the others; a table whose
constraints allow only the UVM kernels (``fused_uvm_caching``, ``fused_uvm``) is then an
``InputError`` naming it, as is one under TorchRec's model on ``cpu``, where its sharder offers
``fused`` alone.
"""

from __future__ import annotations

from autoshard.core.constraints import FUSED
from autoshard.core.errors import InputError
from autoshard.core.types import CostModel, Topology, Workload


def with_kernels(cost_model: CostModel | None, workload: Workload, topology: Topology) -> Workload:
    """``workload`` with its kernels as ``cost_model`` chooses them (see the module docstring)."""
    choose = getattr(cost_model, "choose_kernels", None)
    if choose is not None:
        return choose(workload, topology)  # type: ignore[no-any-return]
    for name, own in workload.constraints.tables:
        if own.compute_kernels is not None and own.sharded_kernels and FUSED not in own.sharded_kernels:
            raise InputError(
                "compute_kernels",
                f"allows {list(own.compute_kernels)}; this cost model measured the fused kernel alone",
                "plan with --model torchrec (TorchRec's estimator prices the UVM kernels on cuda), or allow fused",
                where=f"constraints.{name}",
            )
    return workload

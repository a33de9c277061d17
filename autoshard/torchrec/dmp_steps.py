"""One DMP training step taken apart, so that each part of it is timed on each rank.

``DistributedModelParallel(module).forward`` runs a sharded EmbeddingBagCollection's input
distribution, lookups and output distribution in one call, and ``backward`` runs the output
distribution's backward, the lookups' backward with FBGEMM's fused update and (under DMP's DDP
wrapper) the data-parallel tables' all-reduce in one other. ``timed_step`` calls the same
TorchRec methods one at a time (``ShardedModule.input_dist``, ``compute``, ``output_dist``, the
way ``ShardedModule.forward`` chains them) and splits backward at the lookups' outputs: the
pooled outputs enter the output distribution as leaves, whose gradients are then fed back into
the lookups. The arithmetic is DMP's own; only the order of waiting is made explicit.

The data-parallel replicas' gradients are all-reduced (mean, as DDP does) and stepped by SGD
here, after backward: DMP's ``init_data_parallel`` wraps them in DDP, whose bucketed all-reduce
would hide inside ``backward``. On a CPU rank with one thread DDP overlaps nothing, so doing it
by hand times the same collective.

Parts (milliseconds): the collectives (``input_dist``, ``output_dist_forward``,
``output_dist_backward``, ``allreduce``) start after a barrier and are timed in wall time, so
that a part holds the transfer and not the wait for a slower peer; the rank's own work
(``lookup_forward``, ``lookup_backward``: TBE backward, the fused update, the replicas' SGD step)
is timed in thread CPU time, as the cost model's traces are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

PARTS = ("input_dist", "lookup_forward", "output_dist_forward", "output_dist_backward", "lookup_backward", "allreduce")
"""A step's parts, in the order a step runs them."""
COLLECTIVES = frozenset({"input_dist", "output_dist_forward", "output_dist_backward", "allreduce"})


@dataclass(frozen=True, slots=True)
class StepTimes:
    """One step on one rank: each part's milliseconds (``PARTS``), each part's thread CPU time
    (a collective's: the rank's own work in it, such as TorchRec's permutes and copies; the rest
    is transfer and waiting) and the step's wall time (barriers and waits for peers included)."""

    parts: tuple[float, ...]
    cpu_parts: tuple[float, ...]
    wall_ms: float

    @property
    def busy_ms(self) -> float:
        """The rank's own time: its parts, without the waits at the barriers."""
        return sum(self.parts)


class _Clock:
    """Times the parts of one step: wall time after a barrier for collectives, thread time else."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self.cpu: dict[str, float] = dict.fromkeys(PARTS, 0.0)

    def run(self, part: str, fn: Any, *args: Any) -> Any:
        collective = part in COLLECTIVES
        if collective:
            dist.barrier()
        wall, cpu = time.perf_counter(), time.thread_time()
        result = fn(*args)
        cpu = (time.thread_time() - cpu) * 1e3
        self.cpu[part] += cpu
        self.parts[part] += (time.perf_counter() - wall) * 1e3 if collective else cpu
        return result


def forward_parts(sharded: Any, features: Any, clock: _Clock | None = None) -> tuple[Any, list, list]:
    """The sharded EBC's forward, part by part: the pooled output (a KeyedTensor), the lookups'
    outputs, and the leaves they enter the output distribution as."""
    clock = clock or _Clock()
    ctx = sharded.create_context()
    dist_input = clock.run("input_dist", lambda: sharded.input_dist(ctx, features).wait().wait())
    lookups = clock.run("lookup_forward", sharded.compute, ctx, dist_input)
    leaves = [out.detach().requires_grad_(out.requires_grad) for out in lookups]
    pooled = clock.run("output_dist_forward", lambda: sharded.output_dist(ctx, leaves).wait())
    return pooled, lookups, leaves


def timed_step(sharded: Any, features: Any, replicas: Sequence[torch.nn.Parameter], lr: float) -> StepTimes:
    """One training step (loss: the sum of the pooled outputs), timed part by part."""
    clock = _Clock()
    dist.barrier()
    start = time.perf_counter()
    pooled, lookups, leaves = forward_parts(sharded, features, clock)
    clock.run("output_dist_backward", lambda: pooled.values().sum().backward())
    clock.run("lookup_backward", _lookups_backward, lookups, leaves)
    if replicas:
        clock.run("allreduce", _allreduce_mean, replicas)
        clock.run("lookup_backward", _sgd_step, replicas, lr)
    wall = (time.perf_counter() - start) * 1e3
    return StepTimes(tuple(clock.parts[p] for p in PARTS), tuple(clock.cpu[p] for p in PARTS), wall)


def _lookups_backward(lookups: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor]) -> None:
    """Feed the leaves' gradients back into the lookups (TBE backward; FBGEMM's fused update)."""
    pairs = [(out, leaf.grad) for out, leaf in zip(lookups, leaves) if out.requires_grad and leaf.grad is not None]
    if pairs:
        torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])


def _allreduce_mean(replicas: Sequence[torch.nn.Parameter]) -> None:
    """The replicas' gradients averaged over ranks in one flat all-reduce (DDP's bucket)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in replicas]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for p in replicas:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


def _sgd_step(replicas: Sequence[torch.nn.Parameter], lr: float) -> None:
    with torch.no_grad():
        for p in replicas:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
            p.grad = None


__all__ = ["COLLECTIVES", "PARTS", "StepTimes", "forward_parts", "timed_step"]

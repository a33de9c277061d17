"""A plan's whole training step as users run it: ``TrainPipelineSparseDist.progress`` over a
``DistributedModelParallel`` model, timed per rank beside the step taken apart (``dmp_steps``).

TorchRec 1.8.0's ``TrainPipelineSparseDist`` runs on CPU ranks over gloo: it makes its copy and
data-dist streams only for cuda / mtia devices and on the CPU runs every stage on the calling
thread, so a step is: wait for batch i's ids (their all-to-all started a step earlier), start
batch i+1's input distribution (gloo's own threads carry it while this one computes), forward
(lookups, output distribution), backward (FBGEMM's fused update for sharded tables; DDP's
bucketed all-reduce for data-parallel replicas) and the dense optimizer's step.

The model a user trains: ``PipelinedModel``, whose forward takes a Pipelineable
``torchrec.datasets.utils.Batch`` and returns ``(loss, pooled)``, the loss the sum of the pooled
outputs as in ``dmp_steps.timed_step``. Sharded tables take SGD fused into backward
(``apply_optimizer_in_backward``; DMP's ``fused_optimizer``); replicas, whose lookup DMP wraps in DDP,
take a dense SGD through ``KeyedOptimizerWrapper``, combined with the fused one as the pipeline
steps one optimizer.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autoshard.core.sharding import ShardingType
from autoshard.core.types import ShardingPlan, Workload

_IN_FLIGHT = 2  # batches the pipeline holds past the one it trains


class PipelinedModel(torch.nn.Module):
    """The workload's EmbeddingBagCollection as a model the pipeline drives: ``forward(batch)``
    pools ``batch.sparse_features`` and returns ``(loss, pooled)``."""

    def __init__(self, ebc: torch.nn.Module) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, batch: Any) -> tuple[torch.Tensor, Any]:
        pooled = self.ebc(batch.sparse_features)
        return pooled.values().sum(), pooled


@dataclass(frozen=True, slots=True)
class ShardedPipeline:
    """One plan's pipelined model on this rank: the DMP model, the pipeline that trains it, and
    its sharded EmbeddingBagCollection (where the output check copies reference weights)."""

    model: Any
    pipeline: Any
    sharded: Any

    def run(self, batches: Sequence[Any]) -> list[Any]:
        """Train on ``batches`` to the end; the pooled output (a KeyedTensor) of each."""
        return self._to_the_end(iter(batches))

    def timed(self, batches: Iterator[Any], warmups: int, steps: int) -> list[float]:
        """``warmups`` untimed steps, a barrier, then ``steps`` steps back to back, each timed in
        wall time (ms; its waits for the peers included, as in training: no barrier between
        steps, which would let the next batch's input distribution finish untimed); then the
        pipeline drained, untimed. The feed holds two batches more than the steps, so that
        every timed step starts the next batch's input distribution, as in a long run."""
        it = iter(list(itertools.islice(batches, warmups + steps + _IN_FLIGHT)))
        for _ in range(warmups):
            self.pipeline.progress(it)
        dist.barrier()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.pipeline.progress(it)
            times.append((time.perf_counter() - start) * 1e3)
        self._to_the_end(it)
        return times

    def _to_the_end(self, it: Iterator[Any]) -> list[Any]:
        from torchrec.distributed.types import LazyAwaitable

        outputs = []
        while True:
            try:
                outputs.append(LazyAwaitable._wait_async(self.pipeline.progress(it)))  # forward waited it
            except StopIteration:
                return outputs


def pipelined(
    plan: ShardingPlan, built: Workload, world_size: int, local_world_size: int | None, lr: float
) -> ShardedPipeline:
    """The plan's model under DMP (replicas in DDP) and a ``TrainPipelineSparseDist`` on the CPU."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel, get_unwrapped_module
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from autoshard.torchrec.bridge import MODULE_PATH, embedding_bag_collection, to_torchrec_plan

    replicated = {s.table.name for d in plan.devices for s in d.shards if s.sharding_type is ShardingType.DATA_PARALLEL}
    ebc = embedding_bag_collection(built, "meta")
    sharded_weights = [ebc.embedding_bags[t.name].weight for t in built.tables if t.name not in replicated]
    if sharded_weights:
        apply_optimizer_in_backward(torch.optim.SGD, sharded_weights, {"lr": lr})
    exported = to_torchrec_plan(plan, built, world_size, "cpu", local_world_size)
    model = DistributedModelParallel(
        PipelinedModel(ebc),
        device=torch.device("cpu"),
        plan=TorchRecShardingPlan({"ebc": exported.plan[MODULE_PATH]}),
        sharders=[EmbeddingBagCollectionSharder()],
    )
    dense = dict(in_backward_optimizer_filter(model.named_parameters()))
    optimizer: Any = model.fused_optimizer
    if dense:
        sgd = KeyedOptimizerWrapper(dense, lambda params: torch.optim.SGD(params, lr=lr))
        optimizer = CombinedOptimizer([("fused", model.fused_optimizer), ("dense", sgd)])
    pipeline = TrainPipelineSparseDist(model, optimizer, torch.device("cpu"))
    return ShardedPipeline(model, pipeline, get_unwrapped_module(model).ebc)


def as_batches(features: Sequence[Any]) -> list[Any]:
    """Each KeyedJaggedTensor as the Pipelineable ``Batch`` the model takes (no dense features)."""
    from torchrec.datasets.utils import Batch

    return [Batch(torch.zeros(f.stride(), 0), f, torch.zeros(f.stride())) for f in features]


__all__ = ["PipelinedModel", "ShardedPipeline", "as_batches", "pipelined"]

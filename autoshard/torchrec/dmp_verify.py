"""Plans run end to end under TorchRec's ``DistributedModelParallel``, each step's parts timed
on each rank (``dmp_steps``).

``measure_plans_dmp`` spawns ``world_size`` ranks once (gloo on the CPU; one process a rank,
``local_world_size`` ranks an emulated host) and every rank shards the workload once per plan.
Then, for ``rounds`` rounds, each plan in turn (A B C A B C ...) takes ``warmups`` untimed steps
and ``steps`` timed ones, on the same batches (drawn per rank from each table's Zipf
distribution and pooling factor, ``autoshard.torchrec.dmp_run``): the plans see the same load
of a shared machine. A rank's measured step is the median over its steps of its own time (its
parts; the waits at the barriers left out), and each part's median stands beside it.

With ``check_outputs`` (the default), before any step each plan's sharded model takes the
weights of one unsharded EmbeddingBagCollection and pools one batch on every rank; the largest
difference from the unsharded model's output is reported (``max_abs_error``): a plan whose
export is wrong fails here, not silently in the timings.

With ``pipeline``, each rank also trains each plan as users do, through TorchRec's
``TrainPipelineSparseDist.progress`` (``dmp_pipeline``), for the same warm-up and timed steps
right after the plan's decomposed ones: its step's wall time (``pipeline_ms``) stands beside the
sum of the parts, and its outputs are checked as the decomposed model's are (both in
``max_abs_error``).

Emulated hosts: ``namespaces=True`` puts each emulated host's ranks in their own network
namespace, the hosts joined by a veth pair shaped to ``link_gbit`` (``dmp_launch``; it needs
root); otherwise every rank runs on this host's loopback. The report says which (``network``).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import ShardingPlan, Workload
from autoshard.torchrec.dmp_launch import check_namespaces, loopback_network, run_in_namespaces
from autoshard.torchrec.dmp_pipeline import as_batches, pipelined
from autoshard.torchrec.dmp_run import (
    LEARNING_RATE,
    DistributedConfig,
    DistributedRunError,
    _batches,
    _check_config,
    _child_environment,
    _free_port,
    capped_workload,
    check_exportable,
    exit_finished_rank,
)
from autoshard.torchrec.dmp_steps import PARTS, StepTimes, forward_parts, timed_step
from cost_model.profile import malloc_settings_active


@dataclass(frozen=True, slots=True)
class DmpVerifyConfig:
    """How plans are verified under DMP: the run (world size, hosts, batch per rank, steps and
    warm-ups a round), the interleaved rounds, and the output check."""

    run: DistributedConfig = DistributedConfig(steps=5, warmups=2, batch_size=512)
    rounds: int = 3
    check_outputs: bool = True
    namespaces: bool = False  # each emulated host's ranks in a network namespace (dmp_launch; root)
    link_gbit: float = 10.0  # with namespaces: the inter-host link's rate, as `bench comm` shapes it
    pipeline: bool = False  # also time each plan's whole step in TrainPipelineSparseDist (dmp_pipeline)

    @property
    def ranks_per_host(self) -> int:
        run = self.run
        return run.world_size if run.local_world_size is None else run.local_world_size

    @property
    def oversubscribed(self) -> bool:
        """More ranks x threads than this machine has cores: ranks time-share and steps slow."""
        return self.run.world_size * self.run.threads_per_rank > (os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class RankMeasurement:
    """One rank of one plan: medians over its timed steps (ms)."""

    rank: int
    busy_ms: float  # its own time: the sum of its parts
    wall_ms: float  # the step's wall time on it (waits included)
    iqr_ms: float  # of busy_ms
    parts: tuple[tuple[str, float], ...]  # (part, median ms), in PARTS order
    cpu_parts: tuple[tuple[str, float], ...]  # (part, median thread CPU ms): a collective's own work
    steps: int
    pipeline_ms: float | None = None  # the step in TrainPipelineSparseDist, wall time (None: not run)


@dataclass(frozen=True, slots=True)
class DmpMeasurement:
    """One plan measured under DMP."""

    plan_name: str
    world_size: int
    ranks_per_host: int
    ranks: tuple[RankMeasurement, ...]
    batch_size: int  # per rank
    max_abs_error: float | None  # the output check (None: not checked)
    oversubscribed: bool
    network: str
    malloc_settings_active: bool
    rounds: int
    wall_s: float  # the whole run, shared by every plan measured with it

    @property
    def max_busy_ms(self) -> float:
        return max(r.busy_ms for r in self.ranks)

    @property
    def outputs_match(self) -> bool | None:
        return None if self.max_abs_error is None else self.max_abs_error <= 1e-5


def measure_plans_dmp(
    plans: Sequence[ShardingPlan], workload: Workload, config: DmpVerifyConfig
) -> list[DmpMeasurement]:
    """Run every plan under DMP on ``config.run.world_size`` ranks, interleaved; one measurement a plan."""
    run = _checked(plans, config)
    built = capped_workload(workload, run)
    for plan in plans:
        check_exportable(plan, built, run.world_size, run.local_world_size)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoshard-dmp-") as tmp:
        out_path = os.path.join(tmp, "ranks.json")
        job = (config, tuple(plans), built, out_path, config.pipeline)
        if config.namespaces:
            network = run_in_namespaces(config, job, Path(tmp))
        else:
            network = loopback_network()
            _spawn(run, job)
        with open(out_path) as f:
            gathered = json.load(f)
    wall_s = time.perf_counter() - start
    return [_measurement(plan, k, gathered, config, wall_s, network) for k, plan in enumerate(plans)]


def _spawn(run: DistributedConfig, job: tuple[Any, ...]) -> None:
    """Every rank spawned on this host (loopback), a failed rank's error raised here."""
    import torch.multiprocessing as mp

    config, *rest = job
    with _child_environment(run):
        try:
            mp.spawn(_rank, args=(config, _free_port(), *rest), nprocs=run.world_size)
        except mp.ProcessRaisedException as e:
            raise DistributedRunError(f"rank {e.error_index} of {run.world_size} failed:\n{str(e).strip()}") from None
        except mp.ProcessExitedException as e:
            raise DistributedRunError(
                f"rank {e.error_index} of {run.world_size} exited with code {e.exit_code} ({e})"
            ) from None


def _checked(plans: Sequence[ShardingPlan], config: DmpVerifyConfig) -> DistributedConfig:
    run = config.run
    _check_config(run)
    if not isinstance(config.rounds, int) or config.rounds < 1:
        raise InputError("rounds", f"must be an integer >= 1, got {config.rounds!r}", "use 3 or more rounds")
    if not plans:
        raise InputError("plans", "no plans to verify", "give at least one plan")
    if run.backend not in ("auto", "gloo"):
        raise InputError("backend", f"DMP verification runs on gloo CPU ranks, not {run.backend!r}", "use gloo")
    if run.world_size % config.ranks_per_host:
        raise InputError(
            "local_world_size",
            f"{config.ranks_per_host} ranks a host do not divide {run.world_size} ranks",
            "give a local_world_size that divides the world size",
        )
    for plan in plans:
        if len(plan.devices) != run.world_size:
            raise InputError(
                "world_size",
                f"plan {plan.planner!r} places tables on {len(plan.devices)} devices, the run has {run.world_size}",
                f"verify it with world_size={len(plan.devices)}",
            )
    if config.namespaces:
        check_namespaces(config)
    return replace(run, backend="gloo")


def _rank(
    rank: int,
    config: DmpVerifyConfig,
    port: int | None,
    plans: tuple[ShardingPlan, ...],
    built: Workload,
    out_path: str,
    pipeline: bool = False,
) -> None:
    """One rank: shard every plan, check its outputs, time interleaved rounds, gather to rank 0
    (``port`` None: torchrun set the rendezvous). With ``pipeline``, each plan's step is also
    timed whole in ``TrainPipelineSparseDist``, after its decomposed steps of the round."""
    import torch.distributed as dist

    run = config.run
    _quiet()
    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(run.threads_per_rank)
    dist.init_process_group("gloo", rank=rank, world_size=run.world_size, timeout=timedelta(seconds=run.timeout_s))
    try:
        models = [_sharded(plan, built, run) for plan in plans]
        pipes = (
            [pipelined(plan, built, run.world_size, run.local_world_size, LEARNING_RATE) for plan in plans]
            if pipeline
            else []
        )
        batches = _batches(built, rank, run.seed, torch.device("cpu"))
        errors = _output_errors(models, pipes, built, batches[0], run.seed) if config.check_outputs else None
        steps: list[list[StepTimes]] = [[] for _ in plans]
        whole: list[list[float]] = [[] for _ in plans]
        for _ in range(config.rounds):
            for k, (sharded, replicas) in enumerate(models):
                for step in range(run.warmups + run.steps):
                    times = timed_step(sharded, batches[step % len(batches)], replicas, LEARNING_RATE)
                    if step >= run.warmups:
                        steps[k].append(times)
                if pipes:
                    whole[k] += pipes[k].timed(itertools.cycle(as_batches(batches)), run.warmups, run.steps)
        mine = {
            "rank": rank,
            "steps": [[[*s.parts, *s.cpu_parts, s.wall_ms] for s in plan_steps] for plan_steps in steps],
            "pipeline": whole if pipes else None,
            "errors": errors,
            "malloc": malloc_settings_active(),
        }
        gathered: list = [None] * run.world_size
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(gathered, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


def _quiet() -> None:
    """TorchRec's and torch's notices in every rank, once a plan (a run of many plans buries its
    report under them): warnings off, TorchRec's log from errors up."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    logging.getLogger("torch").setLevel(logging.ERROR)


def _sharded(plan: ShardingPlan, built: Workload, run: DistributedConfig) -> tuple[Any, list[torch.nn.Parameter]]:
    """The plan's sharded EmbeddingBagCollection on this rank, and its data-parallel replicas."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from autoshard.torchrec.bridge import embedding_bag_collection, to_torchrec_plan

    module = embedding_bag_collection(built, "meta")
    apply_optimizer_in_backward(torch.optim.SGD, module.parameters(), {"lr": LEARNING_RATE})
    model = DistributedModelParallel(
        module,
        device=torch.device("cpu"),
        plan=to_torchrec_plan(plan, built, run.world_size, "cpu", run.local_world_size),
        sharders=[EmbeddingBagCollectionSharder()],
        init_data_parallel=False,
    )
    dp = {s.table.name for d in plan.devices for s in d.shards if s.sharding_type is ShardingType.DATA_PARALLEL}
    params = dict(model.named_parameters())
    replicas = [params[key] for key in params if key.split(".")[-2] in dp]
    return model.module, replicas


def _output_errors(
    models: Sequence[tuple[Any, Any]], pipes: Sequence[Any], built: Workload, features: Any, seed: int
) -> list[float]:
    """Each plan's largest difference from the unsharded model's pooled output on ``features``,
    with the unsharded model's weights copied into its shards: the decomposed model's, and its
    pipelined model's (``pipes``, where run: one step through the pipeline)."""
    from autoshard.torchrec.bridge import embedding_bag_collection

    torch.manual_seed(seed)
    reference = embedding_bag_collection(built, "cpu")
    expected = reference(features)
    errors = []
    for k, (sharded, _) in enumerate(models):
        _copy_weights(sharded, reference)
        with torch.no_grad():
            pooled, _, _ = forward_parts(sharded, features)
        outputs = [pooled]
        if pipes:
            _copy_weights(pipes[k].sharded, reference)
            outputs += pipes[k].run(as_batches([features]))
        errors.append(
            max(float((out[t.name] - expected[t.name]).detach().abs().max()) for out in outputs for t in built.tables)
        )
    return errors


def _copy_weights(sharded: Any, reference: Any) -> None:
    """``reference``'s weights into this rank's shards and replicas of ``sharded``."""
    weights = reference.state_dict()
    with torch.no_grad():
        for name, tensor in sharded.state_dict().items():
            if not hasattr(tensor, "local_shards"):
                tensor.copy_(weights[name])
                continue
            for shard in tensor.local_shards():
                (row, col), (rows, cols) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.copy_(weights[name][row : row + rows, col : col + cols])


def _measurement(
    plan: ShardingPlan, k: int, gathered: list, config: DmpVerifyConfig, wall_s: float, network: str
) -> DmpMeasurement:
    ranks = []
    for r in sorted(gathered, key=lambda g: g["rank"]):
        steps = r["steps"][k]
        busy = [sum(s[: len(PARTS)]) for s in steps]
        q = statistics.quantiles(busy, n=4) if len(busy) > 1 else [busy[0]] * 3
        n = len(PARTS)
        parts = tuple((p, statistics.median(s[i] for s in steps)) for i, p in enumerate(PARTS))
        cpu = tuple((p, statistics.median(s[n + i] for s in steps)) for i, p in enumerate(PARTS))
        wall = statistics.median(s[-1] for s in steps)
        whole = statistics.median(r["pipeline"][k]) if r.get("pipeline") else None
        ranks.append(
            RankMeasurement(r["rank"], statistics.median(busy), wall, q[2] - q[0], parts, cpu, len(steps), whole)
        )
    errors = [g["errors"][k] for g in gathered] if gathered[0]["errors"] is not None else None
    return DmpMeasurement(
        plan_name=plan.planner,
        world_size=config.run.world_size,
        ranks_per_host=config.ranks_per_host,
        ranks=tuple(ranks),
        batch_size=config.run.batch_size,
        max_abs_error=max(errors) if errors is not None else None,
        oversubscribed=config.oversubscribed,
        network=network,
        malloc_settings_active=all(g["malloc"] for g in gathered),
        rounds=config.rounds,
        wall_s=wall_s,
    )


__all__ = ["DmpMeasurement", "DmpVerifyConfig", "RankMeasurement", "measure_plans_dmp"]

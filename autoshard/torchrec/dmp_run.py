"""The distributed evaluation of a plan: the real system, TorchRec ``DistributedModelParallel``.

``run_distributed`` spawns ``world_size`` processes (gloo on the CPU, NCCL on GPUs), shards the
workload's EmbeddingBagCollection with the plan (``to_torchrec_plan``: each table's sharding type
and shards as placed, fused FBGEMM kernels, data-parallel tables dense), and times full training
iterations: input all-to-all, lookups, output all-to-all, backward (gradient all-to-all, TBE
backward) and the sparse SGD update, which FBGEMM fuses into backward
(``apply_optimizer_in_backward``; a data-parallel table's dense kernel takes none: its gradient
is all-reduced, and no optimizer steps it). ``local_world_size`` groups the ranks into hosts, as
table-row-wise, table-column-wise and grid shards need (``LOCAL_WORLD_SIZE`` in every rank).

Each step starts after a barrier and is timed with ``time.perf_counter`` (wall clock: the
iteration waits for the slowest rank in the all-to-alls, so thread CPU time would miss it). The
step's iteration time is the max over ranks. Indices come from each table's Zipf distribution
and pooling factor (``cost_model.bench.indices``), drawn independently on every rank.

Tables are built with ``physical_rows(table, row_cap_bytes)`` rows, consistently in the module
and the plan (recorded in the result as ``capped_rows``). The children start with the allocator
settings of ``cost_model.profile.MALLOC_SETTINGS``: the ``spawn`` start method execs a fresh
interpreter that inherits ``os.environ`` as it is when the process starts, so they are set in the
parent around the spawn and restored after (children report whether they saw them).

On the CPU, ranks share the machine's cores: with ``world_size * threads_per_rank`` above the
free cores, ranks time-share and iteration times include that contention.
"""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta

import numpy as np
import torch

from autoshard.core.errors import InputError
from autoshard.core.types import ShardingPlan, Workload
from cost_model.bench.indices import bag_lengths, zipf_rows
from cost_model.features import physical_rows
from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active
from cost_model.traces.records import Stats

LEARNING_RATE = 0.01
_BATCHES_PER_RANK = 4  # distinct batches generated per rank, cycled through the steps


class DistributedRunError(RuntimeError):
    """A rank of a distributed run failed; the message holds the rank and its traceback."""


@dataclass(frozen=True)
class DistributedConfig:
    world_size: int = 2
    steps: int = 10
    warmups: int = 3
    batch_size: int = 2048  # per rank
    row_cap_bytes: int = 16 * 2**20  # tables get physical_rows(table, row_cap_bytes) rows
    backend: str = "auto"  # "nccl" where enough GPUs, else "gloo"
    seed: int = 0
    threads_per_rank: int = 1
    timeout_s: float = 300.0  # collective timeout: a hung rank fails the run after this
    local_world_size: int | None = None  # ranks per host (LOCAL_WORLD_SIZE in the ranks); None: one host


@dataclass(frozen=True)
class DistributedResult:
    world_size: int
    iteration_ms: tuple[float, ...]  # per step: max over ranks of the step's wall time
    median_ms: float
    iqr_ms: float
    per_rank_median_ms: tuple[float, ...]
    plan_name: str
    per_rank_ms: tuple[tuple[float, ...], ...] = ()  # [rank][step]
    backend: str = "gloo"
    batch_size: int = 0  # per rank
    row_cap_bytes: int = 0
    capped_rows: tuple[tuple[str, int, int], ...] = ()  # (table, num_embeddings, rows built)
    malloc_settings_active: bool = False  # in every rank
    wall_s: float = 0.0  # the whole run: spawn, build, warm-ups, steps
    runs: int = 1  # distributed runs merged into this result (compare_distributed)


def resolve_backend(config: DistributedConfig) -> str:
    if config.backend == "auto":
        cuda = torch.cuda.is_available() and torch.cuda.device_count() >= config.world_size
        return "nccl" if cuda else "gloo"
    if config.backend not in ("gloo", "nccl"):
        raise InputError("backend", f"unknown backend {config.backend!r}", "use auto, gloo or nccl")
    if config.backend == "nccl" and torch.cuda.device_count() < config.world_size:
        raise InputError(
            "backend",
            f"nccl needs {config.world_size} GPUs, found {torch.cuda.device_count()}",
            "use gloo or a smaller world size",
        )
    return config.backend


def capped_workload(workload: Workload, config: DistributedConfig) -> Workload:
    """The workload as built: rows capped, the per-rank batch size of the config."""
    tables = tuple(replace(t, num_embeddings=physical_rows(t, config.row_cap_bytes)) for t in workload.tables)
    return Workload(tables, config.batch_size, workload.name)


def check_exportable(
    plan: ShardingPlan, built: Workload, world_size: int, local_world_size: int | None, backend: str = "gloo"
) -> None:
    """``InputError`` unless DMP can run ``plan`` of the ``built`` workload: it exports to TorchRec
    (``to_torchrec_plan``) and its column shards are full width or multiples of 4 wide (FBGEMM's
    fused kernels). Checked in the parent, so that a bad plan fails before any rank spawns."""
    from autoshard.torchrec.bridge import table_placements, to_torchrec_plan

    dims = {t.name: t.embedding_dim for t in built.tables}
    for name, shards in table_placements(plan, built, world_size, local_world_size).items():
        if any(p.columns != dims[name] for p in shards) and any(p.columns % 4 for p in shards):
            raise InputError(
                "columns",
                f"plan {plan.planner!r} splits table {name!r} into widths {[p.columns for p in shards]}",
                "FBGEMM's fused kernels need column shards whose widths are multiples of 4",
            )
    device = "cuda" if backend == "nccl" else "cpu"
    to_torchrec_plan(plan, built, world_size, compute_device=device, local_world_size=local_world_size)


def run_distributed(plan: ShardingPlan, workload: Workload, config: DistributedConfig) -> DistributedResult:
    """Train the workload sharded by ``plan`` on ``config.world_size`` processes; time each step."""
    _check_config(config)
    if len(plan.devices) != config.world_size:
        raise InputError(
            "world_size",
            f"plan {plan.planner!r} places tables on {len(plan.devices)} "
            f"devices, the run has world size {config.world_size}",
            f"run it with world_size={len(plan.devices)} or plan for {config.world_size} devices",
        )
    backend = resolve_backend(config)
    built = capped_workload(workload, config)
    check_exportable(plan, built, config.world_size, config.local_world_size, backend)  # here, not in a rank

    import torch.multiprocessing as mp

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoshard-dist-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        with _child_environment(config):
            try:
                mp.spawn(
                    _worker,
                    args=(config, backend, _free_port(), plan, built, out_path),
                    nprocs=config.world_size,
                    join=True,
                )
            except mp.ProcessRaisedException as e:
                raise DistributedRunError(
                    f"rank {e.error_index} of {config.world_size} failed running plan "
                    f"{plan.planner!r}:\n{str(e).strip()}"
                ) from None
            except mp.ProcessExitedException as e:
                raise DistributedRunError(
                    f"rank {e.error_index} of {config.world_size} exited with code {e.exit_code} "
                    f"running plan {plan.planner!r} ({e})"
                ) from None
        with open(out_path) as f:
            gathered = json.load(f)
    wall_s = time.perf_counter() - start

    per_rank = tuple(tuple(float(x) for x in r["ms"]) for r in gathered)
    return _result(
        plan.planner, per_rank, config, backend, workload, built, all(r["malloc"] for r in gathered), wall_s, runs=1
    )


def compare_distributed(
    plans: Sequence[ShardingPlan], workload: Workload, config: DistributedConfig, rounds: int = 3
) -> list[DistributedResult]:
    """Run the plans interleaved (A B A B ...) for ``rounds`` rounds; each plan's step times
    (and per-rank step times) are merged over rounds. All plans of a round see the same batches
    (seed ``config.seed + round``)."""
    if rounds < 1:
        raise InputError("rounds", f"must be >= 1, got {rounds!r}", "use 3 or more rounds")
    if not plans:
        raise InputError("plans", "no plans to compare", "give at least one plan")
    runs: list[list[DistributedResult]] = [[] for _ in plans]
    for r in range(rounds):
        round_config = replace(config, seed=config.seed + r)
        for p, plan in enumerate(plans):
            runs[p].append(run_distributed(plan, workload, round_config))
    merged = []
    for plan, results in zip(plans, runs):
        per_rank = tuple(
            tuple(x for res in results for x in res.per_rank_ms[rank]) for rank in range(config.world_size)
        )
        first = results[0]
        merged.append(
            _result(
                plan.planner,
                per_rank,
                config,
                first.backend,
                workload,
                capped_workload(workload, config),
                all(res.malloc_settings_active for res in results),
                sum(res.wall_s for res in results),
                runs=len(results),
            )
        )
    return merged


def _result(
    plan_name: str,
    per_rank: tuple[tuple[float, ...], ...],
    config: DistributedConfig,
    backend: str,
    workload: Workload,
    built: Workload,
    malloc: bool,
    wall_s: float,
    runs: int,
) -> DistributedResult:
    iteration = tuple(max(step) for step in zip(*per_rank))
    stats = Stats.of(iteration)
    return DistributedResult(
        world_size=config.world_size,
        iteration_ms=iteration,
        median_ms=stats.median,
        iqr_ms=stats.iqr,
        per_rank_median_ms=tuple(Stats.of(r).median for r in per_rank),
        plan_name=plan_name,
        per_rank_ms=per_rank,
        backend=backend,
        batch_size=config.batch_size,
        row_cap_bytes=config.row_cap_bytes,
        capped_rows=tuple((t.name, t.num_embeddings, b.num_embeddings) for t, b in zip(workload.tables, built.tables)),
        malloc_settings_active=malloc,
        wall_s=wall_s,
        runs=runs,
    )


def _check_config(config: DistributedConfig) -> None:
    for field, minimum in (
        ("world_size", 1),
        ("steps", 1),
        ("warmups", 0),
        ("batch_size", 1),
        ("row_cap_bytes", 1),
        ("threads_per_rank", 1),
    ):
        value = getattr(config, field)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise InputError(field, f"must be an integer >= {minimum}, got {value!r}", "fix the DistributedConfig")
    if not (isinstance(config.timeout_s, (int, float)) and math.isfinite(config.timeout_s) and config.timeout_s > 0):
        raise InputError("timeout_s", f"must be > 0, got {config.timeout_s!r}", "fix the DistributedConfig")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _child_environment(config: DistributedConfig) -> Iterator[None]:
    """os.environ as the spawned children must start with; the parent's is restored after."""
    local = config.world_size if config.local_world_size is None else config.local_world_size
    settings = {**MALLOC_SETTINGS, "OMP_NUM_THREADS": str(config.threads_per_rank), "LOCAL_WORLD_SIZE": str(local)}
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _batches(workload: Workload, rank: int, seed: int, device: torch.device) -> list:
    """KeyedJaggedTensors of ``workload.batch_size`` samples, one feature per table."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    rng = np.random.default_rng([seed, rank])
    keys = [t.name for t in workload.tables]
    batches = []
    for _ in range(_BATCHES_PER_RANK):
        lengths, values = [], []
        for table in workload.tables:
            bag = bag_lengths(workload.batch_size, table.pooling_factor)
            lengths.append(bag)
            values.append(zipf_rows(table.num_embeddings, table.zipf_alpha, int(bag.sum()), rng))
        batches.append(
            KeyedJaggedTensor.from_lengths_sync(
                keys=keys,
                values=torch.from_numpy(np.concatenate(values)).to(device),
                lengths=torch.from_numpy(np.concatenate(lengths)).to(device),
            )
        )
    return batches


def _worker(
    rank: int, config: DistributedConfig, backend: str, port: int, plan: ShardingPlan, built: Workload, out_path: str
) -> None:
    """One rank: shard, warm up, time ``config.steps`` iterations, gather the times to rank 0."""
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from autoshard.torchrec.bridge import (
        embedding_bag_collection,
        to_torchrec_plan,
    )

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(config.threads_per_rank)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    dist.init_process_group(
        backend, rank=rank, world_size=config.world_size, timeout=timedelta(seconds=config.timeout_s)
    )
    try:
        module = embedding_bag_collection(built, "meta")
        apply_optimizer_in_backward(torch.optim.SGD, module.parameters(), {"lr": LEARNING_RATE})
        model = DistributedModelParallel(
            module,
            device=device,
            plan=to_torchrec_plan(
                plan,
                built,
                config.world_size,
                compute_device="cuda" if cuda else "cpu",
                local_world_size=config.local_world_size,
            ),
            sharders=[EmbeddingBagCollectionSharder()],
            init_data_parallel=False,
        )
        batches = _batches(built, rank, config.seed, device)
        times = []
        for step in range(config.warmups + config.steps):
            features = batches[step % len(batches)]
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(features)
            out = out.wait() if hasattr(out, "wait") else out
            out.values().sum().backward()
            if cuda:
                torch.cuda.synchronize()
            elapsed_ms = (time.perf_counter() - t0) * 1e3
            if step >= config.warmups:
                times.append(elapsed_ms)
        mine = {"rank": rank, "ms": times, "malloc": malloc_settings_active()}
        gathered: list = [None] * config.world_size
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(gathered, f)
        dist.barrier()
    finally:  # an exception propagates to mp.spawn, which hands its traceback to the parent
        dist.destroy_process_group()
    exit_finished_rank()


def exit_finished_rank() -> None:
    """End a spawned rank whose work is done, skipping interpreter shutdown.

    With TorchRec / FBGEMM loaded, about one exit in four aborts at shutdown ("terminate called
    without an active exception", SIGABRT: a C++ thread still joinable), after the rank's work
    completed; ``mp.spawn`` would report the run as failed. Only call this on success: errors
    must propagate to ``mp.spawn``.
    """
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


__all__ = [
    "exit_finished_rank",
    "DistributedConfig",
    "DistributedResult",
    "DistributedRunError",
    "LEARNING_RATE",
    "capped_workload",
    "compare_distributed",
    "resolve_backend",
    "run_distributed",
]

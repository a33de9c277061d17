"""Trace collection: sample table sets from a synthetic pool, measure them in passes, append.

Sample ids are deterministic under the seed: ids ``0..P-1`` are the pool's tables alone (for
additivity studies and the sum-of-singles baseline), then ``samples`` sets of 1..``max_tables``
tables, then ``large_samples`` sets of ``max_tables+1``..``large_max_tables`` tables. Every pass
measures every sample once; a rerun with the same options resumes where the last one stopped.

By default every pool table is fp32 with SGD (the shipped traces). ``precisions`` and
``optimizers`` give each pool table a seeded draw of its bytes per element and optimizer instead;
the header's table rows record them, so every sample's tables carry them. ``batch_sizes`` gives
each sample a seeded draw of its batch size; by default every sample runs at the benchmark's one
batch size. Every line records its ``batch``. ``column_shard_share`` replaces that share of the
tables of every set (not the singles) by a column shard of them, ``name[0:w]`` with ``w`` a half,
a quarter or an eighth of the dim (at least 4 columns): what a device holds where a plan splits a
table, and the same rows, lookups and skew at a narrower width. ``row_shard_share`` and
``replica_share`` (their own stream, drawn before the column shards) replace a share of the tables
of every set by what TorchRec's other sharding types put on a device (``autoshard.core.sharding``):
one row block of ``k`` (from ``row_shard_ways``), drawn uniformly among the table's blocks, as
``row_shards`` cuts and prices it (``name[r0:r1]``: R / k rows, pooling factor L x s_j), or a
data-parallel replica on ``W`` devices (from ``replica_world_sizes``; ``name[dp/W]``: all rows,
pooling factor L / W). Pooling factors below 1 run as bags of 0 or 1 lookups
(``cost_model.bench.indices.bag_lengths``). The header lists those shards apart (split ``shard``:
not pool tables, so no plan task draws them).

Under ``torchrun`` (``WORLD_SIZE`` > 1) rank r measures the ids with ``id % world == r`` on its
own device into ``OUT.rank<r>.part``; rank 0 then gathers all parts into ``OUT``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.synthetic import PoolConfig, TablePool, generate_pool
from autoshard.core.types import Optimizer, Table, TableShard, replica, row_shards
from cost_model.bench.harness import check_benchable, measure
from cost_model.features import physical_rows
from cost_model.profile import detect_profile, malloc_settings_active
from cost_model.traces.records import BenchConfig
from cost_model.traces.store import (
    TraceWriter,
    has_header,
    iter_lines,
    make_header,
    measured_passes,
    write_trace,
)

ROW_SHARD_WAYS = (2, 4, 8, 16, 32)
REPLICA_WORLD_SIZES = (8, 16, 32, 64, 128)
# CollectConfig fields that joined after the first traces: a header records them only when set
_NEW_PLAN_FIELDS = (
    "precisions",
    "optimizers",
    "batch_sizes",
    "column_shard_share",
    "row_shard_share",
    "row_shard_ways",
    "replica_share",
    "replica_world_sizes",
)

# fields whose `autoshard bench collect` option is not the field's name
_OPTIONS = {"column_shard_share": "--column-shards", "row_shard_share": "--row-shards", "replica_share": "--replicas"}


@dataclass(frozen=True, slots=True)
class CollectConfig:
    bench: BenchConfig = field(default_factory=BenchConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    samples: int = 1000
    max_tables: int = 10
    large_samples: int = 0
    large_max_tables: int = 20
    passes: int = 1
    test_fraction: float = 0.2  # share of sets drawn from the test pool
    set_memory_gb: float = 3.0  # benchmarked bytes (after the row cap) of one set, at most
    singles: bool = True
    seed: int = 0
    precisions: tuple[int, ...] = (4,)  # bytes per element drawn for each pool table
    optimizers: tuple[str, ...] = ("sgd",)  # Optimizer values drawn for each pool table
    batch_sizes: tuple[int, ...] = ()  # drawn for each sample; () = the benchmark's batch size
    column_shard_share: float = 0.0  # share of a set's tables measured as one column shard of them
    row_shard_share: float = 0.0  # share of a set's tables measured as one row block of them
    row_shard_ways: tuple[int, ...] = ROW_SHARD_WAYS  # k: a row block is drawn of k blocks
    replica_share: float = 0.0  # share of a set's tables measured as a data-parallel replica
    replica_world_sizes: tuple[int, ...] = REPLICA_WORLD_SIZES  # W: a replica serves 1 / W of the samples

    def __post_init__(self) -> None:
        valid_optimizers = {o.value for o in Optimizer}
        checks = [
            ("precisions", bool(self.precisions) and set(self.precisions) <= {1, 2, 4, 8}, "1, 2, 4 or 8"),
            (
                "optimizers",
                bool(self.optimizers) and set(self.optimizers) <= valid_optimizers,
                " or ".join(sorted(valid_optimizers)),
            ),
            ("samples", self.samples >= 0, ">= 0"),
            ("max_tables", self.max_tables >= 1, ">= 1"),
            ("large_samples", self.large_samples >= 0, ">= 0"),
            (
                "large_max_tables",
                self.large_samples == 0 or self.large_max_tables > self.max_tables,
                f"above --max-tables ({self.max_tables})",
            ),
            ("passes", self.passes >= 1, ">= 1"),
            ("test_fraction", 0 <= self.test_fraction <= 1, "in [0, 1]"),
            ("set_memory_gb", self.set_memory_gb > 0, "> 0"),
            ("batch_sizes", all(b >= 1 for b in self.batch_sizes), "integers >= 1"),
            ("column_shard_share", 0 <= self.column_shard_share <= 1, "in [0, 1]"),
            ("row_shard_share", 0 <= self.row_shard_share <= 1, "in [0, 1]"),
            ("replica_share", 0 <= self.replica_share <= 1, "in [0, 1]"),
            (
                "replica_share",
                self.row_shard_share + self.replica_share <= 1,
                f"at most 1 - --row-shard-share ({1 - self.row_shard_share:g})",
            ),
            ("row_shard_ways", bool(self.row_shard_ways) and all(k >= 2 for k in self.row_shard_ways), "integers >= 2"),
            (
                "replica_world_sizes",
                bool(self.replica_world_sizes) and all(w >= 2 for w in self.replica_world_sizes),
                "integers >= 2",
            ),
        ]
        for name, ok, valid in checks:
            if not ok:
                option = _OPTIONS.get(name, "--" + name.replace("_", "-"))
                raise InputError(
                    option, f"must be {valid}, got {getattr(self, name)!r}", "see `autoshard bench collect --help`"
                )

    @property
    def plan_dict(self) -> dict:
        """What fixes the samples (not ``passes``: a later run may add passes to a file)."""
        out = asdict(self)
        out.pop("bench")
        out.pop("passes")
        defaults = {f.name: f.default for f in fields(self)}
        for name in _NEW_PLAN_FIELDS:  # absent at the default:
            if out[name] == defaults[name]:  # older trace headers still match
                out.pop(name)
        pool_defaults = asdict(PoolConfig())
        for name in ("dims", "one_hot_share", "pooling"):
            if out["pool"][name] == pool_defaults[name]:
                out["pool"].pop(name)
        return out


@dataclass(frozen=True, slots=True)
class SampleSpec:
    id: int
    kind: str
    split: str
    tables: tuple[Table, ...]
    batch_size: int


def collection_pool(config: CollectConfig) -> TablePool:
    """The synthetic pool, each table with a seeded draw from ``precisions`` and ``optimizers``."""
    pool = generate_pool(config.pool)

    def vary(table: Table, index: int) -> Table:
        rng = np.random.default_rng([config.seed, 1_000_003, index])
        return replace(
            table,
            bytes_per_element=int(rng.choice(config.precisions)),
            optimizer=Optimizer(str(rng.choice(config.optimizers))),
        )

    varied = [vary(t, i) for i, t in enumerate(pool.all)]
    return TablePool(tuple(varied[: len(pool.train)]), tuple(varied[len(pool.train) :]))


def sample_specs(config: CollectConfig, pool: TablePool) -> list[SampleSpec]:
    """Every sample of the collection plan, in id order."""
    specs = (
        [SampleSpec(i, "single", pool.split_of(t.name), (t,), _batch_of(config, i)) for i, t in enumerate(pool.all)]
        if config.singles
        else []
    )
    budget = config.set_memory_gb * 1024**3
    ranges = [(1, config.max_tables)] * config.samples
    ranges += [(config.max_tables + 1, config.large_max_tables)] * config.large_samples
    for low, high in ranges:
        sample_id = len(specs)
        rng = np.random.default_rng([config.seed, sample_id])
        split = "test" if rng.random() < config.test_fraction else "train"
        source = pool.test if split == "test" else pool.train
        size = int(rng.integers(low, high + 1))
        chosen, used = [], 0
        for index in rng.permutation(len(source)):
            table = source[index]
            cost = physical_rows(table, config.bench.row_cap_bytes) * table.embedding_dim * table.bytes_per_element
            if used + cost <= budget:
                chosen.append(table)
                used += cost
            if len(chosen) == size:
                break
        tables = _column_shards(config, sample_id, _row_shards(config, sample_id, chosen))
        specs.append(SampleSpec(sample_id, "set", split, tables, _batch_of(config, sample_id)))
    return specs


SHARD_PARTS = (2, 4, 8)
MIN_SHARD_COLUMNS = 4


def _column_shards(config: CollectConfig, sample_id: int, tables: list[Table]) -> tuple[Table, ...]:
    """``tables`` with a seeded ``column_shard_share`` of them replaced by a column shard (its own
    stream, so the sets drawn do not depend on it)."""
    if not config.column_shard_share:
        return tuple(tables)
    rng = np.random.default_rng([config.seed, sample_id, 3_000_017])
    out = []
    for table in tables:
        widths = [
            table.embedding_dim // k
            for k in SHARD_PARTS
            if table.embedding_dim % k == 0 and table.embedding_dim // k >= MIN_SHARD_COLUMNS
        ]
        if rng.random() < config.column_shard_share and widths:
            table = TableShard(table, 0, int(rng.choice(widths))).as_table
        out.append(table)
    return tuple(out)


def _row_shards(config: CollectConfig, sample_id: int, tables: list[Table]) -> list[Table]:
    """``tables`` with a seeded ``row_shard_share`` of them replaced by one row block and a
    ``replica_share`` by a data-parallel replica (their own stream: the sets drawn, and the column
    shards' draws, do not depend on it). A table of fewer rows than the ways drawn has fewer
    blocks; one block of a 1-row table is the table itself, at its lookup share."""
    if not (config.row_shard_share or config.replica_share):
        return tables
    rng = np.random.default_rng([config.seed, sample_id, 4_000_037])
    out = []
    for table in tables:
        u = rng.random()
        if u < config.row_shard_share:
            blocks = row_shards(table, int(rng.choice(config.row_shard_ways)), ShardingType.ROW_WISE)
            table = blocks[int(rng.integers(len(blocks)))].as_table
        elif u < config.row_shard_share + config.replica_share:
            world = int(rng.choice(config.replica_world_sizes))
            table = replace(replica(table, world).as_table, name=f"{table.name}[dp/{world}]")
        out.append(table)
    return out


def _batch_of(config: CollectConfig, sample_id: int) -> int:
    """A sample's batch size: a seeded draw from ``batch_sizes`` (its own stream, so the sets
    drawn do not depend on it), or the benchmark's batch size."""
    if not config.batch_sizes:
        return config.bench.batch_size
    return int(np.random.default_rng([config.seed, sample_id, 2_000_003]).choice(config.batch_sizes))


def _world() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def collect(
    config: CollectConfig, out: Path, on_progress: Callable[[int, int], None] = lambda done, total: None
) -> int:
    """Measure every (sample, pass) not yet in ``out``; returns how many were measured now."""
    rank, world = _world()
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    bench = config.bench
    if bench.device.startswith("cuda") and world > 1:
        bench = BenchConfig(**{**asdict(bench), "device": f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"})
    pool = collection_pool(config)
    check_benchable(pool.all, bench.mode)
    profile = detect_profile(bench.device, bench.mode, bench.threads)
    bench_dict = {
        **asdict(bench),
        "mode": bench.mode.value,
        "device": bench.device.split(":")[0],
        "malloc_settings": malloc_settings_active(),
    }
    specs = sample_specs(config, pool)
    pool_names = {t.name for t in pool.all}
    shards = {t.name: (t, "shard") for s in specs for t in s.tables if t.name not in pool_names}
    header = make_header(
        profile,
        bench_dict,
        config.plan_dict,
        [(t, "train") for t in pool.train] + [(t, "test") for t in pool.test] + list(shards.values()),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    target = out if world == 1 else out.with_name(f"{out.name}.rank{rank}.part")
    gathered = (
        {(l["id"], l["pass"]) for l in iter_lines(out) if l.get("type") == "sample"}
        if world > 1 and has_header(out, header)
        else set()
    )  # samples earlier runs gathered
    done = measured_passes(target, header) | gathered
    specs = [s for s in specs if s.id % world == rank]
    todo = [(p, s) for p in range(config.passes) for s in specs if (s.id, p) not in done]
    total, measured = len(specs) * config.passes, 0
    on_progress(total - len(todo), total)
    if not todo and world == 1:
        return 0  # complete (and perhaps calibrated since): nothing to open for writing
    writer = TraceWriter(target, header)
    try:
        for pass_index, spec in todo:
            m = measure(
                spec.tables,
                replace(bench, batch_size=spec.batch_size),
                seed=config.seed * 1_000_003 + spec.id * 101 + pass_index,
            )
            writer.append(
                {
                    "type": "sample",
                    "id": spec.id,
                    "pass": pass_index,
                    "kind": spec.kind,
                    "split": spec.split,
                    "tables": [t.name for t in spec.tables],
                    "batch": spec.batch_size,
                    "fwd": m.forward.to_dict(),
                    "bwd": m.backward.to_dict(),
                    "total": m.total.to_dict(),
                }
            )
            measured += 1
            on_progress(total - len(todo) + measured, total)
    finally:
        writer.close()
    if world > 1:
        _gather(out, header, world, rank)
    return measured


def _gather(out: Path, header: dict, world: int, rank: int) -> None:
    """Rank 0 merges every rank's part into ``out`` (after a barrier), then removes the parts."""
    import torch.distributed as dist

    dist.barrier()
    if rank == 0:
        parts = [out.with_name(f"{out.name}.rank{r}.part") for r in range(world)]
        lines = [l for p in [out, *parts] if p.exists() for l in iter_lines(p) if l.get("type") == "sample"]
        unique = {(l["id"], l["pass"]): l for l in lines}
        write_trace(out, header, [unique[k] for k in sorted(unique, key=lambda k: (k[1], k[0]))])
        for p in parts:
            p.unlink(missing_ok=True)
    dist.barrier()
    dist.destroy_process_group()

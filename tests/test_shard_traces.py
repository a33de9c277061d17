"""Traces of what split plans put on a device: pools of heavy multi-hot tables (`--pooling`) and
sets holding column shards of their tables (`--column-shards`)."""

from dataclasses import replace

from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.synthetic import PoolConfig, generate_pool
from cost_model.bench.collect import (
    CollectConfig,
    collect,
    collection_pool,
    sample_specs,
)
from cost_model.profile import ExecutionMode
from cost_model.traces.records import BenchConfig
from cost_model.traces.store import read_traces

BENCH = BenchConfig(batch_size=16, warmups=0, repeats=1, mode=ExecutionMode.EMBEDDING_BAG, row_cap_bytes=2**20)


def test_a_heavy_pool_draws_every_pooling_factor_from_its_range_and_none_one_hot():
    pool = generate_pool(PoolConfig(size=200, seed=3, pooling=(10.0, 150.0)))
    poolings = [t.pooling_factor for t in pool.all]
    assert min(poolings) >= 10 and max(poolings) <= 150
    assert min(poolings) < 20 and max(poolings) > 100  # spread over the range, not piled at an end
    default = generate_pool(PoolConfig(size=200, seed=3))
    assert sum(t.pooling_factor == 1 for t in default.all) > 30  # the default pool keeps its one-hot share
    assert "pooling" not in CollectConfig().plan_dict["pool"]  # headers of the shipped traces still match


def test_column_shards_replace_tables_of_the_same_sets_by_narrower_slices_of_them():
    base = CollectConfig(bench=BENCH, pool=PoolConfig(size=40, seed=5), samples=30, max_tables=5, singles=False)
    pool = collection_pool(base)
    whole, split = (sample_specs(c, pool) for c in (base, replace(base, column_shard_share=1.0)))
    assert "column_shard_share" not in base.plan_dict
    shards = 0
    for a, b in zip(whole, split, strict=True):
        assert (a.id, a.split, a.batch_size, len(a.tables)) == (b.id, b.split, b.batch_size, len(b.tables))
        for table, maybe_shard in zip(a.tables, b.tables):
            if table.embedding_dim < 8:  # no half of it has 4 columns
                assert maybe_shard == table
                continue
            shards += 1
            assert maybe_shard.name.startswith(f"{table.name}[0:")
            assert maybe_shard.embedding_dim in {table.embedding_dim // k for k in (2, 4, 8)}
            assert maybe_shard.embedding_dim >= 4
            assert (
                replace(
                    maybe_shard,
                    name=table.name,
                    embedding_dim=table.embedding_dim,
                    sharding_type=table.sharding_type,
                )
                == table
            )
    assert shards > 30
    half = sample_specs(replace(base, column_shard_share=0.5), pool)
    shares = sum("[" in t.name for s in half for t in s.tables) / sum(len(s.tables) for s in half)
    assert 0.25 < shares < 0.6


def test_collected_shards_read_back_as_tables_and_are_no_pool_table(tmp_path):
    out = tmp_path / "shards.jsonl"
    config = CollectConfig(
        bench=BENCH,
        pool=PoolConfig(size=8, seed=2, dims=(16, 32)),
        samples=4,
        max_tables=3,
        singles=False,
        column_shard_share=1.0,
    )
    assert collect(config, out) == 4
    traces = read_traces(out)
    measured = {t.name: t for s in traces.samples for t in s.tables}
    assert measured and all("[0:" in name for name in measured)
    assert all(s.passes[0].total.median > 0 for s in traces.samples)
    listed = {d["name"]: d["split"] for d in traces.header["tables"]}
    assert {listed[name] for name in measured} == {"shard"}  # `bench plans` draws tasks from train / test only
    assert sum(split in ("train", "test") for split in listed.values()) == 8
    assert traces.header["plan"]["column_shard_share"] == 1.0
    assert collect(config, out) == 0  # resumes: the header (shards included) matches


def test_a_bad_pooling_range_is_refused_naming_the_option(tmp_path):
    for value in ("10", "0.5,10", "20,10", "a,b"):
        result = CliRunner().invoke(app, ["bench", "collect", "--out", str(tmp_path / "x.jsonl"), "--pooling", value])
        assert result.exit_code != 0 and "--pooling" in result.output and "Traceback" not in result.output

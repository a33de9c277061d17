"""Traces of what TorchRec's row-wise and data-parallel sharding put on a device: sets in which a
share of the tables is one row block of them or a replica (`--row-shards`, `--replicas`), with
pooling factors below 1 run as bags of 0 or 1 lookups."""

import math
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.sharding import SCATTER_PRIME, ShardingType, scattered_row
from autoshard.core.synthetic import PoolConfig
from autoshard.core.types import Table, replica, row_shards
from cost_model.bench import indices
from cost_model.bench.collect import CollectConfig, collect, collection_pool, sample_specs
from cost_model.bench.harness import BenchConfig, make_batch, measure
from cost_model.bench.indices import bag_lengths, zipf_rows
from cost_model.profile import ExecutionMode, fbgemm_available
from cost_model.traces.store import read_traces

BENCH = BenchConfig(batch_size=16, warmups=0, repeats=1, mode=ExecutionMode.EMBEDDING_BAG, row_cap_bytes=2**20)
BASE = CollectConfig(bench=BENCH, pool=PoolConfig(size=60, seed=5), samples=40, max_tables=6, singles=False)
MODES = [ExecutionMode.EMBEDDING_BAG, ExecutionMode.FBGEMM_TBE]


@pytest.mark.parametrize("pooling", [0.5, 0.125, 0.03, 0.2, 1 / 3, 0.999])
@pytest.mark.parametrize("batch", [1, 7, 512, 2048, 16384])
def test_bags_below_one_lookup_hold_0_or_1_and_average_the_pooling_factor(pooling, batch):
    lengths = bag_lengths(batch, pooling)
    assert len(lengths) == batch and set(np.unique(lengths)) <= {0, 1}
    assert lengths.sum() == math.floor(batch * pooling + 1e-9)  # B x L lookups, exactly where that is whole
    if batch * pooling >= 1:
        assert abs(lengths.mean() - pooling) <= 1 / batch
        gaps = np.diff(np.flatnonzero(lengths))  # spread evenly, not bunched at one end
        assert len(gaps) == 0 or gaps.max() - gaps.min() <= 1


def test_bags_of_one_lookup_or_more_are_unchanged():
    assert (bag_lengths(10, 1.0) == 1).all()
    lengths = bag_lengths(1000, 2.3)
    assert lengths.min() == 2 and lengths.max() == 3 and lengths.sum() == 2300
    assert (bag_lengths(2048, 0.125) == np.tile([0, 0, 0, 0, 0, 0, 0, 1], 256)).all()


def test_row_ids_scatter_with_the_cores_prime():
    assert not hasattr(indices, "_SCATTER_PRIME")
    rows = zipf_rows(1000, 3.0, 20_000, np.random.default_rng(0))
    assert (rows == scattered_row(0, 1000)).mean() > 0.5  # the hottest rank lands where the core puts it
    assert scattered_row(7, 1000) == (7 * SCATTER_PRIME) % 1000


@pytest.mark.parametrize("mode", MODES)
def test_shard_tables_with_empty_bags_train_and_time(mode):
    """FBGEMM TBE and EmbeddingBag take zero-length bags; a table with no lookup in the batch runs."""
    if mode is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        pytest.skip("fbgemm-gpu-cpu not installed")
    table = Table("t", 10_000, 16, 1.0, 1.0)
    shards = [s.as_table for s in row_shards(table, 8, ShardingType.ROW_WISE)] + [replica(table, 128).as_table]
    shards.append(Table("none", 50, 8, 0.001))  # B x L < 1: no lookup at all this batch
    config = BenchConfig(batch_size=512, warmups=1, repeats=3, mode=mode)
    indices_, offsets = make_batch(shards, config, np.random.default_rng(0))
    assert len(offsets) == 512 * len(shards) + 1 and int(offsets[-1]) == len(indices_)
    assert int(offsets[-1] - offsets[-513]) == 0
    m = measure(shards, config)
    assert math.isfinite(m.total.median) and m.total.median > 0


def test_tbe_updates_only_the_rows_of_nonempty_bags():
    if not fbgemm_available():
        pytest.skip("fbgemm-gpu-cpu not installed")
    import torch

    from cost_model.bench.harness import _build_tbe

    config = BenchConfig(batch_size=8, mode=ExecutionMode.FBGEMM_TBE)
    forward, backward = _build_tbe([Table("a", 20, 8, 0.25)], config)
    indices_ = torch.tensor([3, 11])
    offsets = torch.tensor([0, 0, 1, 1, 1, 1, 2, 2, 2])  # bags 1 and 5 hold one id each, the rest none
    backward(forward(indices_, offsets))
    out = forward(indices_, offsets).detach()
    assert (out.abs().sum(1) > 0).tolist() == [False, True, False, False, False, True, False, False]


def test_row_shards_and_replicas_replace_tables_of_the_same_sets():
    pool = collection_pool(BASE)
    whole = sample_specs(BASE, pool)
    sharded = sample_specs(replace(BASE, row_shard_share=0.5, replica_share=0.3), pool)
    by_name = {t.name: t for t in pool.all}
    kinds = {"row": 0, "replica": 0, "whole": 0}
    for a, b in zip(whole, sharded, strict=True):
        assert (a.id, a.split, a.batch_size, len(a.tables)) == (b.id, b.split, b.batch_size, len(b.tables))
        for table, shard in zip(a.tables, b.tables):
            assert shard.name.split("[")[0] == table.name and by_name[table.name] == table
            same = (shard.embedding_dim, shard.zipf_alpha, shard.bytes_per_element, shard.optimizer)
            assert same == (table.embedding_dim, table.zipf_alpha, table.bytes_per_element, table.optimizer)
            if shard.name.endswith("]") and "[dp/" in shard.name:
                kinds["replica"] += 1
                world = int(shard.name.split("[dp/")[1][:-1])
                assert world in (8, 16, 32, 64, 128)
                assert shard == replace(replica(table, world).as_table, name=shard.name)
            elif "[r" in shard.name:
                kinds["row"] += 1
                blocks = {
                    s.as_table for ways in (2, 4, 8, 16, 32) for s in row_shards(table, ways, ShardingType.ROW_WISE)
                }
                assert shard in blocks and shard.num_embeddings <= table.num_embeddings
            else:
                kinds["whole"] += 1
                assert shard == table
    total = sum(kinds.values())
    assert 0.35 < kinds["row"] / total < 0.65 and 0.15 < kinds["replica"] / total < 0.45
    assert any(t.pooling_factor < 1 for s in sharded for t in s.tables)
    assert "row_shard_share" not in BASE.plan_dict and "replica_world_sizes" not in BASE.plan_dict


def test_only_the_chosen_ways_and_world_sizes_are_drawn():
    config = replace(BASE, row_shard_share=0.6, replica_share=0.4, row_shard_ways=(4,), replica_world_sizes=(16,))
    specs = sample_specs(config, collection_pool(config))
    pool = {t.name: t for t in collection_pool(config).all}
    for table in (t for s in specs for t in s.tables):
        base = pool[table.name.split("[")[0]]
        if "[dp/" in table.name:
            assert table.name.endswith("[dp/16]") and table.pooling_factor == pytest.approx(base.pooling_factor / 16)
        else:
            assert table.num_embeddings in {size for _, size in _blocks(base, 4)}


def _blocks(table, ways):
    from autoshard.core.sharding import row_blocks

    return row_blocks(table.num_embeddings, ways)


def test_collected_row_shards_and_replicas_read_back_and_resume(tmp_path):
    out = tmp_path / "rows.jsonl"
    config = replace(
        BASE, pool=PoolConfig(size=10, seed=2), samples=5, max_tables=4, row_shard_share=0.5, replica_share=0.5
    )
    assert collect(config, out) == 5
    traces = read_traces(out)
    measured = {t.name: t for s in traces.samples for t in s.tables}
    listed = {d["name"]: d["split"] for d in traces.header["tables"]}
    assert measured and all(listed[name] == "shard" for name in measured)
    assert any(t.pooling_factor < 1 for t in measured.values())
    assert traces.header["plan"]["row_shard_share"] == 0.5 and traces.header["plan"]["replica_share"] == 0.5
    assert all(s.passes[0].total.median > 0 for s in traces.samples)
    assert collect(config, out) == 0  # resumes: the header (shards included) matches


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--row-shards", "0.7", "--replicas", "0.5"], "--replicas"),
        (["--row-shards", "1.5"], "--row-shards"),
        (["--batch-sizes", "512,x"], "--batch-sizes"),
    ],
)
def test_bad_shard_options_are_refused_naming_the_option(tmp_path, args, option):
    result = CliRunner().invoke(app, ["bench", "collect", "--out", str(tmp_path / "x.jsonl"), *args])
    assert result.exit_code != 0 and option in result.output and "Traceback" not in result.output


def test_the_row_shard_traces_hold_shards_below_one_lookup_and_controls_of_the_same_pool():
    from pathlib import Path

    stem = Path(__file__).resolve().parents[1] / "data" / "traces" / "cpu-intel-r-xeon-r-processor-f6m207-fbgemm_tbe-t1"
    shards, control = read_traces(f"{stem}.row-shards.jsonl.gz"), read_traces(f"{stem}.row-shards-control.jsonl.gz")
    assert shards.profile.id == control.profile.id and shards.header["bench"] == control.header["bench"]
    assert shards.header["plan"]["pool"] == control.header["plan"]["pool"]  # one pool: splits (b) agree
    assert {len(s.passes) for s in shards.samples + control.samples} == {3}
    tables = [t for s in shards.samples for t in s.tables]
    assert min(t.pooling_factor for t in tables) < 0.01 and any("[dp/" in t.name for t in tables)
    assert sum("[r" in t.name for t in tables) > 0.3 * len(tables)
    assert all("[" not in t.name for s in control.samples for t in s.tables)
    assert {s.split for s in shards.samples} == {"train", "test"}

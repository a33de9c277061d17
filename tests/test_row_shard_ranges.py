"""Pooling factors below 1 (row-wise shards, data-parallel replicas): finite features, priced no
higher than at the trained minimum, and flagged when a plan's shards leave the trained ranges."""

import numpy as np
import pytest
import torch

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Workload, replica, row_shards
from cost_model.checkpoint import load_cost_model
from cost_model.features import NUM_FEATURES, FeatureCache, table_features_many
from cost_model.network import NetworkConfig, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile, ExecutionMode
from cost_model.ranges import TrainedRanges

PROFILE = DeviceProfile("cpu", "test cpu", ExecutionMode.FBGEMM_TBE, 1, "2.13.0", "1.8.0")
ONE_HOT = Table("one_hot", 1_000_000, 64, 1.0, 1.0)
RANGES = TrainedRanges((512, 16384), (1, 20), (100, 10**7), (8, 128), (1.0, 50.0), (0.0, 1.4), (4,), ("sgd",))


def model(ranges: TrainedRanges | None = RANGES) -> NeuralCostModel:
    torch.manual_seed(0)
    return NeuralCostModel(
        SetCostNetwork(NetworkConfig()),
        torch.zeros(NUM_FEATURES),
        torch.ones(NUM_FEATURES),
        PROFILE,
        2**27,
        2048,
        ranges=ranges,
    )


@pytest.mark.parametrize("batch", [1, 512, 16384])
def test_features_of_pooling_factors_below_1_are_finite_and_ordered(batch):
    poolings = [1.0, 0.5, 0.125, 1 / 128, 1e-4, 1e-7]
    f = table_features_many([Table(f"t{i}", 10**6, 64, L, 1.0) for i, L in enumerate(poolings)], batch, 2**27)
    assert np.isfinite(f).all()
    assert (np.diff(f[:, 4]) < 0).all() and f[1:, 4].max() < 0  # log10 L: negative below 1
    assert (np.diff(f[:, 6]) < 0).all()  # log10 lookups, below 0 under one lookup a batch
    assert (np.diff(f[:, 8]) < 0).all() and (f[:, 10] >= 0).all()  # distinct rows touched, share of the table


def test_below_the_minimum_a_table_is_featurised_at_it():
    tables = [Table("a", 5000, 32, 0.01, 0.5), Table("b", 5000, 32, 3.0, 0.5)]
    clamped = table_features_many(tables, 2048, 2**27, min_pooling=1.0)
    at_min = table_features_many([Table("a", 5000, 32, 1.0, 0.5)], 2048, 2**27)
    assert (clamped[0] == at_min[0]).all()
    assert (clamped[1] == table_features_many(tables[1:], 2048, 2**27)[0]).all()  # in range: unchanged
    cache = FeatureCache(2**27)
    before = cache(tables[:1], 2048).copy()
    cache.min_pooling = 1.0  # a new minimum empties the cache
    assert not (cache(tables[:1], 2048) == before).all() and (cache(tables[:1], 2048) == at_min).all()


def test_row_shards_and_replicas_below_the_minimum_cost_at_most_the_table_at_the_minimum():
    m = model()
    shards = [s.as_table for s in row_shards(ONE_HOT, 8, ShardingType.ROW_WISE)] + [replica(ONE_HOT, 64).as_table]
    assert all(s.pooling_factor < 1 for s in shards)
    for batch in (512, 4096):
        at_min = [Table(s.name, s.num_embeddings, 64, 1.0, 1.0) for s in shards]
        assert m.predict_many([[s] for s in shards], batch) == pytest.approx(
            m.predict_many([[t] for t in at_min], batch)
        )
    # without trained ranges (an older checkpoint) nothing is clamped
    free = model(None)
    assert free.predict_many([[shards[-1]]], 512) != pytest.approx(free.predict_many([[ONE_HOT]], 512))


def test_setting_ranges_reprices_cached_tables():
    m = model(None)
    shard = replica(ONE_HOT, 128).as_table
    unclamped = m.predict_many([[shard]], 2048)[0]
    m.ranges = RANGES
    assert m.predict_many([[shard]], 2048)[0] == pytest.approx(m.predict_many([[ONE_HOT]], 2048)[0])
    m.ranges = None
    assert m.predict_many([[shard]], 2048)[0] == pytest.approx(unclamped)


def test_shards_below_the_trained_pooling_are_flagged_though_their_table_is_not():
    m = model()
    assert m.check_workload(Workload((ONE_HOT,), 2048)) == ()
    shards = [s.as_table for s in row_shards(ONE_HOT, 8, ShardingType.ROW_WISE)] + [replica(ONE_HOT, 64).as_table]
    warnings = m.check_tables(shards)
    assert len(warnings) == 1
    assert warnings[0].startswith("9 shards have pooling_factor below the trained min 1 (e.g. 'one_hot[dp]': 0.015625)")
    assert "upper bound" in warnings[0]
    # within LOG_MARGIN of the minimum: not flagged (a 2-way block of a one-hot table serves about half of it)
    assert m.check_tables([Table("half", 5000, 64, 0.7, 0.0)]) == ()
    assert "tables have" in m.check_tables([Table("x", 50, 64, 0.1), Table("y", 50, 64, 0.2)], "table")[0]
    assert model(None).check_tables(shards) == ()


def test_a_shard_of_an_unseen_precision_is_refused():
    with pytest.raises(InputError, match="bytes_per_element"):
        model().check_tables([Table("half[dp]", 100, 8, 0.5, 0.0, 2)])


def test_the_shipped_model_flags_a_one_hot_tables_row_shards_and_prices_them_finite():
    shipped = load_cost_model("data/models/default")
    low = shipped.ranges.pooling[0]
    shards = [s.as_table for s in row_shards(ONE_HOT, 32, ShardingType.ROW_WISE)]
    assert any("pooling_factor below the trained min" in w for w in shipped.check_tables(shards))
    costs = np.array(shipped.predict_many([[s] for s in shards], 2048))
    assert np.isfinite(costs).all() and (costs > 0).all()
    at_min = [Table(s.name, s.num_embeddings, s.embedding_dim, max(low, s.pooling_factor), 1.0) for s in shards]
    assert costs == pytest.approx(shipped.predict_many([[t] for t in at_min], 2048))

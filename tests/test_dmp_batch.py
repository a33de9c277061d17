"""The batch as DMP runs it: ``batch_size`` is samples per rank; a sharded shard is priced at every
rank's samples (B x W bags), a data-parallel replica at its own B with its full pooling factor, in
a set of its own; every path of a cost model (predict, accumulator, edits) prices alike."""

import numpy as np
import pytest

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import bound_to_task
from autoshard.core.dmp_batch import DmpBatch, as_run, at_dmp_batch, bags_served
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, TableShard, Topology, Workload, replica, row_shards
from tests.cost_models import AnalyticalTestCostModel

T = Table("t", 1000, 16, pooling_factor=4.0)
U = Table("u", 500, 8, pooling_factor=2.0)


def test_a_sharded_shard_serves_every_ranks_samples_and_a_replica_its_own_by_hand():
    """AnalyticalTestCostModel: bags x pooling x dim x 4 bytes / 1e7, + 0.1 a table (+5% a table
    more in one set). 100 samples per rank on 2 ranks."""
    model = DmpBatch(AnalyticalTestCostModel(), 2)
    # table-wise: 200 bags x 4 x 16 x 4 = 51,200 bytes
    assert model.predict([T], 100) == pytest.approx(51_200 / 1e7 + 0.1)
    # a replica (its as_table: half the lookups) runs its own 100 bags at the full pooling factor 4
    dp = replica(T, 2).as_table
    assert dp.pooling_factor == 2.0 and as_run(dp, 2).pooling_factor == 4.0
    assert model.predict([dp], 100) == pytest.approx(25_600 / 1e7 + 0.1)
    # both on one rank: two kernels, priced apart (no co-location term between them)
    assert model.predict([T, dp], 100) == pytest.approx(51_200 / 1e7 + 0.1 + 25_600 / 1e7 + 0.1)
    # a row block: every rank's 200 bags, its share of the ids
    block = row_shards(T, 2, ShardingType.ROW_WISE)[0].as_table
    assert model.predict([block], 100) == pytest.approx(200 * block.pooling_factor * 16 * 4 / 1e7 + 0.1)
    assert bags_served(T, 100, 2) == 200 and bags_served(dp, 100, 2) == 100


def test_every_path_prices_alike_with_and_without_replicas():
    model = DmpBatch(AnalyticalTestCostModel(), 4)
    dp_t, dp_u = replica(T, 4).as_table, replica(U, 4).as_table
    col = TableShard(T, 0, 8).as_table
    sets = [[T, dp_u], [U], [], [col, dp_t, U]]
    accumulator = model.accumulator(len(sets), 64)
    for i, tables in enumerate(sets):
        for table in tables:
            accumulator.add(i, table)
    assert accumulator.costs() == pytest.approx(model.predict_many(sets, 64))
    for added in (U, dp_t):
        expected = model.predict_many([[*s, added] for s in sets], 64)
        assert accumulator.costs_if_added(added) == pytest.approx(expected)
        assert accumulator.costs_if_added(added, np.array([3, 1])) == pytest.approx([expected[3], expected[1]])
    edits = [(0, 1, None), (0, 0, dp_t), (1, None, dp_t), (2, None, None), (3, 1, U), (3, 0, dp_u), (1, 0, col)]
    rebuilt = [[T], [dp_u, dp_t], [U, dp_t], [], [col, U, U], [dp_t, U, dp_u], [col]]
    assert model.predict_edits(sets, edits, 64) == pytest.approx(model.predict_many(rebuilt, 64))
    plain = [[T], [U, col]]  # base sets without a replica, a replica added
    edits = [(0, None, dp_u), (1, 0, dp_t), (1, 1, None)]
    rebuilt = [[T, dp_u], [col, dp_t], [U]]
    assert model.predict_edits(plain, edits, 64) == pytest.approx(model.predict_many(rebuilt, 64))


def test_the_shipped_models_fast_paths_price_as_predict_many(shipped_model):
    model = DmpBatch(shipped_model, 2)
    dp = replica(U, 2).as_table
    sets = [[T, dp], [U], [dp]]
    accumulator = model.accumulator(len(sets), 256)
    for i, tables in enumerate(sets):
        for table in tables:
            accumulator.add(i, table)
    assert accumulator.costs() == pytest.approx(model.predict_many(sets, 256), rel=1e-4)
    assert accumulator.costs_if_added(dp) == pytest.approx(model.predict_many([[*s, dp] for s in sets], 256), rel=1e-4)
    edits = [(0, 1, None), (1, None, dp), (2, 0, T), (0, 0, None)]
    rebuilt = [[T], [U, dp], [T], [dp]]
    assert model.predict_edits(sets, edits, 256) == pytest.approx(model.predict_many(rebuilt, 256), rel=1e-4)
    # the shipped model: a table-wise owner at 2 x 256 bags costs more than at 256
    assert model.predict([T], 256) > shipped_model.predict([T], 256)


def test_planners_the_communication_wrapper_and_the_judges_share_one_convention():
    compute = AnalyticalTestCostModel()
    topology, workload = Topology(2, 1.0), Workload((T, U), batch_size=100)
    bound = bound_to_task(compute, workload, topology)
    assert isinstance(bound, DmpBatch) and bound.world_size == 2
    assert bound_to_task(bound, workload, topology) is bound  # binding twice changes nothing
    priced = WithCommunication(compute, CommunicationModel(1.0, 0.0), topology)
    assert at_dmp_batch(priced, 2) is priced and bound_to_task(priced, workload, topology) is priced
    # one host of 2, 100 samples a rank: compute at 200 bags; outputs 2 x 200 x 16 x 4 x 1/2 = 12,800 bytes
    assert priced.predict([T], 100) == pytest.approx(51_200 / 1e7 + 0.1 + 12_800 / 1e6)


def test_beyond_the_trained_batch_a_shard_is_priced_linearly_in_its_bags(shipped_model):
    top = shipped_model.ranges.batch_size[1]  # 16384 bags
    model = DmpBatch(shipped_model, 8)
    # 4096 samples on each of 8 ranks: 32768 bags, twice the trained max
    assert model.predict([T], top // 4) == pytest.approx(2 * shipped_model.predict([T], top), rel=1e-6)
    # 1024 samples on each of 8 ranks: 8192 bags, within it
    assert model.predict([T], top // 16) == pytest.approx(shipped_model.predict([T], top // 2), rel=1e-6)
    (said,) = [w for w in model.check_workload(Workload((T,), top // 2)) if "every rank's samples" in w]
    assert "8192 x 8 = 65536 bags, 4x the largest trained batch 16384" in said
    accumulator = model.accumulator(1, top // 2)
    accumulator.add(0, T)
    assert accumulator.costs() == pytest.approx(model.predict_many([[T]], top // 2), rel=1e-4)

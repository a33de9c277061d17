"""The ids' all-to-all is one ``KJTAllToAll`` per group (sharding type, pooled or sequence): a rank
pays its fixed cost once per group it holds, by hand; every cost path agrees."""

import numpy as np
import pytest

from autoshard.core.collectives import ID_GROUPS, KEYS, Collective, LinkFit, shard_groups
from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.sharding import ShardingType as S
from autoshard.core.types import Table, Topology, replica, row_shards
from tests.cost_models import AnalyticalTestCostModel

ID_LATENCY, ROW_WISE_ID_LATENCY, OTHER_LATENCY = 0.3, 0.5, 0.01
MODEL = CommunicationModel.tiered(
    [
        LinkFit(
            c,
            t,
            {Collective.INPUT_DIST: ID_LATENCY, Collective.INPUT_DIST_ROW_WISE: ROW_WISE_ID_LATENCY}.get(
                c, OTHER_LATENCY
            ),
            1.0,  # 1e6 bytes a ms
        )
        for c, t in KEYS
    ],
    "by hand",
)
TWO_HOSTS = Topology.cluster(2, 1, 16)  # 2 ranks, one a host: every byte crosses the inter-host tier
T = Table("t", 1000, 16, pooling_factor=2.0)
TW = Table("tw", 1000, 16, pooling_factor=2.0, sharding_type=S.TABLE_WISE)
CW = Table("cw", 1000, 16, pooling_factor=2.0, sharding_type=S.COLUMN_WISE)
SEQUENCE = Table("seq", 1000, 16, pooling_factor=2.0, sharding_type=S.TABLE_WISE, pooled=False)
# 100 samples a rank on 2 ranks: a shard serves 200 bags, ids 200 x (8 x 2 + 4) = 4,000 bytes,
# half of them from the other host: 2,000 bytes a shard, 0.002 ms at 1e6 bytes a ms
IDS_MS = 2000 / 1e6


def ids_ms(tables: list[Table], where: Topology | int = TWO_HOSTS) -> float:
    parts = MODEL.breakdown(tables, 100, where)
    return sum(ms for key, ms in parts.items() if key.startswith("input_dist"))


def test_each_group_pays_the_ids_fixed_cost_once():
    # one group, two shards: 2 calls x 0.3 ms once, and both shards' bytes
    assert ids_ms([TW, T]) == pytest.approx(2 * ID_LATENCY + 2 * IDS_MS)
    # table- and column-wise are two groups (TorchRec's input_dists, one a sharding type): twice
    assert ids_ms([TW, CW]) == pytest.approx(2 * 2 * ID_LATENCY + 2 * IDS_MS)
    # a sequence table's collection runs its own ids' all-to-all beside the pooled one's
    assert ids_ms([TW, SEQUENCE]) == pytest.approx(2 * 2 * ID_LATENCY + 2 * IDS_MS)


def test_row_wise_groups_pay_their_own_fit_and_a_replica_pays_no_ids():
    block = row_shards(T, 2, S.ROW_WISE)[0].as_table  # pooling 2 x its lookup share
    block_ms = 200 * (8 * block.pooling_factor + 4) / 2 / 1e6
    parts = MODEL.breakdown([TW, block], 100, TWO_HOSTS)
    assert parts["input_dist inter"] == pytest.approx(2 * ID_LATENCY + IDS_MS)
    assert parts["input_dist_row_wise inter"] == pytest.approx(2 * ROW_WISE_ID_LATENCY + block_ms)
    # a table-row-wise block on one host of 2 is a third group, priced on the intra tier
    twrw = row_shards(T, 2, S.TABLE_ROW_WISE)[0].as_table
    twrw_ms = 200 * (8 * twrw.pooling_factor + 4) / 2 / 1e6
    one_host = MODEL.breakdown([block, twrw], 100, 2)
    assert one_host["input_dist_row_wise intra"] == pytest.approx(2 * 2 * ROW_WISE_ID_LATENCY + block_ms + twrw_ms)
    assert ids_ms([replica(T, 2).as_table]) == 0.0 and shard_groups(replica(T, 2).as_table, 2) == [0.0] * len(ID_GROUPS)


def test_a_group_pays_on_every_tier_its_ids_cross():
    """2 hosts x 2: a rank's ids come from its host's other rank and the other host's two."""
    cluster = Topology.cluster(2, 2, 16)
    parts = MODEL.breakdown([TW, CW], 100, cluster)
    # 400 bags, ids 400 x 20 = 8,000 bytes a shard: 1/4 in the host, 2/4 from the other host
    assert parts["input_dist intra"] == pytest.approx(2 * 2 * ID_LATENCY + 2 * 8000 / 4 / 1e6)
    assert parts["input_dist inter"] == pytest.approx(2 * 2 * ID_LATENCY + 2 * 8000 / 2 / 1e6)
    # one device: nothing to distribute
    assert MODEL.cost_ms([TW, CW], 100, 1) == 0.0 and shard_groups(TW, 1) == [0.0] * len(ID_GROUPS)


def test_every_cost_path_prices_the_groups_alike():
    """predict_many, the accumulator and the edit scorer agree on sets of mixed groups."""
    model = WithCommunication(AnalyticalTestCostModel(), MODEL, TWO_HOSTS)
    sets = [[TW, CW], [TW, T], [SEQUENCE], []]
    direct = model.predict_many(sets, 100)
    accumulator = model.accumulator(len(sets), 100)
    for i, tables in enumerate(sets):
        for table in tables:
            accumulator.add(i, table)
    assert accumulator.costs() == pytest.approx(direct)
    # adding a column-wise shard to set 1 (table-wise only) adds a group; to set 0 it does not
    if_added = accumulator.costs_if_added(CW)
    grown = [[*s, CW] for s in sets]
    assert if_added == pytest.approx(model.predict_many(grown, 100))
    comm = np.array(model.predict_many(grown, 100)) - np.array(model.compute.predict_many(grown, 100))
    comm_before = np.array(direct) - np.array(model.compute.predict_many(sets, 100))
    added = comm - comm_before  # the same bytes in sets 0 and 1: only the new group differs
    assert added[1] - added[0] == pytest.approx(2 * ID_LATENCY, rel=1e-6)
    scorer = model.edit_scorer(sets, 100)
    edited = scorer.predict([(1, 0, CW)])  # set 1: its table-wise shard replaced by a column-wise one
    assert edited[0] == pytest.approx(model.predict_many([[CW, T]], 100)[0])

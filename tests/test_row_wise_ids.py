"""Row-wise ids are bucketized before their all-to-all: priced by a fit of their own, which a
profile measured before `bench comm` timed it takes from its ``input_dist``."""

import json

import pytest

from autoshard.core.collectives import KEYS, Collective, LinkFit, Tier
from autoshard.core.communication import CommunicationModel
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, row_shards

T = Table("t", 1000, 16, pooling_factor=3.0)


def _fit(collective: Collective, tier: Tier, latency: float = 0.1) -> LinkFit:
    return LinkFit(collective, tier, latency, 1.0)


def test_row_wise_ids_pay_their_own_fit_beside_table_wise_ids():
    fits = [_fit(c, t, 0.5 if c is Collective.INPUT_DIST_ROW_WISE else 0.1) for c, t in KEYS]
    model = CommunicationModel.tiered(fits)
    block = row_shards(T, 2, ShardingType.ROW_WISE)[0].as_table
    both = model.breakdown([T, block], 100, 2)
    assert set(both) >= {"input_dist intra", "input_dist_row_wise intra"}
    # two KJTAllToAlls a step (table-wise and row-wise groups): each pays its calls' latency
    assert both["input_dist_row_wise intra"] - both["input_dist intra"] == pytest.approx(2 * 0.4, rel=0.05)


def test_a_profile_without_row_wise_ids_prices_them_as_its_input_dist(tmp_path):
    old = [_fit(c, t) for c, t in KEYS if c is not Collective.INPUT_DIST_ROW_WISE]
    path = tmp_path / "communication.json"
    path.write_text(json.dumps({"format": 2, "measured_on": "old", "fits": [f.to_dict() for f in old]}))
    model = CommunicationModel.load(path)
    filled = model.fit(Collective.INPUT_DIST_ROW_WISE, Tier.INTER)
    assert (filled.latency_ms, filled.bandwidth_gbps) == (0.1, 1.0) and "not measured" in filled.link
    block = row_shards(T, 2, ShardingType.ROW_WISE)[0].as_table
    assert model.cost_ms([block], 100, 2) > 0

"""TorchRec's estimator at the links a profile measured (``autoshard.torchrec.measured_links``):
its comms bandwidths per collective and tier, checked against TorchRec's own declared-links path,
and the judge it adds beside the declared-links estimate."""

import math

import pytest

pytest.importorskip("torchrec")

from torchrec.distributed.planner.types import CollectiveType  # noqa: E402

from autoshard.core.collectives import KEYS, Collective, LinkFit, Tier  # noqa: E402
from autoshard.core.communication import CommunicationModel  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import GIB, DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload  # noqa: E402
from autoshard.torchrec.estimates import TaskEstimates  # noqa: E402
from autoshard.torchrec.judges import judge_plans, torchrec_estimate_ms  # noqa: E402
from autoshard.torchrec.measured_links import MEASURED_LINKS, MeasuredCommsBandwidths, measured_links  # noqa: E402

WORKLOAD = Workload(
    (
        Table("a", 5_000, 16, pooling_factor=4.0),
        Table("b", 20_000, 32, pooling_factor=2.0),
        Table("c", 1_000, 8),
    ),
    batch_size=256,
)
TOPOLOGY = Topology.cluster(2, 2, 1.0)


def model(gbps: dict[tuple[Collective, Tier], float] | float, source: str = "measured") -> CommunicationModel:
    """A per-tier model with these bandwidths (one figure for all, or per key), latency 0.5 ms."""
    fits = [
        LinkFit(c, t, 0.5, gbps if isinstance(gbps, float) else gbps.get((c, t), 1.0), source, ranks=2) for c, t in KEYS
    ]
    return CommunicationModel.tiered(fits, "test")


def plans() -> list[ShardingPlan]:
    """A table-wise plan and one that replicates ``c`` (data parallel: TorchRec's all-reduce)."""
    a, b, c = WORKLOAD.tables
    tw = ShardingPlan(
        "tw",
        (
            DevicePlan((TableShard(a),), 1.0),
            DevicePlan((TableShard(b),), 1.0),
            DevicePlan((TableShard(c),), 1.0),
            DevicePlan((), 0.0),
        ),
    )
    replica = TableShard(c, sharding=ShardingType.DATA_PARALLEL, lookup_share=0.25)
    dp = ShardingPlan(
        "dp",
        (
            DevicePlan((TableShard(a), replica), 2.0),
            DevicePlan((TableShard(b), replica), 2.0),
            DevicePlan((replica,), 1.0),
            DevicePlan((replica,), 1.0),
        ),
    )
    return [tw, dp]


def test_each_collective_gets_its_own_fit_on_the_tier_torchrec_picks():
    gbps = {
        (Collective.ALL_TO_ALL, Tier.INTRA): 0.4,
        (Collective.ALL_TO_ALL, Tier.INTER): 0.3,
        (Collective.REDUCE_SCATTER, Tier.INTRA): 0.2,
        (Collective.ALL_GATHER, Tier.INTER): 0.5,
        (Collective.ALL_REDUCE, Tier.INTRA): 0.8,
        (Collective.ALL_REDUCE, Tier.INTER): 0.7,
    }
    links = MeasuredCommsBandwidths(model(gbps), TOPOLOGY)
    assert links.get_bw(2, 2, CollectiveType.ALL_TO_ALL) == pytest.approx(0.4e6)  # one host: intra, bytes/ms
    assert links.get_bw(2, 4, CollectiveType.ALL_TO_ALL) == pytest.approx(0.3e6)  # across hosts: inter
    assert links.get_bw(2, 2, CollectiveType.REDUCE_SCATTER) == pytest.approx(0.2e6)
    assert links.get_bw(2, 4, CollectiveType.ALL_GATHER) == pytest.approx(0.5e6)
    assert links.get_bw(2, 4, CollectiveType.ALL_REDUCE) == pytest.approx(2 * 0.7e6)  # TorchRec's NIC a device
    assert links.get_bw(2, 2, CollectiveType.ALL_REDUCE) == pytest.approx(2 * 0.8e6)
    assert (links.intra_host_bw, links.inter_host_bw) == pytest.approx((0.4e6, 0.3e6))
    assert "all_to_all 0.4 / 0.3" in links.describe()


def test_a_topology_override_prices_its_tier_as_our_model_does():
    overridden = Topology.cluster(2, 2, 1.0, inter_host_bw_gbps=2.0)
    links = MeasuredCommsBandwidths(model(0.5), overridden)
    assert links.get_bw(2, 4, CollectiveType.ALL_TO_ALL) == pytest.approx(2.0 * GIB / 1000)
    assert links.get_bw(2, 2, CollectiveType.ALL_TO_ALL) == pytest.approx(0.5e6)


def test_equal_fits_give_what_torchrec_prices_with_those_links_declared():
    """One bandwidth for every fit: the estimator at measured links is TorchRec's own estimator
    with that bandwidth as the topology's intra- and inter-host links (its BasicCommsBandwidths)."""
    gbps = 0.5
    declared = Topology.cluster(2, 2, 1.0, gbps * 1e9 / GIB, gbps * 1e9 / GIB)
    links = MeasuredCommsBandwidths(model(gbps), TOPOLOGY)
    at_links = TaskEstimates(WORKLOAD, TOPOLOGY, "cpu", storage_reservation=None, comms_bandwidths=links)
    for plan in plans():
        theirs = torchrec_estimate_ms(plan, WORKLOAD, declared, "cpu")
        ours = torchrec_estimate_ms(plan, WORKLOAD, TOPOLOGY, "cpu", at_links)
        assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(ours, theirs))
        assert max(ours) > max(torchrec_estimate_ms(plan, WORKLOAD, TOPOLOGY, "cpu"))  # slower than 600 / 12.5 GiB/s


def test_the_judge_stands_beside_the_declared_estimate_where_links_were_measured():
    judges = judge_plans(plans(), WORKLOAD, TOPOLOGY, communication=model(0.5))
    names = [v.judge for v in judges.verdicts]
    assert names == ["autoshard", "torchrec_estimator", MEASURED_LINKS, "dmp"]
    declared, measured = judges.verdicts[1], judges.verdicts[2]
    assert all(m > d for m, d in zip(measured.max_ms, declared.max_ms))  # type: ignore[operator]
    assert "measured links" in measured.note and "declared links, 600 / 12.5 GiB/s" in declared.note


def test_slow_links_favour_the_replica_and_the_disagreement_names_the_judge():
    """A small, wide table: replicated, it all-reduces 51 kB of gradients; table-wise, it sends
    every rank's pooled rows (B x W x d x 4 bytes, both ways): at measured links that costs more."""
    wide = Table("e", 100, 128)
    workload = Workload((wide,), batch_size=256)
    tw = ShardingPlan("tw", (DevicePlan((TableShard(wide),), 1.0), *(DevicePlan((), 0.0) for _ in range(3))))
    replica = TableShard(wide, sharding=ShardingType.DATA_PARALLEL, lookup_share=0.25)
    dp = ShardingPlan("dp", tuple(DevicePlan((replica,), 2.0) for _ in range(4)))
    judges = judge_plans([tw, dp], workload, TOPOLOGY, communication=model(0.5))
    declared, measured = (v.max_ms for v in judges.verdicts[1:3])
    assert measured[1] / measured[0] < declared[1] / declared[0]  # type: ignore[operator]
    assert judges.preferred()[MEASURED_LINKS] == "dp" and judges.preferred()["autoshard"] == "tw"
    assert f"{MEASURED_LINKS} prefers dp" in (judges.disagreement() or "")


@pytest.mark.parametrize("communication", [None, model(0.5, source="declared")])
def test_no_judge_at_measured_links_without_measured_links(communication):
    assert measured_links(communication, TOPOLOGY) is None
    judges = judge_plans(plans(), WORKLOAD, TOPOLOGY, communication=communication)
    assert [v.judge for v in judges.verdicts] == ["autoshard", "torchrec_estimator", "dmp"]

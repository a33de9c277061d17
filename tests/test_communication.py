"""Communication costs: per (collective, tier) by hand, the overrides, the wrapper in every path,
the file formats; one-figure models as before."""

import json

import numpy as np
import pytest

from autoshard.core.collectives import KEYS, Collective, LinkFit, Tier
from autoshard.core.communication import CommunicationModel, WithCommunication, communication_warnings
from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import GIB, Table, TableShard, Topology, Workload, replica, row_shards
from autoshard.planners.context import PlannerContext
from autoshard.planners.sharding_options import PLACED_TYPES
from autoshard.planning.registry import make_planner
from tests.cost_models import AnalyticalTestCostModel

A, B = Table("a", 10, 16), Table("b", 10, 48)


def test_formula_by_hand():
    comm = CommunicationModel(bandwidth_gbps=2.0, latency_ms=0.1)
    # 1024 samples per rank on 4 ranks: a table-wise owner serves 4096 bags;
    # 2 * 4096 * (16 + 48) * 4 bytes * (4 - 1) / 4 = 1,572,864 bytes; / (2 GB/s = 2e6 bytes/ms) = 0.786432 ms
    assert comm.cost_ms([A, B], 1024, 4) == pytest.approx(0.2 + 0.786432)
    assert comm.cost_ms([A, B], 1024, 1) == 0.0 and comm.cost_ms([], 1024, 4) == 0.0
    with pytest.raises(InputError, match="bandwidth_gbps"):
        CommunicationModel(0.0, 0.1)


def test_two_hosts_price_the_remote_share_at_the_inter_host_bandwidth():
    """2 hosts x 2 devices: a device sends 1/4 of its bytes within its host, at the measured
    1 GB/s (1e6 bytes/ms), and 2/4 to the other host at 0.5 GiB/s (536,870.912 bytes/ms)."""
    comm = CommunicationModel(bandwidth_gbps=1.0, latency_ms=0.1)
    ten = Table("t", 10, 10)
    cluster = Topology.cluster(2, 2, 16, inter_host_bw_gbps=0.5)
    volume = 2 * (1000 * 4) * 10 * 4  # 1000 samples on each of 4 ranks; outputs + gradients, 4-byte elements
    by_hand = 0.2 + volume * 1 / 4 / 1e6 + volume * 2 / 4 / (0.5 * 2**30 / 1000)
    assert comm.cost_ms([ten], 1000, cluster) == pytest.approx(by_hand)  # 0.578...
    # one host of 4: every remote byte at the measured bandwidth, exactly as a bare device count:
    # 0.2 + 320,000 x 3 / 4 / 1e6
    assert comm.cost_ms([ten], 1000, Topology(4, 16)) == comm.cost_ms([ten], 1000, 4) == pytest.approx(0.44)
    # an inter-host link faster than the measured one is capped at it: as one host
    fast = Topology.cluster(2, 2, 16, inter_host_bw_gbps=100.0)
    assert comm.cost_ms([ten], 1000, fast) == pytest.approx(0.44)


def test_wrapper_prices_a_cluster_alike_in_every_path():
    compute = AnalyticalTestCostModel()
    cluster = Topology.cluster(2, 2, 16, inter_host_bw_gbps=0.5)
    model = WithCommunication(compute, CommunicationModel(1.0, 0.05), cluster)
    sets = [[A, B], [A], [], [B]]
    accumulator = model.accumulator(len(sets), 512)
    for i, tables in enumerate(sets):
        for table in tables:
            accumulator.add(i, table)
    assert accumulator.costs() == pytest.approx(model.predict_many(sets, 512))
    assert model.predict([A], 512) > WithCommunication(compute, CommunicationModel(1.0, 0.05), 4).predict([A], 512)


def test_wrapper_adds_comm_everywhere(tmp_path):
    compute = AnalyticalTestCostModel()
    comm = CommunicationModel(1.0, 0.05)
    model = WithCommunication(compute, comm, 4)
    # 512 samples per rank: a table-wise owner of 4 ranks computes every rank's 2048 bags
    assert model.predict([A], 512) == pytest.approx(compute.predict([A], 2048) + comm.cost_ms([A], 512, 4))
    edits = [(0, None, B), (0, 0, None), (1, None, None), (0, 0, B)]
    rebuilt = [[A, B], [], [B], [B]]
    assert model.predict_edits([[A], [B]], edits, 512) == pytest.approx(model.predict_many(rebuilt, 512))
    comm.save(tmp_path / "c.json")
    assert CommunicationModel.load(tmp_path / "c.json") == comm


def test_communication_changes_what_cost_greedy_balances():
    """A wide table is cheap to compute but costly to send; with communication it gets its own
    device (placed whole: a replica of its 10 rows, all-reduced, would cost less still)."""
    tables = (Table("wide", 10, 256, 1.0), Table("n1", 1000, 8, 60.0), Table("n2", 1000, 8, 60.0))
    workload, topology = Workload(tables, 2048), Topology(2, 1.0)
    compute = AnalyticalTestCostModel()

    def device_of_wide(model):
        context = PlannerContext(model, allow_column_split=False, sharding_types=PLACED_TYPES)
        plan = make_planner("cost_greedy", context).plan(workload, topology)
        return sorted(
            s.table.name for d in plan.devices if "wide" in [s.table.name for s in d.shards] for s in d.shards
        )

    assert device_of_wide(compute) != ["wide"]  # compute alone: the wide table shares a device
    assert device_of_wide(WithCommunication(compute, CommunicationModel(0.05, 0.0), 2)) == ["wide"]


def test_the_plan_report_splits_each_device_into_compute_and_all_to_all():
    from autoshard.planners.report import plans_report
    from autoshard.planning.compare import compare_planners

    compute = AnalyticalTestCostModel()
    comm = CommunicationModel(1.0, 0.05)
    workload = Workload((A, B, Table("c", 10, 32)), batch_size=512)
    cluster = Topology.cluster(2, 1, 16, inter_host_bw_gbps=0.5)
    plans = compare_planners(workload, cluster, ["round_robin"], PlannerContext(compute), comm).plans
    report = plans_report(workload, cluster, plans, communication=comm)
    for device, plan_device in zip(report.plans[0].devices, plans[0].devices):
        tables = [s.as_table for s in plan_device.shards]
        assert device.communication_ms == pytest.approx(comm.cost_ms(tables, 512, cluster))
        assert device.compute_ms == pytest.approx(compute.predict(tables, 512 * 2))  # every rank's samples
        assert device.compute_ms + device.communication_ms == pytest.approx(device.cost_ms)
    as_json = report.to_dict()["plans"][0]["devices"][0]
    assert {"cost_ms", "compute_ms", "communication_ms", "memory_bytes", "host"} <= set(as_json)
    # without a communication model the whole cost is compute
    plain = plans_report(workload, cluster, plans).plans[0].devices[0]
    assert plain.communication_ms == 0.0 and plain.compute_ms == plain.cost_ms


INTRA_GBPS, INTER_GBPS = 2.0, 0.5  # 2e6 and 5e5 bytes a ms
TIERED = CommunicationModel.tiered(
    [LinkFit(c, t, 0.01 if t is Tier.INTRA else 0.1, INTRA_GBPS if t is Tier.INTRA else INTER_GBPS) for c, t in KEYS],
    "by hand",
)
CLUSTER = Topology.cluster(2, 2, 16)  # 4 ranks; a rank's host has 1 other, the other host 2
T = Table("t", 1000, 16, pooling_factor=3.0)


def by_hand(sent: dict[tuple[Collective, Tier], float]) -> float:
    """calls x latency + bytes / bandwidth for each (collective, tier) with bytes."""
    calls = {Collective.INPUT_DIST: 2, Collective.INPUT_DIST_ROW_WISE: 2, Collective.ALL_TO_ALL: 2}
    total = 0.0
    for (collective, tier), nbytes in sent.items():
        latency, per_ms = (0.01, 2e6) if tier is Tier.INTRA else (0.1, 5e5)
        total += calls.get(collective, 1) * latency + nbytes / per_ms
    return total


def test_each_sharding_type_is_priced_per_collective_and_tier_by_hand():
    """Batch 100 per rank on 2 hosts x 2: a sharded shard serves 400 bags, ids 400 (8 L + 4) =
    11,200 bytes, outputs 400 d 4 = 25,600 bytes; 1/4 of the all-to-all bytes stay in the host,
    2/4 cross to the other host."""
    ids = {(Collective.INPUT_DIST, Tier.INTRA): 11200 / 4, (Collective.INPUT_DIST, Tier.INTER): 11200 / 2}
    table_wise = {**ids, (Collective.ALL_TO_ALL, Tier.INTRA): 51200 / 4, (Collective.ALL_TO_ALL, Tier.INTER): 25600}
    assert TIERED.cost_ms([T], 100, CLUSTER) == pytest.approx(by_hand(table_wise))
    # row-wise: each block gets half the ids (pooling 1.5); reduce-scatter forward, all-gather back
    block = row_shards(T, 4, ShardingType.ROW_WISE)[0].as_table
    block_ids = 400 * (8 * block.pooling_factor + 4)
    bucketized = Collective.INPUT_DIST_ROW_WISE  # the ids bucketized by row block first
    rows = {(bucketized, Tier.INTRA): block_ids / 4, (bucketized, Tier.INTER): block_ids / 2}
    for collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        rows |= {(collective, Tier.INTRA): 25600 / 4, (collective, Tier.INTER): 25600 / 2}
    assert TIERED.cost_ms([block], 100, CLUSTER) == pytest.approx(by_hand(rows))
    # table-row-wise: reduce-scatter and all-gather in the host (1/2 of 25,600), then the reduced
    # half of the rows to the other host: 2 x 25,600 x 2 / (2 x 4)
    twrw = row_shards(T, 2, ShardingType.TABLE_ROW_WISE)[0].as_table
    twrw_ids = 400 * (8 * twrw.pooling_factor + 4)
    host = {(bucketized, Tier.INTRA): twrw_ids / 4, (bucketized, Tier.INTER): twrw_ids / 2}
    host |= {(Collective.REDUCE_SCATTER, Tier.INTRA): 12800, (Collective.ALL_GATHER, Tier.INTRA): 12800}
    host |= {(Collective.ALL_TO_ALL, Tier.INTER): 12800}
    assert TIERED.cost_ms([twrw], 100, CLUSTER) == pytest.approx(by_hand(host))
    # data parallel: no ids, no output; the 64,000-byte gradient all-reduced in two levels
    dp = {(Collective.ALL_REDUCE, Tier.INTRA): 64_000, (Collective.ALL_REDUCE, Tier.INTER): 32_000}
    assert TIERED.cost_ms([replica(T, 4).as_table], 100, CLUSTER) == pytest.approx(by_hand(dp))
    # one host of 4 (400 bags again): nothing crosses a host, so no inter-host latency either
    one_host = {(Collective.INPUT_DIST, Tier.INTRA): 11200 * 3 / 4, (Collective.ALL_TO_ALL, Tier.INTRA): 51200 * 3 / 4}
    assert TIERED.cost_ms([T], 100, 4) == pytest.approx(by_hand(one_host))
    assert TIERED.cost_ms([T], 100, 1) == 0.0 and TIERED.cost_ms([], 100, CLUSTER) == 0.0
    assert sum(TIERED.breakdown([T, block], 100, CLUSTER).values()) > TIERED.cost_ms([T], 100, CLUSTER)


def test_two_hosts_cost_more_than_one_host_of_the_same_devices():
    """Both tiers are priced: 2 x 8 is not one host of 16."""
    tables = [TableShard(Table(f"t{i}", 1000, 64, 4.0)).as_table for i in range(3)]
    assert TIERED.cost_ms(tables, 512, Topology.cluster(2, 8, 16)) > TIERED.cost_ms(tables, 512, 16)


def test_the_topology_bandwidths_override_a_tier_only_where_the_user_set_them():
    default = TIERED.cost_ms([T], 100, CLUSTER)
    assert (
        TIERED.fit(Collective.ALL_TO_ALL, Tier.INTER, CLUSTER).source == "measured"
    )  # TorchRec's default: no override
    slow = Topology.cluster(2, 2, 16, inter_host_bw_gbps=0.25)
    fit = TIERED.fit(Collective.ALL_TO_ALL, Tier.INTER, slow)
    assert (fit.source, fit.latency_ms, fit.bandwidth_gbps) == ("override", 0.1, pytest.approx(0.25 * GIB / 1e9))
    assert TIERED.cost_ms([T], 100, slow) > default
    fast = Topology.cluster(2, 2, 16, intra_host_bw_gbps=1000.0)
    assert TIERED.fit(Collective.REDUCE_SCATTER, Tier.INTRA, fast).bandwidth_gbps == pytest.approx(1000 * GIB / 1e9)
    assert TIERED.cost_ms([T], 100, fast) < default
    assert communication_warnings(TIERED, CLUSTER) == ()
    (said,) = communication_warnings(TIERED, slow)
    assert said == "the topology's inter_host_bw_gbps 0.25 GiB/s overrides the profile's inter-host bandwidths"


def test_the_wrapper_prices_a_per_tier_model_alike_in_every_path():
    compute = AnalyticalTestCostModel()
    model = WithCommunication(compute, TIERED, CLUSTER)
    dp, rows = replica(T, 4).as_table, row_shards(T, 4, ShardingType.ROW_WISE)[1].as_table
    sets = [[A, dp], [A], [], [rows, B]]
    accumulator = model.accumulator(len(sets), 512)
    for i, tables in enumerate(sets):
        for table in tables:
            accumulator.add(i, table)
    assert accumulator.costs() == pytest.approx(model.predict_many(sets, 512))
    assert accumulator.costs_if_added(rows) == pytest.approx(model.predict_many([[*s, rows] for s in sets], 512))
    edits = [(0, None, dp), (0, 0, None), (1, None, None), (0, 0, rows)]
    rebuilt = [[A, dp], [], [B], [rows]]
    assert model.predict_edits([[A], [B]], edits, 512) == pytest.approx(model.predict_many(rebuilt, 512))


def test_a_per_tier_model_saves_its_fits_and_points_and_loads_them_back(tmp_path):
    fits = [LinkFit(c, t, 0.02, 1.5, "measured", ((1024, 0.05), (4096, 0.06)), 2, "loopback") for c, t in KEYS]
    model = CommunicationModel.tiered(fits, "cpu: test")
    model.save(tmp_path / "c.json")
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["format"] == 2 and len(data["fits"]) == len(KEYS) and data["fits"][0]["points"][0] == [1024, 0.05]
    assert CommunicationModel.load(tmp_path / "c.json") == model
    assert model.describe().startswith("measured per collective and tier")
    data["fits"].pop()
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="bench comm"):
        CommunicationModel.load(tmp_path / "c.json")


def test_a_declared_model_says_so():
    from cost_model.bench.communication import declared_model

    model = declared_model("TorchRec 1.8.0's constants")
    assert model.declared and model.describe().startswith("declared, not measured")
    assert model.fit(Collective.ALL_TO_ALL, Tier.INTER).bandwidth_gbps == pytest.approx(12.5 * GIB / 1e9, rel=1e-4)
    assert all(f.source == "declared" for f in model.fits)
    assert communication_warnings(model)[0].startswith("communication is declared, not measured")
    assert communication_warnings(TIERED) == () and communication_warnings(None) == ()


def test_a_missing_communication_model_is_named_not_a_crash():
    with pytest.raises(InputError, match="communication.json"):
        WithCommunication(AnalyticalTestCostModel(), None, 4)


def test_every_shipped_profile_prices_both_tiers():
    from pathlib import Path

    profiles = Path("data/models").iterdir()  # a profile holds a cost model; torchrec/ holds policies alone
    folders = sorted(p for p in profiles if (p / "cost_model.pt").is_file() and not p.is_symlink())
    assert folders
    for folder in folders:
        model = CommunicationModel.load(folder / "communication.json")
        assert model.per_tier, folder.name
        sources = {f.source for f in model.fits}
        assert sources == ({"declared"} if folder.name.startswith("cuda") else {"measured"}), folder.name
        inter = model.fit(Collective.ALL_TO_ALL, Tier.INTER)
        intra = model.fit(Collective.ALL_TO_ALL, Tier.INTRA)
        assert inter.bandwidth_gbps < intra.bandwidth_gbps, folder.name
        assert np.isfinite([f.latency_ms for f in model.fits]).all()

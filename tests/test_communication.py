"""The all-to-all cost: the formula by hand, the wrapper, and a real measurement on 2 ranks."""

import pytest

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.errors import InputError
from autoshard.core.types import Table, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planning.registry import make_planner
from tests.cost_models import AnalyticalTestCostModel

A, B = Table("a", 10, 16), Table("b", 10, 48)


def test_formula_by_hand():
    comm = CommunicationModel(bandwidth_gbps=2.0, latency_ms=0.1)
    # 2 * 1024 * (16 + 48) * 4 bytes * (4 - 1) / 4 = 393,216 bytes; / (2 GB/s = 2e6 bytes/ms) = 0.196608 ms
    assert comm.cost_ms([A, B], 1024, 4) == pytest.approx(0.2 + 0.196608)
    assert comm.cost_ms([A, B], 1024, 1) == 0.0 and comm.cost_ms([], 1024, 4) == 0.0
    with pytest.raises(InputError, match="bandwidth_gbps"):
        CommunicationModel(0.0, 0.1)


def test_two_hosts_price_the_remote_share_at_the_inter_host_bandwidth():
    """2 hosts x 2 devices: a device sends 1/4 of its bytes within its host, at the measured
    1 GB/s (1e6 bytes/ms), and 2/4 to the other host at 0.5 GiB/s (536,870.912 bytes/ms)."""
    comm = CommunicationModel(bandwidth_gbps=1.0, latency_ms=0.1)
    ten = Table("t", 10, 10)
    cluster = Topology.cluster(2, 2, 16, inter_host_bw_gbps=0.5)
    volume = 2 * 1000 * 10 * 4  # forward outputs + backward gradients, 4-byte elements
    by_hand = 0.2 + volume * 1 / 4 / 1e6 + volume * 2 / 4 / (0.5 * 2**30 / 1000)
    assert comm.cost_ms([ten], 1000, cluster) == pytest.approx(by_hand)  # 0.2945...
    # one host of 4: every remote byte at the measured bandwidth, exactly as a bare device count
    assert comm.cost_ms([ten], 1000, Topology(4, 16)) == comm.cost_ms([ten], 1000, 4) == pytest.approx(0.26)
    # an inter-host link faster than the measured one is capped at it: as one host
    fast = Topology.cluster(2, 2, 16, inter_host_bw_gbps=100.0)
    assert comm.cost_ms([ten], 1000, fast) == pytest.approx(0.26)


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
    assert model.predict([A], 512) == pytest.approx(compute.predict([A], 512) + comm.cost_ms([A], 512, 4))
    edits = [(0, None, B), (0, 0, None), (1, None, None), (0, 0, B)]
    rebuilt = [[A, B], [], [B], [B]]
    assert model.predict_edits([[A], [B]], edits, 512) == pytest.approx(model.predict_many(rebuilt, 512))
    comm.save(tmp_path / "c.json")
    assert CommunicationModel.load(tmp_path / "c.json") == comm


def test_communication_changes_what_cost_greedy_balances():
    """A wide table is cheap to compute but costly to send; with communication it gets its own device."""
    tables = (Table("wide", 10, 256, 1.0), Table("n1", 1000, 8, 60.0), Table("n2", 1000, 8, 60.0))
    workload, topology = Workload(tables, 2048), Topology(2, 1.0)
    compute = AnalyticalTestCostModel()

    def device_of_wide(model):
        plan = make_planner("cost_greedy", PlannerContext(model, allow_column_split=False)).plan(workload, topology)
        return sorted(
            s.table.name for d in plan.devices if "wide" in [s.table.name for s in d.shards] for s in d.shards
        )

    assert device_of_wide(compute) != ["wide"]  # compute alone: the wide table shares a device
    assert device_of_wide(WithCommunication(compute, CommunicationModel(0.05, 0.0), 2)) == ["wide"]


def test_all_to_all_is_measured_on_two_ranks():
    from cost_model.bench.communication import measure_all_to_all

    model, points = measure_all_to_all(2, sizes_mb=(0.0625, 1.0), repeats=3)
    assert model.bandwidth_gbps > 0 and model.latency_ms >= 0
    assert [b for b, _ in points] == [65536, 1048576] and all(ms > 0 for _, ms in points)


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
        assert device.compute_ms == pytest.approx(compute.predict(tables, 512))
        assert device.compute_ms + device.communication_ms == pytest.approx(device.cost_ms)
    as_json = report.to_dict()["plans"][0]["devices"][0]
    assert {"cost_ms", "compute_ms", "communication_ms", "memory_bytes", "host"} <= set(as_json)
    # without a communication model the whole cost is compute
    plain = plans_report(workload, cluster, plans).plans[0].devices[0]
    assert plain.communication_ms == 0.0 and plain.compute_ms == plain.cost_ms

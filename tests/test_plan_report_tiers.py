"""Each device's communication per link tier in the plans' report (``DeviceReport``), as the CLI's
--json and the service's ``DeviceOut`` carry it, and what priced it (``CommunicationReport``)."""

import pytest

from autoshard.core.collectives import KEYS, LinkFit, Tier
from autoshard.core.communication import CommunicationModel
from autoshard.core.types import Table, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.report import plans_report, tier_split
from autoshard.planning.compare import compare_planners
from service.schemas.responses import CommunicationOut, DeviceOut
from tests.cost_models import AnalyticalTestCostModel


def tiered(source: str = "measured") -> CommunicationModel:
    """Intra-host links at 2 GB/s and 10 us a call, inter-host at 0.5 GB/s and 100 us."""
    fits = [LinkFit(c, t, 0.01 if t is Tier.INTRA else 0.1, 2.0 if t is Tier.INTRA else 0.5, source) for c, t in KEYS]
    return CommunicationModel.tiered(fits, "by hand")


TABLES = tuple(Table(f"t{i}", 1000 * (i + 1), 16 * (1 + i % 3), pooling_factor=2.0) for i in range(8))
WORKLOAD = Workload(TABLES, batch_size=512)
TWO_HOSTS = Topology.cluster(2, 2, 16)


def report_of(topology: Topology, comm: CommunicationModel | None):
    compute = AnalyticalTestCostModel()
    plans = compare_planners(WORKLOAD, topology, ["round_robin"], PlannerContext(compute), comm).plans
    return plans, plans_report(WORKLOAD, topology, plans, communication=comm)


def test_each_device_splits_its_communication_by_tier_and_the_tiers_add_up():
    comm = tiered()
    plans, report = report_of(TWO_HOSTS, comm)
    for device, planned in zip(report.plans[0].devices, plans[0].devices):
        tables = [s.as_table for s in planned.shards]
        intra, inter = device.communication_by_tier_ms or (-1.0, -1.0)
        breakdown = comm.breakdown(tables, 512, TWO_HOSTS)
        assert intra == pytest.approx(sum(ms for key, ms in breakdown.items() if key.endswith(" intra")))
        assert inter == pytest.approx(sum(ms for key, ms in breakdown.items() if key.endswith(" inter")))
        assert intra > 0 and inter > 0  # 2 hosts: each device sends on both tiers
        assert intra + inter == device.communication_ms  # exactly: the total is their sum
        assert device.communication_ms == pytest.approx(comm.cost_ms(tables, 512, TWO_HOSTS))
        assert device.compute_ms + device.communication_ms == pytest.approx(device.cost_ms)
    as_json = report.to_dict()
    split = as_json["plans"][0]["devices"][0]["communication_by_tier_ms"]
    assert set(split) == {"intra", "inter"}
    assert split["intra"] + split["inter"] == as_json["plans"][0]["devices"][0]["communication_ms"]
    assert as_json["communication"] == {"source": "measured", "description": comm.describe()}


def test_one_host_sends_nothing_between_hosts():
    _, report = report_of(Topology(4, 16.0), tiered())
    for device in report.plans[0].devices:
        intra, inter = device.communication_by_tier_ms or (-1.0, -1.0)
        assert inter == 0.0 and intra == device.communication_ms > 0


def test_a_one_figure_model_is_split_on_one_host_only():
    comm = CommunicationModel(1.0, 0.05)
    _, one_host = report_of(Topology(4, 16.0), comm)
    device = one_host.plans[0].devices[0]
    assert device.communication_by_tier_ms == (device.communication_ms, 0.0) and device.communication_ms > 0
    plans, two_hosts = report_of(TWO_HOSTS, comm)
    for device, planned in zip(two_hosts.plans[0].devices, plans[0].devices):
        assert device.communication_by_tier_ms is None  # one figure for both tiers: no honest split
        assert device.communication_ms == pytest.approx(
            comm.cost_ms([s.as_table for s in planned.shards], 512, TWO_HOSTS)
        )
        assert device.to_dict()["communication_by_tier_ms"] is None
    assert two_hosts.to_dict()["communication"]["source"] == "one figure"
    assert tier_split(comm, [TABLES[0]], 512, TWO_HOSTS) is None


def test_without_a_communication_model_nothing_is_communication():
    _, report = report_of(TWO_HOSTS, None)
    device = report.plans[0].devices[0]
    assert device.communication_by_tier_ms == (0.0, 0.0) and device.compute_ms == device.cost_ms
    assert report.to_dict()["communication"] is None


def test_declared_figures_say_so():
    comm = tiered("declared")
    _, report = report_of(TWO_HOSTS, comm)
    said = report.to_dict()["communication"]
    assert said["source"] == "declared" and "declared, not measured" in said["description"]
    assert CommunicationOut.model_validate(said).source == "declared"


def test_the_service_schema_carries_the_split():
    _, report = report_of(TWO_HOSTS, tiered())
    for entry in report.to_dict(shards=True)["plans"][0]["devices"]:
        device = DeviceOut.model_validate(entry)
        split = device.communication_by_tier_ms or {}
        assert split["intra"] + split["inter"] == pytest.approx(device.communication_ms) and split["inter"] > 0

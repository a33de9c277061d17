"""Cluster topologies: hosts x devices per host, per-device memory caps, and the bandwidths; their
validation (in the type, the workload file, the CLI and the service), hand-computed plans where
one small device can hold only the small table, and a property over random clusters: every
planner places every table exactly once and keeps each device within its own cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import GIB, INTER_HOST_BW_GBPS, INTRA_HOST_BW_GBPS, ShardingPlan, Table, Topology, Workload
from autoshard.core.workload_file import topology_from_dict, workload_from_dict, workload_to_dict
from autoshard.planners.context import PlannerContext
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.report import plans_report
from autoshard.planners.validate import validate_plan
from autoshard.planning.registry import HEURISTICS, make_planner
from autoshard.rl.policy import OptionPolicy
from tests.cost_models import AnalyticalTestCostModel

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "default"
runner = CliRunner()


def said(result) -> str:
    return " ".join(result.output.split())


def json_of(result) -> dict:
    """The JSON document of a command's output (after any notes)."""
    text = result.output
    return json.loads(text if text.startswith("{") else text[text.index("\n{") + 1 :])


# --- the type ------------------------------------------------------------------------------------


def test_a_topology_built_the_old_way_is_one_host_and_equal_to_its_explicit_form():
    old = Topology(8, 16)
    assert (old.num_hosts, old.devices_per_host, old.world_size, old.local_world_size) == (1, 8, 8, 8)
    assert old == Topology(8, 16, 1, 8) == Topology(8, 16.0, num_hosts=1)
    assert hash(old) == hash(Topology(8, 16)) == hash(Topology(8, 16, 1, 8))
    assert old.uniform_memory and old.device_memory_caps_gb == ()
    assert [old.device_memory_bytes_of(r) for r in range(8)] == [16 * GIB] * 8
    assert {old.host_of(r) for r in range(8)} == {0}
    assert old.to_dict() == {"num_devices": 8, "device_memory_gb": 16}  # the file's two fields, as before


def test_torchrec_default_bandwidths_in_gib_per_second():
    from torchrec.distributed.planner.constants import CROSS_NODE_BANDWIDTH, INTRA_NODE_BANDWIDTH

    # TorchRec's are bytes/ms: x 1000 ms/s / GiB
    assert INTRA_HOST_BW_GBPS == INTRA_NODE_BANDWIDTH * 1000 / GIB == 600.0
    assert INTER_HOST_BW_GBPS == CROSS_NODE_BANDWIDTH * 1000 / GIB == 12.5
    topology = Topology(4, 8)
    assert (topology.intra_host_bw_gbps, topology.inter_host_bw_gbps) == (600.0, 12.5)


def test_a_2_by_2_cluster_numbers_ranks_host_by_host():
    topology = Topology.cluster(2, 2, 16)
    assert topology == Topology(4, 16, 2, 2) == Topology(4, 16, num_hosts=2)
    assert [topology.host_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert (topology.world_size, topology.local_world_size) == (4, 2)
    with pytest.raises(IndexError):
        topology.host_of(4)
    assert Topology.cluster(3, 2, 16).host_of(5) == 2


def test_per_device_memory_caps():
    topology = Topology.cluster(2, 2, [16, 16, 8, 4])
    assert topology.device_memory_caps_gb == (16, 16, 8, 4) and not topology.uniform_memory
    assert [topology.device_memory_bytes_of(r) for r in range(4)] == [16 * GIB, 16 * GIB, 8 * GIB, 4 * GIB]
    assert topology.device_memory_bytes == 16 * GIB  # the largest device's
    assert topology.total_memory_bytes == 44 * GIB
    assert topology.to_dict() == {
        "num_devices": 4,
        "num_hosts": 2,
        "devices_per_host": 2,
        "device_memory_gb": [16, 16, 8, 4],
    }
    assert Topology(4, (8, 8, 8, 8)) == Topology(4, 8)  # equal caps are one value
    assert topology_from_dict(topology.to_dict()) == topology


@pytest.mark.parametrize(
    "kwargs, field, says",
    [
        ({"num_devices": 8, "device_memory_gb": 16, "num_hosts": 3}, "num_hosts", "do not divide evenly"),
        (
            {"num_devices": 8, "device_memory_gb": 16, "num_hosts": 2, "devices_per_host": 3},
            "devices_per_host",
            "num_hosts * devices_per_host = 2 * 3 = 6, but num_devices is 8",
        ),
        ({"num_devices": 4, "device_memory_gb": (16, 8, 8)}, "device_memory_gb", "lists 3 per-device values"),
        ({"num_devices": 2, "device_memory_gb": (16, -1)}, "device_memory_gb", "must be a number > 0"),
        ({"num_devices": 2, "device_memory_gb": ()}, "device_memory_gb", "empty"),
        ({"num_devices": 2, "device_memory_gb": 8, "num_hosts": 0}, "num_hosts", ">= 1"),
        ({"num_devices": 2, "device_memory_gb": 8, "inter_host_bw_gbps": 0}, "inter_host_bw_gbps", "> 0"),
    ],
)
def test_each_contradiction_is_an_input_error_naming_the_field_and_the_fix(kwargs, field, says):
    with pytest.raises(InputError) as info:
        Topology(**kwargs)
    assert info.value.field == field and says in info.value.message and info.value.fix


def test_the_workload_file_reads_a_cluster_and_names_the_field_on_contradictions():
    cluster = topology_from_dict(
        {"num_hosts": 2, "devices_per_host": 4, "device_memory_gb": 16, "intra_host_bw_gbps": 300}
    )
    assert cluster == Topology(8, 16, 2, 4, 300.0)
    assert topology_from_dict({"num_devices": 8, "device_memory_gb": 16}) == Topology(8, 16)  # one host
    assert topology_from_dict({"devices_per_host": 4, "device_memory_gb": [1, 2, 3, 4]}).device_memory_caps_gb == (
        1,
        2,
        3,
        4,
    )
    for bad, field in [
        ({"num_hosts": 2, "devices_per_host": 4, "num_devices": 6, "device_memory_gb": 16}, "devices_per_host"),
        ({"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": [16, 16, 8]}, "device_memory_gb"),
        ({"num_hosts": 2, "device_memory_gb": 16}, "num_devices"),
        ({"num_devices": 2, "device_memory_gb": 16, "hosts": 2}, "hosts"),
        ({"num_devices": 2, "device_memory_gb": 16, "devices_per_host": 0}, "devices_per_host"),
        ({"num_hosts": "2", "devices_per_host": 1, "device_memory_gb": 16}, "num_hosts"),
    ]:
        with pytest.raises(InputError) as info:
            topology_from_dict(bad)
        assert info.value.field == field and info.value.where == "topology", bad
        assert f"topology: {field}:" in str(info.value)
    workload = Workload((Table("t", 10, 4),))
    again, topology = workload_from_dict(workload_to_dict(workload, Topology.cluster(2, 2, [4, 4, 2, 2])))
    assert again == workload and topology == Topology.cluster(2, 2, [4, 4, 2, 2])


# --- hand-computed plans ---------------------------------------------------------------------------

# a, b, c: 10,000 x 16 x 4 B = 640,000 bytes each; s: 100 x 4 x 4 B = 1,600 bytes
A, B, C = (Table(n, 10_000, 16, p) for n, p in (("a", 4.0), ("b", 3.0), ("c", 2.0)))
S = Table("s", 100, 4, 1.0)
FOUR = Workload((A, B, C, S), batch_size=64, name="four")
# rank 0: 0.0001 GiB = 107,374 bytes (room for s alone); ranks 1-3: 0.001 GiB = 1,073,741 bytes
# (room for one of a, b, c, and s)
SMALL_FIRST = Topology.cluster(2, 2, [0.0001, 0.001, 0.001, 0.001])


def names(plan: ShardingPlan) -> list[list[str]]:
    return [[s.as_table.name for s in d.shards] for d in plan.devices]


def test_the_caps_are_bytes_of_gib():
    assert [SMALL_FIRST.device_memory_bytes_of(r) for r in range(4)] == [107_374, 1_073_741, 1_073_741, 1_073_741]


def test_size_greedy_gives_the_small_device_only_the_small_table():
    # by memory: a, b, c (640,000 each; ties by name), s. Each goes to the device of least load
    # (memory) with room: a -> 1 (0 has no room), b -> 2, c -> 3, s -> 0 (empty). With one
    # value for all four devices the plan is [[a], [b], [c], [s]].
    plan = make_planner("size_greedy").plan(FOUR, SMALL_FIRST)
    assert names(plan) == [["s"], ["a"], ["b"], ["c"]]
    validate_plan(plan, FOUR, SMALL_FIRST)
    uniform = make_planner("size_greedy").plan(FOUR, Topology.cluster(2, 2, 0.001))
    assert names(uniform) == [["a"], ["b"], ["c"], ["s"]]


def test_cost_greedy_gives_the_small_device_only_the_small_table():
    # heaviest first: a (4 lookups), b (3), c (2), s (1). a: device 0 has no room, devices 1-3
    # cost alike -> 1; b: 2 (1 holds a); c: 3; s: device 0 alone is its cheapest.
    model = AnalyticalTestCostModel()
    plan = CostGreedyPlanner(model, max_rounds=0).plan(FOUR, SMALL_FIRST)
    assert names(plan) == [["s"], ["a"], ["b"], ["c"]]
    assert [d.cost_ms for d in plan.devices] == pytest.approx([model.predict([t], 64) for t in (S, A, B, C)])
    validate_plan(plan, FOUR, SMALL_FIRST)
    searched = CostGreedyPlanner(model).plan(FOUR, SMALL_FIRST)  # local search keeps each cap too
    validate_plan(searched, FOUR, SMALL_FIRST)
    assert names(searched)[0] == ["s"]


def test_validation_checks_each_device_against_its_own_cap():
    plan = make_planner("size_greedy").plan(FOUR, Topology.cluster(2, 2, 0.001))  # a on device 0
    with pytest.raises(InputError) as info:
        validate_plan(plan, FOUR, SMALL_FIRST)
    assert info.value.field == "memory" and "devices[0]" in info.value.where


def test_infeasible_per_device_memory_names_the_shortfall():
    # 2 x 1,073,741 + 2 x 536,870 bytes hold 4 x 640,000 in total, but only one table fits each large
    # device and none the small ones
    tight = Topology.cluster(1, 4, [0.001, 0.001, 0.0005, 0.0005])
    with pytest.raises(PlannerError) as info:
        make_planner("size_greedy").plan(Workload((A, B, C, Table("d", 10_000, 16))), tight)
    assert info.value.kind is PlannerErrorKind.TABLE_DOES_NOT_FIT  # fits in total, not device by device
    with pytest.raises(PlannerError) as info:
        make_planner("size_greedy").plan(Workload((A, B, C)), Topology.cluster(1, 2, [0.0001, 0.001]))
    assert info.value.kind is PlannerErrorKind.INSUFFICIENT_MEMORY and "0.0001-0.001 GiB" in info.value.message


def test_reports_name_each_devices_host():
    plan = make_planner("size_greedy").plan(FOUR, SMALL_FIRST)
    report = plans_report(FOUR, SMALL_FIRST, [plan]).to_dict()
    assert [d["host"] for d in report["plans"][0]["devices"]] == [0, 0, 1, 1]
    assert report["topology"] == SMALL_FIRST.to_dict()
    one_host = plans_report(FOUR, Topology(4, 0.001), [make_planner("size_greedy").plan(FOUR, Topology(4, 0.001))])
    assert {d["host"] for d in one_host.to_dict()["plans"][0]["devices"]} == {0}


def test_torchrec_plans_a_cluster_with_per_rank_caps():
    from torchrec.distributed.planner import Topology as TorchRecTopology

    from autoshard.torchrec.planner import TorchRecPlanner, torchrec_topology_args

    theirs = TorchRecTopology(**torchrec_topology_args(SMALL_FIRST))
    assert (theirs.world_size, theirs.local_world_size) == (4, 2)
    assert [d.storage.hbm for d in theirs.devices] == [107_374, 1_073_741, 1_073_741, 1_073_741]
    assert theirs.intra_host_bw == 600 * GIB / 1000 and theirs.inter_host_bw == 12.5 * GIB / 1000
    # TorchRec reserves a share of each device; with room to spare it still keeps every cap
    roomy = Topology.cluster(2, 2, [0.002, 0.01, 0.01, 0.01])
    plan = TorchRecPlanner().plan(FOUR, roomy)
    validate_plan(plan, FOUR, roomy)


# --- the CLI and the service ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, option, says",
    [
        (["--devices", "8", "--hosts", "3"], "--hosts", "do not divide evenly"),
        (["--devices", "8", "--hosts", "2", "--devices-per-host", "3"], "--devices-per-host", "2 * 3 = 6"),
        (["--hosts", "2", "--devices-per-host", "0"], "--devices-per-host", ""),
    ],
)
def test_a_contradicting_cluster_at_the_cli_exits_2_naming_the_option(options, option, says):
    for command in ("plan",):
        result = runner.invoke(app, [command, "criteo_kaggle", "--memory-gb", "4", "--model", "none", *options])
        assert result.exit_code == 2 and option in said(result) and says in said(result), said(result)
        assert "Traceback" not in said(result)


def test_replan_takes_hosts_and_names_the_option_on_contradictions(tmp_path):
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(workload_to_dict(FOUR)))
    current = tmp_path / "current.json"
    current.write_text(json.dumps({"world_size": 4, "tables": {}}))
    result = runner.invoke(
        app, ["replan", str(workload), "--from", str(current), "--hosts", "2", "--devices-per-host", "3",
              "--devices", "4", "--memory-gb", "1"]
    )  # fmt: skip
    assert result.exit_code == 2 and "--devices-per-host" in said(result), said(result)


def test_the_cli_plans_a_cluster_from_options_or_the_file_and_names_hosts(tmp_path):
    torch.set_num_threads(1)
    base = ["plan", "--model", "none", "--planner", "size_greedy", "--json"]
    file = tmp_path / "four.json"
    file.write_text(json.dumps(workload_to_dict(FOUR, SMALL_FIRST)))
    result = runner.invoke(app, [*base[:1], str(file), *base[1:]])
    assert result.exit_code == 0, said(result)
    report = json_of(result)
    assert report["topology"]["device_memory_gb"] == [0.0001, 0.001, 0.001, 0.001]
    devices = report["plans"][0]["devices"]
    assert [d["host"] for d in devices] == [0, 0, 1, 1] and devices[0]["tables"] == ["s"]
    result = runner.invoke(
        app, [*base[:1], str(file), *base[1:], "--hosts", "2", "--devices-per-host", "3", "--memory-gb", "1"]
    )
    assert result.exit_code == 0, said(result)
    assert [d["host"] for d in json_of(result)["plans"][0]["devices"]] == [0, 0, 0, 1, 1, 1]
    result = runner.invoke(app, [*base[:1], str(file), *base[1:], "--devices", "2"])  # one host, the file's memory
    assert result.exit_code == 2 and "--memory-gb" in said(result) and "lists 4 per-device values" in said(result)
    out = tmp_path / "plan.json"
    result = runner.invoke(app, [*base[:1], str(file), *base[1:-1], "--format", "torchrec", "--out", str(out)])
    assert result.exit_code == 0, said(result)
    export = json.loads(out.read_text())
    assert export["world_size"] == 4 and export["local_world_size"] == 2
    assert export["tables"]["s"]["ranks"] == [0]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    with TestClient(create_app(Settings(pool="thread", model_dir=tmp_path_factory.mktemp("no_models")))) as client:
        yield client


@pytest.mark.parametrize(
    "topology, loc",
    [
        ({"num_hosts": 2, "devices_per_host": 2, "num_devices": 3, "device_memory_gb": 1}, "devices_per_host"),
        ({"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": [1, 1, 1]}, "device_memory_gb"),
        ({"num_devices": 6, "num_hosts": 4, "device_memory_gb": 1}, "num_hosts"),
        ({"num_hosts": 2, "device_memory_gb": 1}, "num_devices"),
    ],
)
def test_the_service_answers_422_naming_the_topology_field(service, topology, loc):
    body = {"workload": workload_to_dict(FOUR), "topology": topology, "planners": ["size_greedy"]}
    response = service.post("/v1/plans", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "topology", loc], detail


def test_the_service_plans_a_cluster_with_per_device_memory(service):
    topology = {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": [0.0001, 0.001, 0.001, 0.001]}
    body = {"workload": workload_to_dict(FOUR), "topology": topology, "planners": ["size_greedy"]}
    response = service.post("/v1/plans", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    devices = answer["plans"][0]["devices"]
    assert [d["host"] for d in devices] == [0, 0, 1, 1] and devices[0]["tables"] == ["s"]
    assert answer["topology"]["device_memory_gb"] == [0.0001, 0.001, 0.001, 0.001]


# --- properties over random clusters -------------------------------------------------------------


@st.composite
def cluster_tasks(draw):
    n = draw(st.integers(1, 10))
    tables = tuple(
        Table(f"t{i}", draw(st.integers(1, 5000)), draw(st.sampled_from((4, 8, 16, 32))), draw(st.floats(1.0, 20.0)))
        for i in range(n)
    )
    workload = Workload(tables, batch_size=draw(st.sampled_from((64, 2048))))
    hosts, per_host = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    devices = hosts * per_host
    slack = draw(st.one_of(st.floats(1.0, 3.0), st.floats(1.0, 1.3), st.floats(0.5, 1.0)))  # often tight
    shares = draw(st.lists(st.floats(0.2, 1.0), min_size=devices, max_size=devices))
    per_device = slack * workload.memory_bytes / devices
    caps = [max(1.0, share * per_device / sum(shares) * devices) / GIB for share in shares]
    return workload, Topology.cluster(hosts, per_host, caps)


def check_within_caps(plan: ShardingPlan, workload: Workload, topology: Topology) -> None:
    """``validate_plan``, and the same checked independently: each cell (row, column) once (a
    data-parallel table: once per device), each device within its own cap."""
    validate_plan(plan, workload, topology)
    assert len(plan.devices) == topology.num_devices
    cells = dict.fromkeys((t.name for t in workload.tables), 0)
    for rank, device in enumerate(plan.devices):
        assert device.memory_bytes <= topology.device_memory_bytes_of(rank)
        for shard in device.shards:
            replicated = shard.sharding_type is ShardingType.DATA_PARALLEL
            cells[shard.table.name] += shard.height * shard.width * (1 if not replicated else 1 / topology.num_devices)
    assert all(cells[t.name] == pytest.approx(t.num_embeddings * t.embedding_dim) for t in workload.tables)


def easy(workload: Workload, topology: Topology) -> bool:
    """Any placement that puts each table where it fits succeeds: every table fits in half the
    smallest device, and the tables fill at most half of all memory (a device with no room for a
    table would be over half full, and so would every other)."""
    smallest = min(topology.device_memory_bytes_all)
    largest = max(t.memory_bytes for t in workload.tables)
    return largest <= 0.5 * smallest and workload.memory_bytes <= 0.5 * topology.total_memory_bytes


@pytest.fixture(scope="module")
def contexts():
    torch.set_num_threads(1)
    policy = OptionPolicy.load(SHIPPED / "policy.pt")
    model = AnalyticalTestCostModel()
    return {split: PlannerContext(model, policy, allow_column_split=split) for split in (False, True)}


PLANNER_NAMES = (*HEURISTICS, "cost_greedy", "rl", "rl+refine")


@pytest.mark.parametrize("planner", PLANNER_NAMES)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(task=cluster_tasks(), split=st.booleans())
def test_every_planner_keeps_each_device_within_its_own_cap(contexts, task, planner, split):
    workload, topology = task
    try:
        plan = make_planner(planner, contexts[split]).plan(workload, topology)
    except PlannerError as error:
        assert error.kind in (PlannerErrorKind.INSUFFICIENT_MEMORY, PlannerErrorKind.TABLE_DOES_NOT_FIT)
        assert not easy(workload, topology), f"raised on an easy task: {error}"
        return
    check_within_caps(plan, workload, topology)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=cluster_tasks())
def test_torchrec_keeps_each_device_within_its_own_cap(task):
    from autoshard.torchrec.planner import TorchRecPlanner

    workload, topology = task
    try:
        plan = TorchRecPlanner().plan(workload, topology)
    except PlannerError as error:
        assert error.kind in (PlannerErrorKind.INSUFFICIENT_MEMORY, PlannerErrorKind.TABLE_DOES_NOT_FIT)
        return
    check_within_caps(plan, workload, topology)


def test_a_cluster_plan_exports_to_torchrec_with_each_ranks_local_device():
    from autoshard.torchrec.bridge import to_torchrec_plan

    plan = make_planner("size_greedy").plan(FOUR, SMALL_FIRST)  # s on rank 0, a 1, b 2, c 3
    sharding = to_torchrec_plan(plan, FOUR, 4, local_world_size=2).plan[""]
    placements = {name: str(p.sharding_spec.shards[0].placement) for name, p in sharding.items()}
    assert placements == {"s": "rank:0/cuda:0", "a": "rank:1/cuda:1", "b": "rank:2/cuda:0", "c": "rank:3/cuda:1"}


def test_replan_keeps_a_clusters_hosts_from_the_options_or_the_file(tmp_path):
    """Criteo Kaggle planned on 2 hosts x 2 devices, then re-planned on the same cluster."""
    torch.set_num_threads(1)
    current = tmp_path / "current.json"
    cluster = ["--hosts", "2", "--devices-per-host", "2", "--memory-gb", "8"]
    result = runner.invoke(
        app,
        ["plan", "criteo_kaggle", "--planner", "cost_greedy", "--format", "torchrec", "--out", str(current), *cluster],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(current.read_text())["local_world_size"] == 2
    result = runner.invoke(
        app, ["replan", "criteo_kaggle", "--from", str(current), *cluster, "--max-moves", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["topology"] == {"num_devices": 4, "num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 8}
    assert all([d["host"] for d in row["devices"]] == [0, 0, 1, 1] for row in report["plans"])
    from autoshard.core.presets import load_workload_or_preset

    kaggle, _ = load_workload_or_preset("criteo_kaggle")
    file = tmp_path / "kaggle.json"
    file.write_text(json.dumps(workload_to_dict(kaggle, Topology.cluster(2, 2, [8, 8, 8, 6]))))
    result = runner.invoke(app, ["replan", str(file), "--from", str(current), "--max-moves", "2"])
    assert result.exit_code == 0, result.output
    assert "2 hosts x 2 x 6-8 GiB" in said(result)

"""A plan's stats (``autoshard.planners.stats``): hand-computed on a tiny cluster plan (a row-wise,
a replicated and a table-wise table on 2 hosts x 2), the CLI's ``--stats`` (rich tables and the
JSON, validated against the service's schema), and the service's ``stats``."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.communication import CommunicationModel
from autoshard.core.dmp_batch import at_dmp_batch
from autoshard.core.model_error import DeviceErrors
from autoshard.core.sharding import ShardingType
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload, replica, row_shards
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.stats import Imbalance, plan_stats
from service.main import create_app
from service.schemas.responses import PlanResponse, PlanStatsOut
from service.settings import Settings
from tests.cost_models import AnalyticalTestCostModel
from tests.service_support import copy_shipped_profile, plan_body

B = 1000
KIB_GB = 1024 / 1024**3  # 1 KiB in GiB, exact in binary
COMM = CommunicationModel(bandwidth_gbps=1.0, latency_ms=0.5)  # 1e6 bytes a ms
# per-rank caps of 16, 4, 8 and 64 KiB; between hosts faster than the measured link, so every byte
# goes at 1e6 bytes a ms
TOPOLOGY = Topology.cluster(2, 2, [16 * KIB_GB, 4 * KIB_GB, 8 * KIB_GB, 64 * KIB_GB], inter_host_bw_gbps=100.0)
# B samples per rank: a sharded shard serves every rank's, 4 B bags; a replica its rank's B
BIG = Table("big", 400, 8, pooling_factor=4.0)  # row-wise over the 4 ranks: 100 rows, 1 lookup a bag each
TINY = Table("tiny", 10, 4, pooling_factor=2.0)  # a replica on every rank: B bags, 2 lookups each
MID = Table("mid", 100, 16)  # table-wise on rank 0
WORKLOAD = Workload((BIG, TINY, MID), batch_size=B, name="tiny_cluster")


def priced(per_rank: list[list[TableShard]], model, comm, topology) -> ShardingPlan:
    """The plan with each rank priced as the planners price it: the set's compute (at DMP's bags)
    plus its all-to-all."""
    devices = []
    compute = at_dmp_batch(model, topology.num_devices)
    for shards in per_rank:
        tables = [s.as_table for s in shards]
        devices.append(DevicePlan(tuple(shards), compute.predict(tables, B) + comm.cost_ms(tables, B, topology)))
    return ShardingPlan("hand", tuple(devices))


def tiny_plan(model) -> ShardingPlan:
    blocks = row_shards(BIG, 4, ShardingType.ROW_WISE)
    copies = replica(TINY, 4)
    return priced([[blocks[0], copies, TableShard(MID)], *[[b, copies] for b in blocks[1:]]], model, COMM, TOPOLOGY)


def test_hand_computed_stats_of_a_row_wise_a_replicated_and_a_table_wise_table():
    model = AnalyticalTestCostModel()
    plan = tiny_plan(model)
    model.calls = 0
    errors = DeviceErrors((-0.1, 0.0, 0.1), 1, ())
    stats = plan_stats(plan, WORKLOAD, TOPOLOGY, model, COMM, errors)
    assert model.calls == 2  # every shard alone in one batched call a batch: sharded at 4 B, replicas at B

    # alone (AnalyticalTestCostModel, one table: bags x pooling x dim x 4 / 1e7 + 0.1):
    # a row block 4000 x 1 x 8 x 4 -> 0.1128; a replica 1000 x 2 x 4 x 4 -> 0.1032; mid 4000 x 16 x 4 -> 0.1256
    # communication a shard adds (2 x 4000 x d x 4 bytes, (L - 1)/D in the host, (D - L)/D out, at 1e6 a ms):
    # 24000 d bytes -> 0.192 (d 8), 0.384 (d 16); the replica's all-reduce 2 x 3/4 x 160 bytes -> 0.00024
    # rank 0: sharded set (block, mid) 384000 / 1e7 x 1.05 + 0.2 = 0.24032, its replica apart 0.1032;
    # comm 2 x 0.5 + 0.192 + 0.00024 + 0.384
    # ranks 1-3: block 0.1128 + replica 0.1032 = 0.216, comm 1 + 0.192 + 0.00024
    compute = [0.34352, 0.216, 0.216, 0.216]
    comm = [1.57624, 1.19224, 1.19224, 1.19224]
    costs = [a + b for a, b in zip(compute, comm)]
    memory = [100 * 8 * 4 + 10 * 4 * 4 + 100 * 16 * 4] + [100 * 8 * 4 + 10 * 4 * 4] * 3  # 9760, 3360...
    caps = [16384, 4096, 8192, 65536]
    ids = [4 * B * 1.0 * 8 + B * 2.0 * 8 + 4 * B * 1.0 * 8] + [4 * B * 1.0 * 8 + B * 2.0 * 8] * 3  # 80000, 48000...
    out = [4 * B * 8 * 4 + B * 4 * 4 + 4 * B * 16 * 4] + [4 * B * 8 * 4 + B * 4 * 4] * 3  # 400000, 144000...
    for r, rank in enumerate(stats.ranks):
        assert (rank.rank, rank.host) == (r, r // 2)
        assert rank.cost_ms == pytest.approx(costs[r]) and rank.compute_ms == pytest.approx(compute[r])
        assert rank.communication_ms == pytest.approx(comm[r])
        assert (rank.memory_bytes, rank.memory_cap_bytes) == (memory[r], caps[r])
        assert rank.memory_share == pytest.approx(memory[r] / caps[r])
        assert rank.input_bytes == pytest.approx(ids[r]) and rank.output_bytes == pytest.approx(out[r])
    assert dict(stats.ranks[0].shards) == {"data_parallel": 1, "table_wise": 1, "row_wise": 1}
    assert [k for k, _ in stats.ranks[0].shards] == ["data_parallel", "table_wise", "row_wise"]  # TorchRec's order
    assert all(dict(r.shards) == {"data_parallel": 1, "row_wise": 1} for r in stats.ranks[1:])

    tables = {t.table: t for t in stats.tables}
    assert [t.table for t in stats.tables] == ["big", "tiny", "mid"]  # the workload's order
    big, tiny, mid = tables["big"], tables["tiny"], tables["mid"]
    assert (big.sharding_type, big.ranks, big.shards, big.memory_bytes) == ("row_wise", (0, 1, 2, 3), 4, 12800)
    assert big.compute_alone_ms == pytest.approx(4 * 0.1128) and big.communication_ms == pytest.approx(4 * 0.192)
    assert (tiny.sharding_type, tiny.ranks, tiny.memory_bytes) == ("data_parallel", (0, 1, 2, 3), 640)
    assert tiny.cost_alone_ms == pytest.approx(4 * (0.1032 + 0.00024))
    assert (mid.sharding_type, mid.ranks, mid.memory_bytes) == ("table_wise", (0,), 6400)
    assert mid.cost_alone_ms == pytest.approx(0.1256 + 0.384)
    assert (big.pooling_factor, tiny.pooling_factor, mid.pooling_factor) == (4.0, 2.0, 1.0)

    mean = sum(costs) / 4
    assert stats.max_rank == 0 and stats.max_cost_ms == pytest.approx(costs[0])
    assert stats.mean_cost_ms == pytest.approx(mean)
    assert stats.expected_max_ms == pytest.approx(errors.expected_max(costs))
    p = [c / sum(costs) for c in costs]
    assert stats.cost_imbalance.max_over_mean == pytest.approx(costs[0] / mean - 1)  # 11.7%
    assert stats.cost_imbalance.total_variation == pytest.approx(p[0] - 0.25)
    assert stats.cost_imbalance.kl_divergence == pytest.approx(sum(x * math.log(4 * x) for x in p) / math.log(4))
    assert stats.memory_imbalance.max_over_mean == pytest.approx(9760 / 4960 - 1)
    assert stats.memory_imbalance.total_variation == pytest.approx(9760 / 19840 - 0.25)

    path = stats.critical_path
    assert (path.rank, path.compute_ms, path.communication_ms) == (0, pytest.approx(0.34352), pytest.approx(1.57624))
    assert path.total_ms == pytest.approx(costs[0]) and path.sum_of_maxima_ms == pytest.approx(costs[0])
    assert [(m.rank, m.memory_share) for m in stats.nearest_memory_cap] == [
        (1, 3360 / 4096),
        (0, 9760 / 16384),
        (2, 3360 / 8192),
    ]
    assert [(s.shard, s.sharding_type) for s in stats.max_rank_shards] == [
        ("mid", "table_wise"),
        ("big[r0:100]", "row_wise"),
        ("tiny[dp]", "data_parallel"),
    ]
    assert [s.cost_alone_ms for s in stats.max_rank_shards] == pytest.approx([0.5096, 0.3048, 0.10344])
    assert stats.max_rank_shards[0].share_of_rank == pytest.approx(0.5096 / costs[0])

    data = json.loads(json.dumps(stats.to_dict()))  # plain JSON, and the service's schema of it
    assert PlanStatsOut.model_validate(data).max.rank == 0
    assert data["ranks"][0]["shards"] == {"data_parallel": 1, "table_wise": 1, "row_wise": 1}
    assert data["max"]["expected_max_ms"] == pytest.approx(stats.expected_max_ms)


def test_the_sum_of_maxima_exceeds_the_critical_path_where_compute_and_comms_peak_on_different_ranks():
    model, comm = AnalyticalTestCostModel(), CommunicationModel(bandwidth_gbps=1.0, latency_ms=0.0)
    topology = Topology(2, 1.0)
    lookups, wide = Table("lookups", 100, 4, pooling_factor=100.0), Table("wide", 100, 64)
    plan = priced([[TableShard(lookups)], [TableShard(wide)]], model, comm, topology)
    stats = plan_stats(plan, Workload((lookups, wide), B), topology, model, comm)
    # every rank's 2000 bags: rank 0: compute 2000 x 100 x 4 x 4 / 1e7 + 0.1 = 0.42,
    # comm 2 x 2000 x 4 x 4 x 1/2 / 1e6 = 0.032; rank 1: compute 2000 x 64 x 4 / 1e7 + 0.1 = 0.1512, comm 0.512
    assert stats.max_rank == 1 and stats.critical_path.total_ms == pytest.approx(0.1512 + 0.512)
    assert stats.critical_path.sum_of_maxima_ms == pytest.approx(0.42 + 0.512)


def test_without_a_communication_model_or_a_cost_model_the_stats_use_the_proxy_and_no_comms():
    plan = tiny_plan(ProxyCostModel())  # priced as without a model: the proxy, no all-to-all
    plan = ShardingPlan(
        "proxy",
        tuple(DevicePlan(d.shards, ProxyCostModel().predict([s.as_table for s in d.shards], B)) for d in plan.devices),
    )
    stats = plan_stats(plan, WORKLOAD, TOPOLOGY, ProxyCostModel(), cost_unit="proxy")
    assert stats.cost_unit == "proxy" and stats.expected_max_ms is None
    assert all(r.communication_ms == 0 and r.compute_ms == r.cost_ms for r in stats.ranks)
    assert {t.table: t.cost_alone_ms for t in stats.tables} == {"big": 4 * 8.0, "tiny": 4 * 2.0, "mid": 16.0}


def test_imbalance_of_even_one_sided_and_empty_distributions():
    assert Imbalance.of([2.0, 2.0, 2.0]) == Imbalance(0.0, 0.0, 0.0)
    lopsided = Imbalance.of([4.0, 0.0, 0.0, 0.0])
    assert lopsided.max_over_mean == pytest.approx(3.0)
    assert lopsided.total_variation == pytest.approx(0.75) and lopsided.kl_divergence == pytest.approx(1.0)
    assert Imbalance.of([]) == Imbalance.of([0.0, 0.0]) == Imbalance(0.0, 0.0, 0.0)
    assert Imbalance.of([5.0]).kl_divergence == 0.0


# --- the CLI ----------------------------------------------------------------------------------

runner = CliRunner()
KAGGLE = ["plan", "criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--model", "none"]


def test_plan_stats_prints_every_section():
    result = runner.invoke(app, [*KAGGLE, "--planner", "size_greedy,lookup_greedy", "--stats"])
    assert result.exit_code == 0, result.output
    for section in (
        "'s plan: per rank",
        "no forward/backward split",
        "per table, costliest alone first",
        "balance over ranks",
        "total variation",
        "max: rank",
        "critical path: rank",
        "Sum of maxima",
        "nearest their memory cap",
        "the max: its shards, costliest alone first",
    ):
        assert section in result.stdout, section
    assert "costs in proxy" in result.stdout


def test_plan_stats_json_carries_them_under_the_best_plan_only_and_matches_the_schema():
    result = runner.invoke(app, [*KAGGLE, "--planner", "size_greedy,lookup_greedy", "--stats", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    with_stats = [p for p in report["plans"] if "stats" in p]
    assert len(with_stats) == 1 and with_stats[0]["best"]
    stats = PlanStatsOut.model_validate(with_stats[0]["stats"])
    best = with_stats[0]
    assert stats.planner == best["planner"] and len(stats.ranks) == 4 and len(stats.tables) == 26
    assert [r.cost_ms for r in stats.ranks] == [d["cost_ms"] for d in best["devices"]]
    assert [r.memory_bytes for r in stats.ranks] == [d["memory_bytes"] for d in best["devices"]]
    assert stats.max.cost_ms == best["max_cost_ms"] and stats.imbalance.cost.max_over_mean == pytest.approx(
        best["imbalance"]
    )
    plain = json.loads(runner.invoke(app, [*KAGGLE, "--planner", "size_greedy", "--json"]).stdout)
    assert all("stats" not in p for p in plain["plans"])


def test_plan_stats_with_the_shipped_profile_split_compute_and_comms_and_expect_a_max():
    result = runner.invoke(
        app,
        [
            "plan",
            "criteo_kaggle",
            "--devices",
            "4",
            "--memory-gb",
            "1",
            "--planner",
            "cost_greedy",
            "--stats",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["plans"][0]
    stats = PlanStatsOut.model_validate(best["stats"])
    assert stats.cost_unit == "ms" and stats.max.expected_max_ms == best["expected_max_ms"]
    for rank, device in zip(stats.ranks, best["devices"]):
        assert rank.communication_ms == pytest.approx(device["communication_ms"]) and rank.communication_ms > 0
        assert rank.compute_ms == pytest.approx(device["compute_ms"])
    assert stats.critical_path.total_ms == pytest.approx(best["max_cost_ms"])


# --- the service ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = copy_shipped_profile(tmp_path_factory.mktemp("models"), policy=False)
    with TestClient(create_app(Settings(model_dir=folder, pool="thread"))) as c:
        yield c


def test_the_service_returns_the_best_plans_stats_when_asked(client):
    body = plan_body(20, {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 16})
    body["planners"] = ["size_greedy", "cost_greedy"]
    plain = client.post("/v1/plans", json=body)
    assert plain.status_code == 200, plain.text
    assert all(p["stats"] is None for p in plain.json()["plans"])
    response = client.post("/v1/plans", json={**body, "stats": True})
    assert response.status_code == 200, response.text
    answer = PlanResponse.model_validate(response.json())
    best = next(p for p in answer.plans if p.planner == answer.best)
    assert all(p.stats is None for p in answer.plans if p is not best)
    stats = best.stats
    assert stats is not None and stats.planner == answer.best and stats.cost_unit == "ms"
    assert [r.host for r in stats.ranks] == [0, 0, 1, 1]
    assert [r.cost_ms for r in stats.ranks] == [d.cost_ms for d in best.devices]
    assert [r.communication_ms for r in stats.ranks] == pytest.approx([d.communication_ms for d in best.devices])
    assert stats.max.expected_max_ms == best.expected_max_ms
    assert sorted(t.table for t in stats.tables) == sorted(t["name"] for t in body["workload"]["tables"])
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert "PlanStatsOut" in schema and "stats" in schema["PlanRequest"]["properties"]

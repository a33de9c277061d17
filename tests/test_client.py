"""The Python client and the TorchRec-native planner against a live `autoshard serve` (real HTTP on
127.0.0.1, with a bearer token), including DistributedModelParallel on 2 gloo processes sharded
by a plan that rank 0 asked the service for. The server must stop on SIGTERM with exit code 0."""

from __future__ import annotations

import os

import pytest

from autoshard.client import AutoShardClient, ServiceError
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import Table, Topology
from autoshard.planners.validate import validate_plan
from autoshard.planning.registry import HEURISTICS
from autoshard.torchrec.dmp_run import exit_finished_rank  # noqa: E402
from tests.dmp_support import assert_sharded_matches_reference  # noqa: E402
from tests.service_support import (
    ServedProcess,
    copy_shipped_profile,
    free_port,
    synthetic_workload,
)

TOKEN = "launcher-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = ServedProcess(
        copy_shipped_profile(tmp_path_factory.mktemp("models")),  # model, all-to-all, policy, errors
        # a planning budget a fully loaded 2-core machine meets (the default 10 s was missed)
        env={"AUTOSHARD_API_TOKEN": TOKEN, "AUTOSHARD_PLAN_TIMEOUT_S": "600"},
    )
    yield served
    code = served.stop()
    assert code == 0, f"autoshard serve did not stop cleanly on SIGTERM ({code}): {served.output()}"


@pytest.fixture
def client(server):
    with AutoShardClient(server.url, token=TOKEN) as c:
        yield c


def test_plan_returns_every_planners_plan_as_our_types(client):
    workload = synthetic_workload(80)
    topology = Topology(8, 16)
    result = client.plan(workload, topology)
    assert (
        set(result.plans) == {*HEURISTICS, "cost_greedy", "rl", "rl+refine", "rl+refine_raw"}
        and result.cost_unit == "ms"
    )
    assert result.warnings == ()
    for plan in result.plans.values():
        validate_plan(plan, workload, topology)  # rebuilt shards are exactly the workload's tables
    assert result.best_plan.max_cost_ms == min(p.max_cost_ms for p in result.plans.values())
    assert set(result.improvement_over) == set(HEURISTICS) and not result.partial


def test_a_list_of_tables_and_a_planner_subset(client):
    tables = [Table("user", 100_000, 64, 1.0), Table("item", 50_000, 32, 20.0), Table("ctx", 100, 8)]
    result = client.plan(tables, Topology(2, 1), ["size_greedy", "cost_greedy"], batch_size=512)
    assert list(result.plans) == ["size_greedy", "cost_greedy"] and result.workload.batch_size == 512


def test_the_rl_planners_and_the_extrapolation_warnings(client):
    planners = {p["name"]: p for p in client.planners()["planners"]}
    assert planners["rl"]["kind"] == planners["rl+refine"]["kind"] == "policy"
    assert planners["rl"]["default"] and "policy.pt" in planners["rl"]["policy"]
    kinds = {a["kind"] for a in client.profiles()["profiles"][0]["artifacts"]}
    assert kinds == {"cost_model", "policy", "device_errors"}
    tables = [Table("user", 100_000, 64, 1.0), Table("deep", 300_000_000, 4, 1.0), Table("ctx", 100, 8)]
    result = client.plan(tables, Topology(2, 16), ["rl", "rl+refine"])
    assert list(result.plans) == ["rl", "rl+refine"]
    assert len(result.warnings) == 1 and "'deep'" in result.warnings[0]
    assert result.plans["rl+refine"].max_cost_ms <= result.plans["rl"].max_cost_ms * (1 + 1e-6)  # float32 sums


def test_replan_keeps_a_plans_shards_and_its_placement_chains(client):
    """A plan from the service, its workload changed (a table gone, one new), re-planned with a
    budget of one move; the re-plan's placement is the next request's current plan."""
    tables = [Table(f"t{i}", 100_000 * (i + 1), 32, 2.0 + i) for i in range(6)]
    topology = Topology(2, 1)
    plan = client.plan(tables, topology, ["cost_greedy"], batch_size=512, allow_column_split=False).best_plan
    current = {
        "world_size": 2,
        "tables": {
            s.table.name: {"shards": [{"rank": rank, "column_offset": 0, "columns": 32}]}
            for rank, d in enumerate(plan.devices)
            for s in d.shards
        },
    }
    now = tables[1:] + [Table("new", 50_000, 32, 3.0)]
    report = client.replan(now, topology, current, (1,), batch_size=512)
    keep, moved, scratch = report["plans"]
    assert (report["new_tables"], report["dropped"]) == (["new"], ["t0"])
    assert keep["shards_moved"] == 0 and moved["shards_moved"] <= 1 and scratch["plan"] == "cost_greedy"
    again = client.replan(now, topology, moved["placement"], (0,), batch_size=512)
    assert again["plans"][0]["max_cost_ms"] == moved["max_cost_ms"]


def test_torchrecs_host_memory_cap_goes_with_a_plan_and_a_replan_of_its_uvm_tables(client):
    """over_hbm (five 244 MiB tables on 2 x 0.5 GiB) needs host memory: planned within a roomy
    ``ddr_cap_gb``, refused naming ddr_cap within a tight one, and re-planned with a table more,
    each kept table on its kernel."""
    pytest.importorskip("torchrec")
    from tests.test_torchrec_ddr_cap import ROOMY, TIGHT, over_hbm

    workload, topology = over_hbm(), Topology(2, 0.5)
    torchrec = {"profile": "torchrec", "ddr_cap_gb": ROOMY}
    result = client.plan(workload, topology, ["cost_greedy"], torchrec_export=True, **torchrec)
    assert result.profile == "torchrec (cuda, ddr_cap 4.0 GiB)"
    export = result.torchrec_exports["cost_greedy"]
    assert "fused_uvm_caching" in {e["compute_kernel"] for e in export.values()}
    with pytest.raises(PlannerError, match="ddr_cap of 107,374,182 bytes"):
        client.plan(workload, topology, ["cost_greedy"], profile="torchrec", ddr_cap_gb=TIGHT)
    grown = (*workload.tables, Table("new", 2_000_000, 32, 5.0))
    current = {"world_size": 2, "tables": export}
    report = client.replan(grown, topology, current, (2,), batch_size=workload.batch_size, **torchrec)
    assert report["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)" and report["new_tables"] == ["new"]
    kept = report["plans"][0]["placement"]["tables"]
    assert {n: kept[n]["compute_kernel"] for n in export} == {n: e["compute_kernel"] for n, e in export.items()}


def test_service_errors_come_back_as_the_librarys_errors(client, server):
    with pytest.raises(InputError, match="embedding_dim"):
        client._request(
            "POST",
            "/v1/plans",
            json={
                "workload": {"tables": [{"name": "t", "num_embeddings": 5, "embedding_dim": 0}]},
                "topology": {"num_devices": 1, "device_memory_gb": 1},
            },
        )
    with pytest.raises(PlannerError) as info:
        client.plan(
            [Table("huge", 40 * 2**20, 128), Table("small", 10, 4)],
            Topology(2, 16),  # 20 GiB
            allow_column_split=False,
            sharding_types=["table_wise", "column_wise"],  # row-wise would split it
        )
    assert info.value.kind is PlannerErrorKind.TABLE_DOES_NOT_FIT and "huge" in info.value.message
    assert "Fixes:" not in info.value.message and info.value.fixes  # listed once
    with pytest.raises(InputError, match="unknown planner"):
        client.plan([Table("t", 10, 4)], Topology(1, 1), ["magic"])
    with pytest.raises(InputError, match="fp64") as refused:  # the shipped model knows fp32 and fp16 only
        client.plan([Table("t", 10, 4), Table("wide", 1000, 16, bytes_per_element=8)], Topology(1, 1))
    assert refused.value.field == "body.workload.tables.1.bytes_per_element" and "'wide'" in str(refused.value)
    with AutoShardClient(server.url) as anonymous:
        with pytest.raises(ServiceError) as denied:
            anonymous.planners()
        assert denied.value.status == 401
        assert anonymous.ready()["status"] == "ready"  # health needs no token
    with AutoShardClient(f"http://127.0.0.1:{free_port()}", retries=0) as nowhere, pytest.raises(ServiceError):
        nowhere.ready()


def test_a_server_that_is_not_autoshard_is_a_service_error():
    """Something else on the port (here a plain HTTP server answering text) is the library's
    ServiceError, not a JSON decoding traceback from inside the client."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Text(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Text)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with AutoShardClient(f"http://127.0.0.1:{other.server_address[1]}", retries=0) as client:
            with pytest.raises(ServiceError, match="not an AutoShard service"):
                client.ready()
    finally:
        other.shutdown()


def test_torchrec_plan_and_constraints_from_the_answer(client):
    pytest.importorskip("torchrec")
    from autoshard.torchrec.bridge import MODULE_PATH, table_placements

    workload = synthetic_workload(12)
    result = client.plan(workload, Topology(4, 16), ["cost_greedy"], torchrec_export=True)
    torchrec_plan = result.torchrec_plan(compute_device="cpu")
    module_plan = torchrec_plan.plan[MODULE_PATH]
    placements = table_placements(result.best_plan, workload)
    for table in workload.tables:
        assert module_plan[table.name].ranks == [p.rank for p in placements[table.name]]
    constraints = result.parameter_constraints()
    assert set(constraints) == {t.name for t in workload.tables}
    assert set(result.torchrec_exports["cost_greedy"]) == {t.name for t in workload.tables}
    assert client.torchrec_sharding_plan(workload, Topology(4, 16), ["size_greedy"], compute_device="cpu").plan[
        MODULE_PATH
    ]


def test_the_native_planner_plans_nested_collections_in_process():
    pytest.importorskip("torchrec")
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.planner.types import Topology as TorchRecTopology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from autoshard.planning.registry import make_planner
    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    def collection(*specs):
        return EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n]) for n, r, d in specs
            ],
            device=torch.device("meta"),
        )

    model = torch.nn.Module()
    model.user = collection(("u1", 1000, 16), ("u2", 500, 32))
    model.tower = torch.nn.Sequential(collection(("i1", 2000, 64)))
    planner = AutoShardShardingPlanner(
        topology=TorchRecTopology(world_size=2, compute_device="cpu", ddr_cap=2**30),
        constraints={"i1": ParameterConstraints(pooling_factors=[30.0])},
        planner=make_planner("lookup_greedy"),
    )
    plan = planner.plan(model, [EmbeddingBagCollectionSharder()])
    assert set(plan.plan) == {"user", "tower.0"}
    assert set(plan.plan["user"]) == {"u1", "u2"} and set(plan.plan["tower.0"]) == {"i1"}
    i1 = next(s.table for d in planner.last_plan.devices for s in d.shards if s.table.name == "i1")
    assert i1.pooling_factor == 30.0
    with pytest.raises(InputError, match="EmbeddingBagCollection"):
        planner.plan(torch.nn.Linear(2, 2), [])


def _dmp_worker(rank: int, world_size: int, port: int, url: str) -> None:
    """One rank: plan through the service with the native planner (rank 0 asks, then broadcasts),
    shard with DMP, copy the reference weights in, and compare the pooled embeddings."""
    import torch
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.planner.types import Topology as TorchRecTopology

    from autoshard.torchrec.bridge import embedding_bag_collection
    from autoshard.torchrec.drop_in import AutoShardShardingPlanner
    from tests.test_torchrec_bridge import hand_plan

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        workload, _ = hand_plan()
        torch.manual_seed(0)
        reference = embedding_bag_collection(workload, "cpu")
        sharders = [EmbeddingBagCollectionSharder()]
        planner = AutoShardShardingPlanner(
            topology=TorchRecTopology(world_size=world_size, compute_device="cpu", ddr_cap=2**20),
            batch_size=workload.batch_size,
            constraints={t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in workload.tables},
            client=AutoShardClient(url, token=TOKEN) if rank == 0 else None,
            planner=None if rank == 0 else _NeverCalled(),
            planners=["cost_greedy"],
            allow_column_split=True,
        )
        plan = planner.collective_plan(embedding_bag_collection(workload), sharders, dist.GroupMember.WORLD)
        sharded = DistributedModelParallel(
            embedding_bag_collection(workload),
            device=torch.device("cpu"),
            plan=plan,
            sharders=sharders,
            init_data_parallel=False,
        )
        ranks = {name: sharding.ranks for name, sharding in plan.plan[""].items()}
        assert sorted(ranks) == sorted(t.name for t in workload.tables)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, ranks)
        assert gathered[0] == gathered[1]  # every rank shards the same way

        assert_sharded_matches_reference(sharded, reference, workload, exact=False)
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


class _NeverCalled:
    """Ranks other than 0 must not plan: they receive rank 0's plan."""

    name = "never"

    def plan(self, workload, topology):
        raise AssertionError("only rank 0 plans")


@pytest.mark.timeout(240)
def test_dmp_on_two_gloo_processes_with_the_native_planner_over_http(server):
    pytest.importorskip("torchrec")
    import torch.multiprocessing as mp

    mp.spawn(_dmp_worker, args=(2, free_port(), server.url), nprocs=2, join=True)

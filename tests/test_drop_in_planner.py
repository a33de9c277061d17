"""The drop-in planner takes EmbeddingShardingPlanner's arguments: one kwargs dict builds both
TorchRec's planner and ours; ours reads the cluster from TorchRec's Topology (hosts, per-device
memory, bandwidths), the memory TorchRec's storage reservation leaves, the pooling factors and
sharding types of the constraints; its plan runs under DMP on gloo ranks; and on three tight
tasks a model TorchRec's planner plans (with its default storage reservation) is planned by ours."""

import os
import warnings
from dataclasses import replace

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torchrec.distributed.embedding_types import EmbeddingComputeKernel  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: E402
from torchrec.distributed.planner.proposers import GreedyProposer  # noqa: E402
from torchrec.distributed.planner.storage_reservations import (  # noqa: E402
    FixedPercentageStorageReservation,
    HeuristicalStorageReservation,
)
from torchrec.distributed.planner.types import (  # noqa: E402
    CustomTopologyData,
    ParameterConstraints,
)
from torchrec.distributed.planner.types import PlannerError as TorchRecPlannerError  # noqa: E402
from torchrec.distributed.planner.types import Topology as TorchRecTopology  # noqa: E402
from torchrec.distributed.types import CacheParams  # noqa: E402
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402

from autoshard.core.errors import InputError, PlannerError  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import GIB, Table, Topology, Workload  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.sharding_options import ALL_TYPES  # noqa: E402
from autoshard.planners.validate import validate_plan  # noqa: E402
from autoshard.profile_choice import default_profile_for  # noqa: E402
from autoshard.torchrec.bridge import embedding_bag_collection  # noqa: E402
from autoshard.torchrec.dmp_run import exit_finished_rank  # noqa: E402
from autoshard.torchrec.drop_in import AutoShardShardingPlanner  # noqa: E402
from autoshard.torchrec.drop_in_inputs import (  # noqa: E402
    pooling_factors_from_constraints,
    table_constraints,
    topology_from_torchrec,
)
from tests.dmp_support import assert_sharded_matches_reference, free_port  # noqa: E402

MiB = 1024**2
SHARDERS = [EmbeddingBagCollectionSharder()]

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")


def ebc(specs, data_type=DataType.FP32, device="meta") -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n], data_type=data_type)
            for n, r, d in specs
        ],
        device=torch.device(device),
    )


def kinds_of(plan, path=""):
    return {name: sharding.sharding_type for name, sharding in plan.plan[path].items()}


def test_one_kwargs_dict_builds_torchrecs_planner_and_ours(shipped_model):
    """The same arguments plan with TorchRec and with AutoShard; ours honours the row_wise
    constraint and the constraints' pooling factors, on the cluster and memory TorchRec's
    Topology and its default storage reservation give."""
    module = ebc([("user", 400_000, 64), ("item", 50_000, 64)])
    kwargs = dict(
        topology=TorchRecTopology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=64 * MiB),
        batch_size=1024,
        constraints={
            "user": ParameterConstraints(sharding_types=["row_wise"], compute_kernels=["fused"]),
            "item": ParameterConstraints(sharding_types=["row_wise"], pooling_factors=[20.0]),
        },
        timeout_seconds=30,
    )
    theirs = EmbeddingShardingPlanner(**kwargs).plan(module, SHARDERS)
    assert kinds_of(theirs) == {"user": "row_wise", "item": "row_wise"}

    planner = AutoShardShardingPlanner(**kwargs, planner="cost_greedy", context=PlannerContext(shipped_model))
    ours = planner.plan(module, SHARDERS)
    assert kinds_of(ours) == {"user": "row_wise", "item": "row_wise"}
    assert ours.plan[""]["user"].ranks == [0, 1, 2, 3]
    assert str(ours.plan[""]["user"].sharding_spec.shards[2].placement) == "rank:2/cuda:0"

    pooling = {t.name: t.pooling_factor for t in planner.last_workload.tables}
    assert pooling == {"user": 1.0, "item": 20.0}
    assert planner.last_workload.batch_size == 1024

    topology = planner.last_topology  # 2 hosts of 2; each device's memory after TorchRec's reservation
    reserved = HeuristicalStorageReservation(0.15).reserve(
        kwargs["topology"], 1024, module, SHARDERS, kwargs["constraints"]
    )
    assert (topology.num_hosts, topology.devices_per_host) == (2, 2)
    assert topology.device_memory_bytes == pytest.approx(reserved.devices[0].storage.hbm, abs=1)
    assert topology.device_memory_bytes < 0.85 * 64 * MiB  # 15 % and the KJT inputs held back
    assert (topology.intra_host_bw_gbps, topology.inter_host_bw_gbps) == pytest.approx((600.0, 12.5))
    validate_plan(planner.last_plan, planner.last_workload, topology)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torchrecs_arguments_alone_plan(device, caplog):
    """EmbeddingShardingPlanner's keyword arguments, and nothing else, plan with TorchRec and with
    AutoShard: in process, the default planners, the compute device's default profile
    (``default_profile_for``), named with why in the plan's log line; a column_wise table with
    a min_partition (which TorchRec honours) is planned column-wise, no block narrower."""
    module = ebc([("user", 40_000, 64), ("item", 5_000, 32), ("page", 2_000, 16)])
    kwargs = dict(
        topology=TorchRecTopology(
            world_size=4, local_world_size=2, compute_device=device, hbm_cap=64 * MiB, ddr_cap=64 * MiB
        ),
        batch_size=512,
        constraints={
            "user": ParameterConstraints(sharding_types=["column_wise"], min_partition=16, compute_kernels=["fused"]),
            "item": ParameterConstraints(pooling_factors=[4.0]),
        },
        storage_reservation=HeuristicalStorageReservation(0.2),
        timeout_seconds=60,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = EmbeddingShardingPlanner(**kwargs).plan(module, SHARDERS)
    assert kinds_of(theirs)["user"] == "column_wise"

    planner = AutoShardShardingPlanner(**kwargs)
    with caplog.at_level("INFO", logger="autoshard.torchrec.drop_in"):
        ours = planner.plan(module, SHARDERS)
    assert kinds_of(ours)["user"] == "column_wise"
    user = ours.plan[""]["user"].sharding_spec.shards
    assert all(s.shard_sizes[1] >= 16 for s in user) and sum(s.shard_sizes[1] for s in user) == 64
    validate_plan(planner.last_plan, planner.last_workload, planner.last_topology)
    profile, why = planner.last_profile
    expected = default_profile_for(device)
    named = f"torchrec ({device})" if expected.profile == "torchrec" else expected.profile  # the device it prices
    assert profile == named and why == expected.reason
    line = next(r.getMessage() for r in caplog.records if "AutoShard (" in r.getMessage())
    assert f"profile {profile} ({why})" in line
    assert planner.last_workload.constraints.of("user").min_partition == 16


def test_topology_and_reservation_come_from_torchrec():
    """Per-device caps from CustomTopologyData, bandwidths from bytes/ms to GiB/s, DDR on cpu, a
    storage reservation given; the drop-in's cluster is the reserved one, byte for byte."""
    module = nn.Module()
    module.sparse = ebc([("a", 1_000, 16), ("b", 2_000, 32)])
    module.dense = nn.Linear(64, 64, device="meta")
    caps = [64 * MiB, 64 * MiB, 128 * MiB, 32 * MiB]
    given = TorchRecTopology(
        world_size=4,
        local_world_size=2,
        compute_device="cuda",
        custom_topology_data=CustomTopologyData({"hbm_cap": caps}, 4),
        intra_host_bw=300 * GIB / 1000,
        inter_host_bw=25 * GIB / 1000,
    )
    planner = AutoShardShardingPlanner(topology=given, batch_size=256, planner="size_greedy")
    ours = planner.autoshard_topology(module, SHARDERS)
    reserved = HeuristicalStorageReservation(0.15).reserve(given, 256, module, SHARDERS)
    assert ours.device_memory_bytes_all == pytest.approx([d.storage.hbm for d in reserved.devices], abs=1)
    dense = 6 * (64 * 64 + 64) * 4  # TorchRec's heuristic: 6 x the dense parameters' bytes
    assert ours.device_memory_bytes_of(2) < 0.85 * 128 * MiB - dense
    assert (ours.num_hosts, ours.intra_host_bw_gbps, ours.inter_host_bw_gbps) == pytest.approx((2, 300.0, 25.0))

    fixed = AutoShardShardingPlanner(
        topology=given, storage_reservation=FixedPercentageStorageReservation(0.5), planner="size_greedy"
    )
    assert fixed.autoshard_topology(module, SHARDERS).device_memory_bytes_all == pytest.approx(
        [c // 2 for c in caps], abs=1
    )

    on_cpu = TorchRecTopology(world_size=2, compute_device="cpu", ddr_cap=256 * MiB)  # tables live in DDR there
    cpu = AutoShardShardingPlanner(topology=on_cpu, batch_size=256, planner="size_greedy")
    reserved = HeuristicalStorageReservation(0.15).reserve(on_cpu, 256, module, SHARDERS)
    assert cpu.autoshard_topology(module, SHARDERS).device_memory_bytes == pytest.approx(
        reserved.devices[0].storage.ddr, abs=1
    )
    assert cpu.compute_device == "cpu"
    assert topology_from_torchrec(on_cpu) == Topology(2, 256 / 1024)

    tiny = TorchRecTopology(world_size=2, compute_device="cuda", hbm_cap=MiB)  # the dense part alone is more
    big_dense = nn.Module()
    big_dense.sparse, big_dense.dense = ebc([("a", 100, 8)]), nn.Linear(512, 512, device="meta")
    with pytest.raises(PlannerError, match="storage reservation"):
        AutoShardShardingPlanner(topology=tiny, planner="size_greedy").plan(big_dense, SHARDERS)
    with pytest.raises(InputError, match="local_world_size"):
        topology_from_torchrec(TorchRecTopology(world_size=4, local_world_size=3, compute_device="cuda"))


def allowed(constraints: dict) -> dict:
    return {n: c.allowed_types(ALL_TYPES) for n, c in table_constraints(constraints, 100).items()}


def test_constraints_pooling_types_and_kernels():
    """Pooling factors: TorchRec's lookups per sample (the sum over features of pooling factor x
    num_poolings x batch_sizes, over the batch); sharding types and kernels per table; what
    AutoShard cannot plan is refused by name."""
    pooling = pooling_factors_from_constraints(
        {
            "one": ParameterConstraints(pooling_factors=[7.0]),
            "sum": ParameterConstraints(pooling_factors=[10.0, 30.0]),
            "batches": ParameterConstraints(pooling_factors=[10.0, 30.0], batch_sizes=[100, 300]),
            "polls": ParameterConstraints(pooling_factors=[10.0, 30.0], num_poolings=[3.0, 1.0]),
        },
        batch_size=100,
    )
    assert pooling == {"one": 7.0, "sum": 40.0, "batches": 100.0, "polls": 60.0}
    with pytest.raises(InputError, match="batch_sizes 1") as lengths:
        pooling_factors_from_constraints({"t": ParameterConstraints(pooling_factors=[1.0, 2.0], batch_sizes=[4])}, 4)
    assert "'t'" in str(lengths.value)

    every_kernel = [k.value for k in EmbeddingComputeKernel]
    assert allowed(
        {
            "rw": ParameterConstraints(sharding_types=["row_wise"]),
            "fused": ParameterConstraints(compute_kernels=["fused"]),  # no dense kernel: no data parallel
            "dense": ParameterConstraints(compute_kernels=["dense"]),  # the dense kernel alone: data parallel
            "all": ParameterConstraints(compute_kernels=every_kernel),
        }
    ) == {
        "rw": frozenset({ShardingType.ROW_WISE}),
        "fused": ALL_TYPES - {ShardingType.DATA_PARALLEL},
        "dense": frozenset({ShardingType.DATA_PARALLEL}),
        "all": ALL_TYPES,
    }
    with pytest.raises(InputError, match="compute_kernels") as refused:
        table_constraints({"t": ParameterConstraints(compute_kernels=["key_value"])}, 100)
    assert "'t'" in str(refused.value)
    cached = ParameterConstraints(compute_kernels=["fused_uvm_caching"], cache_params=CacheParams(load_factor=0.3))
    [uvm] = table_constraints({"t": cached}, 100).values()  # planned under --model torchrec on cuda
    assert uvm.sharded_kernels == ("fused_uvm_caching",) and uvm.cache_load_factor == 0.3
    with pytest.raises(InputError, match="sideways"):
        table_constraints({"t": ParameterConstraints(sharding_types=["sideways"])}, 100)
    module = ebc([("t", 100, 8)])
    refused_dp = {"t": ParameterConstraints(sharding_types=["data_parallel"], compute_kernels=["fused"])}
    with pytest.raises(PlannerError, match="data_parallel runs on the 'dense' kernel") as conflict:
        AutoShardShardingPlanner(
            topology=TorchRecTopology(world_size=2, compute_device="cuda"),
            constraints=refused_dp,
            planner="size_greedy",
        ).plan(module, SHARDERS)
    assert "'t'" in conflict.value.message

    topology = TorchRecTopology(world_size=2, compute_device="cuda")
    with pytest.raises(InputError, match="proposer"):
        AutoShardShardingPlanner(topology=topology, proposer=GreedyProposer(), planner="size_greedy")
    with pytest.raises(InputError, match="use_virtual_table"):
        AutoShardShardingPlanner(
            topology=topology, constraints={"t": ParameterConstraints(use_virtual_table=True)}, planner="size_greedy"
        )
    with pytest.raises(InputError, match="client"):
        AutoShardShardingPlanner(topology=topology, planner="size_greedy", client=object())  # type: ignore[arg-type]


def test_tables_whose_allowed_types_differ_are_planned_per_table():
    """Each table takes a type its own constraints allow (they become the workload's per-table
    constraints). Kernel settings of the constraints reach the table's ParameterSharding, as
    TorchRec's planner copies them."""
    module = ebc([("a", 1_000, 16), ("b", 1_000, 16)])
    topology = TorchRecTopology(world_size=2, compute_device="cuda", hbm_cap=64 * MiB)
    constraints = {
        "a": ParameterConstraints(sharding_types=["row_wise"]),
        "b": ParameterConstraints(sharding_types=["table_wise"]),
    }
    planner = AutoShardShardingPlanner(topology=topology, constraints=constraints, planner="size_greedy")
    assert kinds_of(planner.plan(module, SHARDERS)) == {"a": "row_wise", "b": "table_wise"}

    same = {
        "a": ParameterConstraints(sharding_types=["row_wise"], stochastic_rounding=False, output_dtype=DataType.FP16),
        "b": ParameterConstraints(sharding_types=["row_wise"]),
    }
    plan = AutoShardShardingPlanner(topology=topology, constraints=same, planner="size_greedy").plan(module, SHARDERS)
    assert kinds_of(plan) == {"a": "row_wise", "b": "row_wise"}
    assert plan.plan[""]["a"].stochastic_rounding is False and plan.plan[""]["a"].output_dtype == DataType.FP16
    assert plan.plan[""]["b"].stochastic_rounding is None


class _DenseArch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = ebc([("u", 200_000, 64), ("i", 80_000, 64), ("c", 5_000, 32), ("h", 60_000, 64)])
        self.dense = nn.Sequential(nn.Linear(256, 512, device="meta"), nn.Linear(512, 256, device="meta"))


TIGHT_TASKS = {
    # name: (module, TorchRec's arguments, hbm/ddr cap a device) -- each cap about TorchRec's least
    "six_tables_one_host": (
        lambda: ebc([(f"t{i}", 20_000 * (i + 1), 64) for i in range(6)]),
        lambda cap: dict(topology=TorchRecTopology(world_size=4, compute_device="cuda", hbm_cap=cap)),
        int(34.5 * MiB),
    ),
    "dense_arch_two_hosts": (
        _DenseArch,
        lambda cap: dict(
            topology=TorchRecTopology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=cap),
            batch_size=256,
            constraints={
                "h": ParameterConstraints(pooling_factors=[30.0]),
                "u": ParameterConstraints(pooling_factors=[2.0, 4.0]),
            },
        ),
        int(35 * MiB),
    ),
    "fp16_on_cpu": (
        lambda: ebc([(f"f{i}", 50_000 * (i + 1), 32) for i in range(4)], DataType.FP16),
        lambda cap: dict(
            topology=TorchRecTopology(world_size=2, compute_device="cpu", ddr_cap=cap),
            batch_size=128,
            constraints={"f3": ParameterConstraints(pooling_factors=[5.0, 10.0], batch_sizes=[128, 64])},
        ),
        int(15.75 * MiB),
    ),
}


def _fused_only(module: nn.Module, kwargs: dict) -> dict:
    """Every table on TorchRec's fused kernel (weights in HBM, or DDR on cpu), the one AutoShard
    plans: with its default kernels, TorchRec's planner keeps weights of tables that do not fit
    in host memory (UVM, caching), which AutoShard does not plan."""
    constraints = dict(kwargs.get("constraints", {}))
    for _, collection in module.named_modules():
        if isinstance(collection, EmbeddingBagCollection):
            for config in collection.embedding_bag_configs():
                old = constraints.get(config.name, ParameterConstraints())
                constraints[config.name] = replace(old, compute_kernels=["fused"])
    return {**kwargs, "constraints": constraints}


@pytest.mark.parametrize("task", sorted(TIGHT_TASKS))
def test_what_torchrec_plans_with_its_default_reservation_ours_plans(task, shipped_model):
    make, arguments, cap = TIGHT_TASKS[task]
    module = make()
    kwargs = _fused_only(module, arguments(cap))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        EmbeddingShardingPlanner(**kwargs).plan(module, SHARDERS)  # TorchRec plans it ...
        with pytest.raises(TorchRecPlannerError):  # ... with little to spare
            EmbeddingShardingPlanner(**_fused_only(module, arguments(int(cap * 0.93)))).plan(module, SHARDERS)

    planner = AutoShardShardingPlanner(**kwargs, planner="cost_greedy", context=PlannerContext(shipped_model))
    plan = planner.plan(module, SHARDERS)
    assert set(plan.plan) == {"sparse" if task == "dense_arch_two_hosts" else ""}
    validate_plan(planner.last_plan, planner.last_workload, planner.last_topology)
    reserved = HeuristicalStorageReservation(0.15).reserve(
        kwargs["topology"], planner.batch_size, module, SHARDERS, kwargs.get("constraints")
    )
    device_bytes = [d.storage.ddr if task == "fp16_on_cpu" else d.storage.hbm for d in reserved.devices]
    assert planner.last_topology.device_memory_bytes_all == pytest.approx(device_bytes, abs=1)


# --- under DMP ----------------------------------------------------------------------------------

DMP_WORLD = 2
DMP_WORKLOAD = Workload(
    (Table("user", 400, 8, pooling_factor=3.0), Table("item", 40, 8), Table("small", 30, 8)), batch_size=4
)


def _dmp_kwargs() -> dict:
    return dict(
        # 10 KB a device once TorchRec reserves 3,200 B for the KJT inputs: every table fits
        # whole but 'user' (12.8 KB), which is spread, as its constraint says
        topology=TorchRecTopology(world_size=DMP_WORLD, compute_device="cpu", ddr_cap=13_200),
        batch_size=4,
        constraints={
            "user": ParameterConstraints(sharding_types=["row_wise"], pooling_factors=[3.0]),
            "item": ParameterConstraints(sharding_types=["row_wise", "table_wise"]),
            "small": ParameterConstraints(sharding_types=["row_wise", "table_wise"]),
        },
    )


def _dmp_worker(rank: int, port: int) -> None:
    from torchrec.distributed.model_parallel import DistributedModelParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=DMP_WORLD)
    try:
        warnings.simplefilter("ignore", FutureWarning)
        planner = AutoShardShardingPlanner(**_dmp_kwargs(), planner="size_greedy")
        plan = planner.collective_plan(embedding_bag_collection(DMP_WORKLOAD), SHARDERS)
        assert kinds_of(plan)["user"] == "row_wise"
        assert plan.plan[""]["user"].ranks == [0, 1]
        gathered: list = [None] * DMP_WORLD
        dist.all_gather_object(gathered, kinds_of(plan))
        assert gathered[0] == gathered[1]  # rank 0 planned, every rank shards the same way
        torch.manual_seed(0)
        reference = embedding_bag_collection(DMP_WORKLOAD, "cpu")
        sharded = DistributedModelParallel(
            embedding_bag_collection(DMP_WORKLOAD),
            device=torch.device("cpu"),
            plan=plan,
            sharders=SHARDERS,
            init_data_parallel=False,
        )
        assert_sharded_matches_reference(sharded, reference, DMP_WORKLOAD, exact=False)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


@pytest.mark.timeout(60)
def test_the_drop_in_plan_runs_under_dmp():
    """collective_plan with TorchRec's arguments on 2 gloo ranks: rank 0 plans (user row-wise,
    as constrained), every rank gets the plan, DMP shards it and computes the unsharded output."""
    mp.spawn(_dmp_worker, args=(free_port(),), nprocs=DMP_WORLD, join=True)


def test_one_table_limited_to_row_wise_among_unconstrained_ones_is_planned_row_wise():
    """TorchRec's most common constraint: one large table row_wise, the others free; the
    table's own types become its workload constraint, which the planners honour."""
    from torchrec.distributed.planner import Topology as TorchRecTopology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    configs = [
        EmbeddingBagConfig(name="big", embedding_dim=16, num_embeddings=40_000, feature_names=["f_big"]),
        *(
            EmbeddingBagConfig(name=f"t{i}", embedding_dim=16, num_embeddings=2000, feature_names=[f"f{i}"])
            for i in range(4)
        ),
    ]
    module = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    planner = AutoShardShardingPlanner(
        topology=TorchRecTopology(world_size=4, local_world_size=2, compute_device="cpu"),
        batch_size=64,
        constraints={"big": ParameterConstraints(sharding_types=["row_wise"])},
        planner="size_greedy",
    )
    plan = planner.plan(module, [])
    kinds = {name: s.sharding_type for name, s in plan.plan[""].items()}
    assert kinds["big"] == "row_wise"


def test_the_default_plan_is_the_best_that_keeps_the_constraints():
    """Of the default planners' plans, the lowest max that keeps every table's constraints (TorchRec's
    planner on cpu may not: its sharders there offer no row-wise type); none keeping them names why."""
    from autoshard.core.constraints import Constraints, TableConstraints
    from autoshard.core.types import DevicePlan, ShardingPlan, TableShard, row_shards
    from autoshard.torchrec.drop_in import best_honoured

    table = Table("t", 100, 8)
    rows = row_shards(table, 2, ShardingType.ROW_WISE)
    broken = ShardingPlan("torchrec_cpu", (DevicePlan((TableShard(table),), 1.0), DevicePlan((), 0.0)))
    kept = ShardingPlan("cost_greedy", (DevicePlan((rows[0],), 1.5), DevicePlan((rows[1],), 1.5)))
    constraints = Constraints((("t", TableConstraints(frozenset({ShardingType.ROW_WISE}))),))
    assert best_honoured(broken, [broken, kept], constraints) is kept
    with pytest.raises(PlannerError, match="allows sharding types \\['row_wise'\\]"):
        best_honoured(broken, [broken], constraints)


def test_a_workload_of_column_wise_tables_with_min_partition_is_planned(shipped_model):
    """The issue's case: 120 tables constrained to column_wise with min_partition 16 (TorchRec
    honours it) were refused as a whole; each is now column-wise, no block narrower than 16."""
    module = ebc([(f"t{i}", 1_000 + 50 * i, 64) for i in range(120)])
    constraints = {f"t{i}": ParameterConstraints(sharding_types=["column_wise"], min_partition=16) for i in range(120)}
    topology = TorchRecTopology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=256 * MiB)
    planner = AutoShardShardingPlanner(
        topology=topology, batch_size=512, constraints=constraints, planner="cost_greedy", model=shipped_model
    )
    plan = planner.plan(module, SHARDERS)
    assert set(kinds_of(plan).values()) == {"column_wise"} and len(kinds_of(plan)) == 120
    widths = [s.shard_sizes[1] for p in plan.plan[""].values() for s in p.sharding_spec.shards]
    assert min(widths) >= 16
    validate_plan(planner.last_plan, planner.last_workload, planner.last_topology)

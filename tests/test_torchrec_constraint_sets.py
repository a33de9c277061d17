"""Random TorchRec constraint sets (a property test): any non-empty ``sharding_types`` list,
alone or mixed, with ``min_partition`` and ``compute_kernels`` drawn from the values TorchRec's
``ParameterConstraints`` accepts, is honoured by every planner through the drop-in, or refused
naming the table whose constraint no plan satisfies; and TorchRec's own planner fails on every
set refused (the refusal is right: nothing satisfies it).

The clusters have room to spare (memory is not what is tested: TorchRec and AutoShard count it
differently), on ``cuda``, where TorchRec's sharders offer every sharding type, with two devices
per host (TorchRec's table_row_wise and grid_shard are defined there)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints  # noqa: E402
from torchrec.distributed.planner.types import Topology as TorchRecTopology  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402

from autoshard.core.errors import PlannerError, PlannerErrorKind  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.validate import validate_plan  # noqa: E402
from autoshard.torchrec.drop_in import AutoShardShardingPlanner  # noqa: E402

PLANNERS = ("cost_greedy", "rl+refine", "size_greedy", "lookup_greedy", "round_robin", "random")
SHARDERS = [EmbeddingBagCollectionSharder()]
TYPES = [t.value for t in ShardingType]
KERNELS = (None, ["fused"], ["dense"], ["fused", "dense"], ["fused", "fused_uvm_caching"])
MiB = 1024**2
SHIPPED_POLICY = Path(__file__).resolve().parents[1] / "data" / "models" / "default" / "policy.pt"


@pytest.fixture(scope="module")
def shipped_policy():
    from autoshard.rl.policy import OptionPolicy

    return OptionPolicy.load(SHIPPED_POLICY)


@st.composite
def constraint_sets(draw):
    """A module of 2-4 tables on 1-2 hosts of 2 devices, and constraints on some of them."""
    hosts = draw(st.integers(1, 2))
    names = [f"t{i}" for i in range(draw(st.integers(2, 4)))]
    specs = [(n, draw(st.integers(8, 4000)), draw(st.sampled_from((8, 16, 32, 64)))) for n in names]
    constraints = {}
    for name in draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=len(names))):
        constraints[name] = ParameterConstraints(
            sharding_types=draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)),
            min_partition=draw(st.sampled_from((None, 4, 8, 16, 32))),
            compute_kernels=draw(st.sampled_from(KERNELS)),
        )
    return hosts, specs, constraints


def _module(specs) -> EmbeddingBagCollection:
    configs = [EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n]) for n, r, d in specs]
    return EmbeddingBagCollection(tables=configs, device=torch.device("meta"))


def _kwargs(hosts: int, constraints: dict) -> dict:
    topology = TorchRecTopology(world_size=2 * hosts, local_world_size=2, compute_device="cuda", hbm_cap=512 * MiB)
    return dict(topology=topology, batch_size=256, constraints=constraints)


def _check_honoured(planner: AutoShardShardingPlanner, constraints: dict) -> None:
    """Each constrained table under one of its types, its kernel among its kernels, no column
    block narrower than its min_partition, a table_column_wise table's blocks on one host."""
    plan, workload, topology = planner.last_plan, planner.last_workload, planner.last_topology
    validate_plan(plan, workload, topology)
    for device in plan.devices:
        for shard in device.shards:
            own = constraints.get(shard.table.name)
            if own is None:
                continue
            kind = shard.sharding_type
            assert kind.value in own.sharding_types, (shard.table.name, kind)
            kernel = "dense" if kind is ShardingType.DATA_PARALLEL else "fused"
            assert own.compute_kernels is None or kernel in own.compute_kernels, (shard.table.name, kind)
            if own.min_partition is not None and shard.width < shard.table.embedding_dim:
                assert shard.width >= own.min_partition, (shard.table.name, shard.width)
    for name in constraints:
        hosts = {topology.host_of(r) for r, d in enumerate(plan.devices) for s in d.shards if s.table.name == name}
        kinds = {s.sharding_type for d in plan.devices for s in d.shards if s.table.name == name}
        if kinds == {ShardingType.TABLE_COLUMN_WISE}:
            assert len(hosts) == 1, (name, hosts)


def _torchrec_fails(module, kwargs) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            EmbeddingShardingPlanner(**kwargs).plan(module, SHARDERS)
        except Exception:  # noqa: BLE001 - TorchRec fails with PlannerError or RuntimeError
            return True
    return False


@pytest.mark.timeout(900)
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=constraint_sets())
def test_random_torchrec_constraints_are_honoured_or_refused_by_name(case, shipped_model, shipped_policy):
    hosts, specs, constraints = case
    module = _module(specs)
    kwargs = _kwargs(hosts, constraints)
    refused: list[PlannerError] = []
    context = PlannerContext(shipped_model, shipped_policy)
    for name in PLANNERS:
        planner = AutoShardShardingPlanner(**kwargs, planner=name, context=context)
        try:
            planner.plan(module, SHARDERS)
        except PlannerError as error:
            assert error.kind in (PlannerErrorKind.CONSTRAINTS_CONFLICT, PlannerErrorKind.TABLE_DOES_NOT_FIT), error
            assert any(repr(table) in error.message for table in constraints), error.message
            refused.append(error)
            continue
        _check_honoured(planner, constraints)
    event("refused" if refused else "planned")
    if refused:
        assert len(refused) == len(PLANNERS), [str(e) for e in refused]  # refused by the constraints, not a planner
        assert _torchrec_fails(module, kwargs), f"TorchRec plans what AutoShard refuses: {refused[0]}"

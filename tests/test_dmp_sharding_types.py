"""A plan that uses every TorchRec sharding type (data_parallel, table_wise, column_wise,
table_column_wise, row_wise, table_row_wise, grid_shard) runs under DistributedModelParallel on 4
gloo CPU ranks as 2 hosts x 2 (LOCAL_WORLD_SIZE=2): the drop-in planner plans it for that
cluster, every rank holds the shards the plan gives it, the forward pass computes what the
unsharded model does, and the backward pass updates each shard as the unsharded model's gradient
says."""

import os

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import ShardingPlan, Topology, Workload  # noqa: E402
from autoshard.torchrec.dmp_run import exit_finished_rank  # noqa: E402
from tests.dmp_support import (  # noqa: E402
    all_types_plan,
    all_types_workload,
    copy_reference_weights,
    free_port,
    held_shards,
    random_batch,
)

HOSTS, PER_HOST = 2, 2
WORLD = HOSTS * PER_HOST
LR = 0.5


class AllTypesPlanner:
    """An in-process planner that answers ``all_types_plan``, checking that it is asked to plan
    the cluster DMP runs on."""

    name = "all_types"

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        assert (topology.num_hosts, topology.local_world_size) == (HOSTS, PER_HOST), topology
        return all_types_plan(workload, HOSTS, PER_HOST)


def _worker(rank: int, port: int) -> None:
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner.types import Topology as TorchRecTopology
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from autoshard.torchrec.bridge import embedding_bag_collection
    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(PER_HOST))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        workload = all_types_workload()
        expected = all_types_plan(workload, HOSTS, PER_HOST)
        sharders = [EmbeddingBagCollectionSharder()]
        module = embedding_bag_collection(workload)
        apply_optimizer_in_backward(torch.optim.SGD, module.parameters(), {"lr": LR})
        topology = TorchRecTopology(world_size=WORLD, local_world_size=PER_HOST, compute_device="cpu")
        planner = AutoShardShardingPlanner(topology=topology, batch_size=4, planner=AllTypesPlanner())
        plan = planner.collective_plan(module, sharders, dist.GroupMember.WORLD)
        kinds = {name: sharding.sharding_type for name, sharding in plan.plan[""].items()}
        assert kinds == {
            "dp": "data_parallel",
            "tw": "table_wise",
            "cw": "column_wise",
            "twcw": "table_column_wise",
            "rw": "row_wise",
            "twrw": "table_row_wise",
            "grid": "grid_shard",
        }
        sharded = DistributedModelParallel(
            module, device=torch.device("cpu"), plan=plan, sharders=sharders, init_data_parallel=False
        )

        # this rank holds what the plan gives it, no more
        mine = expected.devices[rank].shards
        want: dict[str, list[tuple[int, int, int, int]]] = {}
        for shard in mine:
            want.setdefault(shard.table.name, []).append(
                (shard.row_offset, shard.column_offset, shard.height, shard.width)
            )
        assert held_shards(sharded) == {name: sorted(blocks) for name, blocks in want.items()}, rank

        # forward: every rank feeds the same batch, so each gets the unsharded model's output
        torch.manual_seed(0)
        reference = embedding_bag_collection(workload, "cpu")
        copy_reference_weights(sharded, reference)
        before = {k: v.clone() for k, v in reference.state_dict().items()}
        features = random_batch(workload)
        out = sharded(features)
        out = out.wait() if hasattr(out, "wait") else out
        expected_out = reference(features)
        for table in workload.tables:
            assert torch.allclose(out[table.name], expected_out[table.name], atol=1e-6), table.name

        # backward: TorchRec averages the gradient over ranks (as DDP does for the replica), so
        # a fused shard moves by -lr x the unsharded gradient; the replica's dense kernel takes
        # no optimizer in backward: it keeps its weights and holds the averaged gradient
        out.values().sum().backward()
        expected_out.values().sum().backward()
        gradients = {name: p.grad for name, p in reference.named_parameters()}
        parameters = dict(sharded.named_parameters())
        for key, tensor in sharded.state_dict().items():
            gradient = gradients[key]
            if not hasattr(tensor, "local_shards"):
                assert key == "embedding_bags.dp.weight"
                assert torch.equal(tensor, before[key])
                replica = parameters[key]
                assert replica.grad is not None and torch.allclose(replica.grad, gradient, atol=1e-6)
                continue
            for shard in tensor.local_shards():
                (row, col), (rows, cols) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                block = (slice(row, row + rows), slice(col, col + cols))
                assert torch.allclose(shard.tensor, before[key][block] - LR * gradient[block], atol=1e-6), key
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


@pytest.mark.timeout(120)
def test_every_sharding_type_runs_under_dmp_on_two_hosts_of_two():
    workload = all_types_workload()
    plan = all_types_plan(workload, HOSTS, PER_HOST)
    kinds = {s.table.name: s.sharding_type for d in plan.devices for s in d.shards}
    assert set(kinds.values()) == set(ShardingType)  # the plan uses every type
    mp.spawn(_worker, args=(free_port(),), nprocs=WORLD, join=True)

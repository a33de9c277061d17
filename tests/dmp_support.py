"""Shared by the DMP tests: does a sharded model compute what the unsharded one does, and does
each rank hold what the plan gives it? Also a plan that uses every TorchRec sharding type."""

import socket

import torch

from autoshard.core.sharding import ShardingType
from autoshard.core.types import DevicePlan, ShardingPlan, Table, TableShard, Workload, replica, row_shards


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_types_workload() -> Workload:
    """One small table per sharding type (column blocks 4 wide or more: FBGEMM's fused kernels
    need widths that are multiples of 4)."""
    return Workload(
        (
            Table("dp", 40, 8),
            Table("tw", 30, 8, pooling_factor=2.0),
            Table("cw", 30, 16),
            Table("twcw", 30, 16),
            Table("rw", 50, 8, zipf_alpha=1.0),
            Table("twrw", 30, 8),
            Table("grid", 30, 16),
        ),
        batch_size=4,
    )


def all_types_plan(workload: Workload, hosts: int = 2, per_host: int = 2) -> ShardingPlan:
    """Every sharding type on ``hosts`` x ``per_host`` ranks (2 x 2 by default; host h holds
    ranks h * per_host ..): ``dp`` on every rank; ``tw`` on rank 1; ``cw`` in two 8-column
    slices on ranks 0 and the last rank (two hosts); ``twcw`` in 4 + 12 columns on the last
    host's ranks; ``rw`` in a row block per rank; ``twrw`` in row blocks on the last host;
    ``grid`` in two 8-column blocks, columns 0:8 row-sharded on the last host and 8:16 on host 0."""
    t = {table.name: table for table in workload.tables}
    world, last = hosts * per_host, (hosts - 1) * per_host
    devices: list[list[TableShard]] = [[] for _ in range(world)]
    for rank in range(world):
        devices[rank].append(replica(t["dp"], world))
    devices[1].append(TableShard(t["tw"]))
    devices[0].append(TableShard(t["cw"], 0, 8))
    devices[world - 1].append(TableShard(t["cw"], 8, 8))
    devices[last].append(TableShard(t["twcw"], 0, 4, sharding=ShardingType.TABLE_COLUMN_WISE))
    devices[world - 1].append(TableShard(t["twcw"], 4, 12, sharding=ShardingType.TABLE_COLUMN_WISE))
    for j, shard in enumerate(row_shards(t["rw"], world, ShardingType.ROW_WISE)):
        devices[j].append(shard)
    for j, shard in enumerate(row_shards(t["twrw"], per_host, ShardingType.TABLE_ROW_WISE)):
        devices[last + j].append(shard)
    for first, offset in ((last, 0), (0, 8)):
        for j, shard in enumerate(row_shards(t["grid"], per_host, ShardingType.GRID_SHARD, offset, 8)):
            devices[first + j].append(shard)
    return ShardingPlan("all_types", tuple(DevicePlan(tuple(d), 0.0) for d in devices))


def held_shards(sharded) -> dict[str, list[tuple[int, int, int, int]]]:
    """What this rank of a DistributedModelParallel EmbeddingBagCollection holds, per table:
    ``(row_offset, column_offset, rows, columns)`` of each local shard of its ShardedTensor (a
    data-parallel table: its whole replica, a plain tensor)."""
    held: dict[str, list[tuple[int, int, int, int]]] = {}
    for key, tensor in sharded.state_dict().items():
        name = key.split(".")[-2]  # embedding_bags.<table>.weight
        if hasattr(tensor, "local_shards"):
            blocks = [(*s.metadata.shard_offsets, *s.metadata.shard_sizes) for s in tensor.local_shards()]
        else:
            blocks = [(0, 0, *tensor.shape)]
        if blocks:
            held[name] = sorted(blocks)
    return held


def copy_reference_weights(sharded, reference) -> None:
    """Copy ``reference``'s weights into this rank's shards (and replicas) of ``sharded``."""
    weights = reference.state_dict()
    with torch.no_grad():
        for name, tensor in sharded.state_dict().items():
            if not hasattr(tensor, "local_shards"):  # a data-parallel replica
                tensor.copy_(weights[name])
                continue
            for shard in tensor.local_shards():
                (row, col), (rows, cols) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.copy_(weights[name][row : row + rows, col : col + cols])


def random_batch(workload: Workload, batch: int = 4, seed: int = 1):
    """One KeyedJaggedTensor of ``batch`` samples, 0-3 ids a table, the same on every rank."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (len(workload.tables) * batch,), generator=generator)
    counts = lengths.view(len(workload.tables), batch).sum(dim=1).tolist()
    values = torch.cat(
        [torch.randint(0, t.num_embeddings, (n,), generator=generator) for t, n in zip(workload.tables, counts)]
    )
    return KeyedJaggedTensor.from_lengths_sync(keys=[t.name for t in workload.tables], values=values, lengths=lengths)


def assert_sharded_matches_reference(sharded, reference, workload: Workload, exact: bool = True) -> None:
    """Copy ``reference``'s weights into the shards of ``sharded`` (a DistributedModelParallel
    EmbeddingBagCollection), run both on one random batch, compare each table's pooled output."""
    copy_reference_weights(sharded, reference)
    features = random_batch(workload)
    out = sharded(features)
    out = out.wait() if hasattr(out, "wait") else out
    expected = reference(features)
    for table in workload.tables:
        if exact:
            assert torch.equal(out[table.name], expected[table.name]), table.name
        else:
            assert torch.allclose(out[table.name], expected[table.name], atol=1e-6), table.name

"""Shared by the DMP tests: does a sharded model compute what the unsharded one does?"""

import torch

from autoshard.core.types import Workload


def assert_sharded_matches_reference(sharded, reference, workload: Workload, exact: bool = True) -> None:
    """Copy ``reference``'s weights into the shards of ``sharded`` (a DistributedModelParallel
    EmbeddingBagCollection), run both on one random batch, compare each table's pooled output."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    weights = reference.state_dict()
    with torch.no_grad():
        for name, tensor in sharded.state_dict().items():
            for shard in tensor.local_shards():
                (row, col), (rows, cols) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.copy_(weights[name][row : row + rows, col : col + cols])
    generator = torch.Generator().manual_seed(1)
    batch = 4
    lengths = torch.randint(0, 4, (len(workload.tables) * batch,), generator=generator)
    counts = lengths.view(len(workload.tables), batch).sum(dim=1).tolist()
    values = torch.cat(
        [torch.randint(0, t.num_embeddings, (n,), generator=generator) for t, n in zip(workload.tables, counts)]
    )
    features = KeyedJaggedTensor.from_lengths_sync(
        keys=[t.name for t in workload.tables], values=values, lengths=lengths
    )
    out = sharded(features)
    out = out.wait() if hasattr(out, "wait") else out
    expected = reference(features)
    for table in workload.tables:
        if exact:
            assert torch.equal(out[table.name], expected[table.name]), table.name
        else:
            assert torch.allclose(out[table.name], expected[table.name], atol=1e-6), table.name

"""A plan of every sharding type trained through TorchRec's ``TrainPipelineSparseDist`` on 2 gloo
CPU ranks (``autoshard.torchrec.dmp_pipeline``): its first output equals the unsharded model's,
sharded tables take the fused update, and the data-parallel replica is all-reduced and stepped
by the dense optimizer, identically on both ranks."""

import os
from dataclasses import replace

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from tests.dmp_support import all_types_plan, all_types_workload, copy_reference_weights, free_port  # noqa: E402

STEPS = 3


def _rank(rank: int, port: int, out: str) -> None:
    from autoshard.torchrec.bridge import embedding_bag_collection
    from autoshard.torchrec.dmp_pipeline import as_batches, pipelined
    from autoshard.torchrec.dmp_run import _batches, exit_finished_rank

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        workload = replace(all_types_workload(), batch_size=32)  # every shard's rows met in a step
        pipe = pipelined(all_types_plan(workload, hosts=1, per_host=2), workload, 2, 2, lr=0.5)
        torch.manual_seed(0)
        reference = embedding_bag_collection(workload, "cpu")
        copy_reference_weights(pipe.sharded, reference)
        before = {k: v.clone() for k, v in _local(pipe.sharded).items()}
        features = _batches(workload, rank, 0, torch.device("cpu"))[:STEPS]  # each rank its own ids
        outputs = pipe.run(as_batches(features))
        expected = reference(features[0])
        error = max(float((outputs[0][t.name] - expected[t.name]).detach().abs().max()) for t in workload.tables)
        after = _local(pipe.sharded)
        replicas: list = [None, None]
        dist.all_gather_object(replicas, after["dp"])
        if rank == 0:
            changed = {name: not torch.equal(before[name], after[name]) for name in after}
            torch.save({"outputs": len(outputs), "error": error, "changed": changed, "replicas": replicas}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


def _local(sharded) -> dict:
    """This rank's weights per table: its local shards concatenated (a replica: the whole table)."""
    held = {}
    for key, tensor in sharded.state_dict().items():
        blocks = [s.tensor for s in tensor.local_shards()] if hasattr(tensor, "local_shards") else [tensor]
        if blocks:
            held[key.split(".")[-2]] = torch.cat([b.detach().reshape(-1) for b in blocks]).clone()
    return held


@pytest.mark.timeout(240)
def test_trainpipelinesparsedist_trains_every_sharding_type_on_cpu_ranks(tmp_path):
    out = str(tmp_path / "rank0.pt")
    mp.spawn(_rank, args=(free_port(), out), nprocs=2)
    result = torch.load(out)
    assert result["outputs"] == STEPS and result["error"] <= 1e-5  # its first output: the unsharded model's
    assert "tw" not in result["changed"] and result["changed"]["dp"]  # rank 0 holds no part of ``tw``
    assert all(result["changed"][name] for name in ("cw", "twcw", "rw", "twrw", "grid"))  # fused updates
    assert torch.equal(*result["replicas"])  # the replica's gradient all-reduced: one update on both ranks

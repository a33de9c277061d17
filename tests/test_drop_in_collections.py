"""The drop-in planner plans every collection a sharder covers: a model of an
EmbeddingBagCollection and an EmbeddingCollection gets one plan with every table of both (the
sequence tables within the types TorchRec's EmbeddingCollectionSharder runs, flagged outside the
cost model's trained range), DMP runs it on gloo ranks with the unsharded model's outputs; a
collection no sharder covers is left out by name."""

import os
import warnings

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torchrec.distributed.embedding import EmbeddingCollectionSharder  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints  # noqa: E402
from torchrec.distributed.planner.types import Topology as TorchRecTopology  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import Table, TableShard, Topology  # noqa: E402
from autoshard.planners.validate import validate_plan  # noqa: E402
from autoshard.torchrec.dmp_run import exit_finished_rank  # noqa: E402
from autoshard.torchrec.drop_in import AutoShardShardingPlanner  # noqa: E402
from autoshard.torchrec.drop_in_inputs import SEQUENCE_TYPES  # noqa: E402
from tests.dmp_support import copy_reference_weights, free_port  # noqa: E402

SHARDERS = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
WORLD = 2
BAGS = (("user", 60, 8), ("item", 40, 8), ("page", 30, 16))
SEQUENCES = (("history", 50, 8), ("query", 20, 8))

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class TwoCollections(nn.Module):
    """Pooled features through an EmbeddingBagCollection, sequence features through an
    EmbeddingCollection."""

    def __init__(self, device: str = "meta") -> None:
        super().__init__()
        where = torch.device(device)
        self.bags = EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n]) for n, r, d in BAGS
            ],
            device=where,
        )
        self.sequences = EmbeddingCollection(
            tables=[
                EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n]) for n, r, d in SEQUENCES
            ],
            device=where,
        )

    def forward(self, pooled: KeyedJaggedTensor, sequence: KeyedJaggedTensor):  # noqa: ANN201
        return self.bags(pooled), self.sequences(sequence)


def kinds_of(plan) -> dict[str, str]:
    return {name: s.sharding_type for module_plan in plan.plan.values() for name, s in module_plan.items()}


def _kwargs() -> dict:
    return dict(
        topology=TorchRecTopology(world_size=WORLD, compute_device="cpu", ddr_cap=64 * 1024**2),
        batch_size=4,
        constraints={
            "history": ParameterConstraints(sharding_types=["row_wise"], pooling_factors=[3.0]),
            "query": ParameterConstraints(sharding_types=["column_wise", "table_wise"]),
            "page": ParameterConstraints(sharding_types=["column_wise"], min_partition=8),
        },
    )


def test_both_collections_are_planned_and_sequence_tables_priced_as_such(shipped_model):
    planner = AutoShardShardingPlanner(**_kwargs(), model=shipped_model, planner="cost_greedy")
    plan = planner.plan(TwoCollections(), SHARDERS)
    assert set(plan.plan) == {"bags", "sequences"}
    assert set(plan.plan["bags"]) == {n for n, _, _ in BAGS}
    assert set(plan.plan["sequences"]) == {n for n, _, _ in SEQUENCES}
    kinds = kinds_of(plan)
    assert kinds["history"] == "row_wise" and kinds["query"] in ("column_wise", "table_wise")
    assert kinds["page"] == "column_wise"
    validate_plan(planner.last_plan, planner.last_workload, planner.last_topology)
    tables = {t.name: t for t in planner.last_workload.tables}
    assert not tables["history"].pooled and tables["history"].pooling_factor == 3.0 and tables["user"].pooled
    for name, _, _ in SEQUENCES:  # within what TorchRec's EmbeddingCollectionSharder runs
        assert planner.last_workload.constraints.of(name).allowed_types(frozenset(ShardingType)) <= SEQUENCE_TYPES
    warnings_ = shipped_model.check_tables([tables["history"]])
    assert any("sequence (non-pooled)" in w and "outside its trained range" in w for w in warnings_)


def test_the_default_plan_keeps_sequence_tables_to_their_sharders_types():
    """TorchRec's arguments alone: every table of both collections, each sequence table under a
    type its sharder runs, and the default planners' warnings say the model extrapolates."""
    planner = AutoShardShardingPlanner(**_kwargs(), timeout_seconds=60)
    plan = planner.plan(TwoCollections(), SHARDERS)
    kinds = kinds_of(plan)
    assert set(kinds) == {n for n, _, _ in BAGS + SEQUENCES}
    assert {kinds[n] for n, _, _ in SEQUENCES} <= {k.value for k in SEQUENCE_TYPES}
    assert any("sequence (non-pooled)" in w for w in planner.last_warnings)


def test_a_collection_no_sharder_covers_is_left_out_by_name(caplog):
    planner = AutoShardShardingPlanner(**_kwargs(), planner="size_greedy")
    with caplog.at_level("WARNING", logger="autoshard.torchrec.drop_in"):
        plan = planner.plan(TwoCollections(), [EmbeddingBagCollectionSharder()])
    assert set(plan.plan) == {"bags"}
    assert planner.last_unplanned == ("sequences (EmbeddingCollection)",)
    assert any("sequences (EmbeddingCollection)" in r.getMessage() for r in caplog.records)


def test_a_sequence_tables_all_to_all_carries_every_id():
    """A sequence table's output rows are its ids: it sends pooling factor x d values a sample
    where a pooled table of the same shape sends d (both communication models), and its shards
    stay sequence tables."""
    from autoshard.core.collectives import shard_traffic
    from autoshard.core.communication import Links, link_dims

    pooled = Table("t", 100, 8, pooling_factor=5.0)
    sequence = Table("t", 100, 8, pooling_factor=5.0, pooled=False)
    links = Links.of(Topology(4, 1.0))
    assert link_dims(sequence, links)[0] == pytest.approx(5 * link_dims(pooled, links)[0])
    ids_only = 4 * (8 * 5.0 + 4) * 3 / 4  # the ids a rank receives: the same for both
    outputs = [sum(shard_traffic(t, 4, 4, 4)) - ids_only for t in (pooled, sequence)]
    assert outputs[1] == pytest.approx(5 * outputs[0])
    assert TableShard(sequence, 0, 4).as_table.pooled is False


# --- under DMP ----------------------------------------------------------------------------------


def _batches(seed: int = 1) -> tuple[KeyedJaggedTensor, KeyedJaggedTensor]:
    generator = torch.Generator().manual_seed(seed)

    def kjt(specs) -> KeyedJaggedTensor:
        lengths = torch.randint(0, 4, (len(specs) * 4,), generator=generator)
        counts = lengths.view(len(specs), 4).sum(dim=1).tolist()
        values = torch.cat([torch.randint(0, r, (n,), generator=generator) for (_, r, _), n in zip(specs, counts)])
        return KeyedJaggedTensor.from_lengths_sync(keys=[n for n, _, _ in specs], values=values, lengths=lengths)

    return kjt(BAGS), kjt(SEQUENCES)


def _dmp_worker(rank: int, port: int) -> None:
    from torchrec.distributed.model_parallel import DistributedModelParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        warnings.simplefilter("ignore", FutureWarning)
        planner = AutoShardShardingPlanner(**_kwargs(), timeout_seconds=60)  # TorchRec's arguments alone
        plan = planner.collective_plan(TwoCollections(), SHARDERS)
        assert set(kinds_of(plan)) == {n for n, _, _ in BAGS + SEQUENCES}
        torch.manual_seed(0)
        reference = TwoCollections("cpu")
        sharded = DistributedModelParallel(
            TwoCollections(), device=torch.device("cpu"), plan=plan, sharders=SHARDERS, init_data_parallel=False
        )
        copy_reference_weights(sharded, reference)
        pooled, sequence = _batches()
        out_bags, out_sequences = sharded(pooled, sequence)
        out_bags = out_bags.wait() if hasattr(out_bags, "wait") else out_bags
        out_sequences = out_sequences.wait() if hasattr(out_sequences, "wait") else out_sequences
        expected_bags, expected_sequences = reference(pooled, sequence)
        for name, _, _ in BAGS:
            assert torch.allclose(out_bags[name], expected_bags[name], atol=1e-6), name
        for name, _, _ in SEQUENCES:
            assert torch.allclose(out_sequences[name].values(), expected_sequences[name].values(), atol=1e-6), name
            assert torch.equal(out_sequences[name].lengths(), expected_sequences[name].lengths()), name
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_finished_rank()


@pytest.mark.timeout(300)
def test_dmp_runs_the_plan_of_both_collections():
    """collective_plan with TorchRec's arguments alone on 2 gloo ranks; DMP shards both
    collections and computes what the unsharded model does, table by table."""
    mp.spawn(_dmp_worker, args=(free_port(),), nprocs=WORLD, join=True)

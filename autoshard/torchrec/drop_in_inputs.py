"""What the drop-in planner reads from TorchRec's arguments: the embedding collections of a model
that the sharders cover (``collections_of``), each table's ``ParameterConstraints`` as the
workload's constraints (``table_constraints``), and TorchRec's ``Topology`` as ours
(``topology_from_torchrec``).

Pooled tables come from ``EmbeddingBagCollection``s, sequence tables (``Table.pooled`` False)
from ``EmbeddingCollection``s. A sequence table may take only the types TorchRec's
``EmbeddingCollectionSharder`` offers (``SEQUENCE_TYPES``); a collection that no sharder covers is
left out of the plan and reported by its module path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import nn
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.planner.types import Topology as TorchRecTopology
from torchrec.modules.embedding_configs import DataType
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from autoshard.core.constraints import KERNELS, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType, parse_sharding_types
from autoshard.core.types import GIB, Table, Topology

_BYTES = {DataType.FP32: 4, DataType.FP16: 2}
_BYTES_PER_MS = 1000 / GIB
"""TorchRec's bandwidths are bytes/ms; ours GiB/s."""
SEQUENCE_TYPES = frozenset(ShardingType(k) for k in EmbeddingCollectionSharder().sharding_types("cuda"))
"""The types TorchRec's EmbeddingCollectionSharder runs: data parallel, table-, column- and row-wise."""
COLLECTIONS = (EmbeddingBagCollection, EmbeddingCollection)


@dataclass(frozen=True, slots=True)
class Collection:
    """One embedding collection of the model: its module path ('' for the model itself), its
    tables, and whether they are sequence tables (an EmbeddingCollection)."""

    path: str
    tables: tuple[Table, ...]
    sequence: bool


def covered(module: nn.Module, sharders: Sequence[object]) -> bool:
    """Whether one of ``sharders`` shards ``module`` (its ``module_type`` is the module's class
    or a base of it)."""
    return any(isinstance(module, getattr(s, "module_type", type(None))) for s in sharders)


def collections_of(
    module: nn.Module,
    sharders: Sequence[object],
    pooling_factors: Mapping[str, float] | None = None,
    zipf_alphas: Mapping[str, float] | None = None,
) -> tuple[list[Collection], list[str]]:
    """(the collections of ``module`` that a sharder covers, with our tables; the module paths
    and classes of those none covers). TorchRec's configs carry no access statistics: pooling
    factors (default 1.0, TorchRec's ``POOLING_FACTOR``) and Zipf skews (default 0) come from the
    arguments, by table name."""
    pooling, skew = dict(pooling_factors or {}), dict(zipf_alphas or {})
    found, left_out = [], []
    for path, collection in module.named_modules():
        if not isinstance(collection, COLLECTIONS):
            continue
        if not covered(collection, sharders):
            left_out.append(f"{path or 'module'} ({type(collection).__name__})")
            continue
        sequence = isinstance(collection, EmbeddingCollection)
        configs = collection.embedding_configs() if sequence else collection.embedding_bag_configs()
        tables = []
        for config in configs:
            if config.data_type not in _BYTES:
                raise InputError(
                    "data_type",
                    f"table {config.name!r} is {config.data_type}",
                    "AutoShard plans fp32 and fp16 tables",
                    where=path or "module",
                )
            tables.append(
                Table(
                    config.name,
                    config.num_embeddings,
                    config.embedding_dim,
                    float(pooling.get(config.name, 1.0)),
                    float(skew.get(config.name, 0.0)),
                    _BYTES[config.data_type],
                    pooled=not sequence,
                )
            )
        found.append(Collection(path, tuple(tables), sequence))
    return found, left_out


def table_constraints(
    constraints: Mapping[str, ParameterConstraints] | None, batch_size: int
) -> dict[str, TableConstraints]:
    """Each constrained table's ``ParameterConstraints`` as the workload's ``TableConstraints``:
    its sharding types, the kernels AutoShard plans among its ``compute_kernels`` (``fused``;
    ``dense`` for data parallel; the others TorchRec offers are left out), ``min_partition`` and
    its features' pooling factors. ``InputError`` naming the table for an unknown type, kernels
    of which AutoShard plans none, or feature lists of different lengths."""
    out: dict[str, TableConstraints] = {}
    for name, c in (constraints or {}).items():
        where = f"constraints[{name!r}]"
        try:
            kinds = parse_sharding_types(list(c.sharding_types)) if c.sharding_types is not None else None
            kernels = None
            if c.compute_kernels is not None:
                kernels = tuple(k for k in KERNELS if k in c.compute_kernels)
                if not kernels:
                    raise InputError(
                        "compute_kernels",
                        f"allows {list(c.compute_kernels)}; AutoShard plans {KERNELS[0]!r} (the kernel its cost "
                        f"model measures) and {KERNELS[1]!r} for data parallel",
                        f"include {KERNELS[0]!r} or {KERNELS[1]!r}, or leave compute_kernels unset",
                    )
            own = TableConstraints(
                kinds,
                kernels,
                c.min_partition,
                tuple(float(f) for f in c.pooling_factors) if c.pooling_factors else None,
                tuple(float(p) for p in c.num_poolings) if c.num_poolings else None,
                tuple(int(b) for b in c.batch_sizes) if c.batch_sizes else None,
                bool(c.is_weighted),
                tuple(c.feature_names) if c.feature_names else None,
                c.cache_params.load_factor if c.cache_params is not None else None,  # fused_uvm_caching's
            )
            own.pooling_factor(batch_size)  # the feature lists' lengths, checked here
        except InputError as error:
            raise error.located(where) from None
        out[name] = own
    return out


def sequence_constraints(own: TableConstraints | None) -> TableConstraints:
    """A sequence table's constraints: its own, with the types TorchRec's
    EmbeddingCollectionSharder runs (``SEQUENCE_TYPES``) and no others."""
    own = own or TableConstraints()
    kinds = SEQUENCE_TYPES if own.sharding_types is None else own.sharding_types & SEQUENCE_TYPES
    return TableConstraints(
        kinds,
        own.compute_kernels,
        own.min_partition,
        own.pooling_factors,
        own.num_poolings,
        own.batch_sizes,
        own.is_weighted,
        own.feature_names,
    )


def pooling_factors_from_constraints(
    constraints: Mapping[str, ParameterConstraints] | None, batch_size: int
) -> dict[str, float]:
    """Each constrained table's pooling factor as TorchRec's planner counts its lookups
    (``autoshard.core.constraints.pooling_factor_of``: the sum over its features of pooling
    factor x ``num_poolings`` x ``batch_sizes``, over ``batch_size``), where it gives them."""
    out: dict[str, float] = {}
    for name, own in table_constraints(constraints, batch_size).items():
        pooling = own.pooling_factor(batch_size)
        if pooling is not None:
            out[name] = pooling
    return out


def topology_from_torchrec(topology: TorchRecTopology) -> Topology:
    """Our Topology of a TorchRec one (typically the one its storage reservation returns):
    ``world_size / local_world_size`` hosts of ``local_world_size`` devices, each device's memory
    for tables (HBM on ``cuda`` and ``mtia``, DDR on ``cpu``, as TorchRec's planner places
    tables) in GiB, the bandwidths in GiB/s. ``PlannerError`` if a device has no memory left."""
    world, local = topology.world_size, topology.local_world_size
    if not (1 <= local <= world and world % local == 0):
        raise InputError(
            "local_world_size",
            f"{local} devices per host do not divide the {world} devices",
            "give TorchRec's Topology a local_world_size that divides world_size",
        )
    on_hbm = topology.compute_device in ("cuda", "mtia")
    caps = [d.storage.hbm if on_hbm else d.storage.ddr for d in topology.devices]
    if min(caps) <= 0:
        rank = caps.index(min(caps))
        raise PlannerError(
            PlannerErrorKind.INSUFFICIENT_MEMORY,
            f"rank {rank} has {caps[rank] / GIB:.3f} GiB left for embedding tables after the storage reservation",
            (
                "give the Topology more memory (hbm_cap, or CustomTopologyData)",
                "reserve less (storage_reservation, heuristical_storage_reservation_percentage)",
            ),
        )
    return Topology.cluster(
        world // local,
        local,
        [c / GIB for c in caps],
        topology.intra_host_bw * _BYTES_PER_MS,
        topology.inter_host_bw * _BYTES_PER_MS,
    )


__all__ = [
    "Collection",
    "SEQUENCE_TYPES",
    "collections_of",
    "covered",
    "pooling_factors_from_constraints",
    "sequence_constraints",
    "table_constraints",
    "topology_from_torchrec",
]

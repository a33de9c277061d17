"""AutoShard as a TorchRec planner: a ``ShardingPlanner`` that TorchRec users swap in with one line.

```python
from torchrec.distributed.model_parallel import DistributedModelParallel
from autoshard.client import AutoShardClient
from autoshard.torchrec_native import AutoShardShardingPlanner

# planner = EmbeddingShardingPlanner(topology=Topology(world_size=8, compute_device="cuda"))
planner = AutoShardShardingPlanner(device_memory_gb=16, client=AutoShardClient("http://autoshard:8000"),
                                   pooling_factors={"user": 1.0, "history": 50.0})
plan = planner.collective_plan(model, sharders, pg)     # rank 0 asks AutoShard, then broadcasts
model = DistributedModelParallel(model, plan=plan, sharders=sharders)
```

It reads the table configs of every ``EmbeddingBagCollection`` in the module, plans them as one
workload (in process with a ``Planner``, or over HTTP with an ``AutoShardClient``) on the
cluster the job runs on (``world_size`` devices, ``local_world_size`` of them per host, as
TorchRec counts them), and returns a TorchRec ``ShardingPlan`` keyed by each collection's module
path, with whatever sharding types the plan uses (``autoshard.core.torchrec_bridge``). Needs the
``torchrec`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.collective_utils import invoke_on_rank_and_broadcast_result
from torchrec.distributed.comm import get_local_size
from torchrec.distributed.types import ModuleSharder, ShardingPlanner
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan
from torchrec.modules.embedding_configs import DataType
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from autoshard.core.errors import InputError
from autoshard.core.torchrec_bridge import MODULE_PATH, to_torchrec_plan
from autoshard.core.types import (
    DevicePlan,
    Planner,
    ShardingPlan,
    Table,
    Topology,
    Workload,
)

if TYPE_CHECKING:
    from autoshard.client import AutoShardClient

_BYTES = {DataType.FP32: 4, DataType.FP16: 2}


def embedding_bag_collections(module: nn.Module) -> list[tuple[str, EmbeddingBagCollection]]:
    """Every EmbeddingBagCollection in ``module``, with its module path ('' for the module itself)."""
    return [(path, m) for path, m in module.named_modules() if isinstance(m, EmbeddingBagCollection)]


def tables_from_module(
    module: nn.Module,
    pooling_factors: Mapping[str, float] | None = None,
    zipf_alphas: Mapping[str, float] | None = None,
) -> list[tuple[str, list[Table]]]:
    """Our tables, per collection path, from the collections' ``embedding_bag_configs()``.
    TorchRec's configs carry no access statistics: pooling factors (default 1.0) and Zipf skews
    (default 0) come from the arguments, by table name."""
    pooling, skew = dict(pooling_factors or {}), dict(zipf_alphas or {})
    out = []
    for path, collection in embedding_bag_collections(module):
        tables = []
        for config in collection.embedding_bag_configs():
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
                )
            )
        out.append((path, tables))
    return out


class AutoShardShardingPlanner(ShardingPlanner):
    """TorchRec's ``ShardingPlanner`` interface (``plan`` / ``collective_plan``) backed by AutoShard.

    Args:
        device_memory_gb: memory per device for embedding tables, GiB.
        world_size: number of devices; default: the process group's size at planning time.
        local_world_size: devices per host; default: TorchRec's own answer
            (``torchrec.distributed.comm.get_local_size``: ``LOCAL_WORLD_SIZE`` as torchrun sets
            it, else 8 where that divides the world size, else one host), which is what
            ``DistributedModelParallel`` groups table-row-wise and grid shards by. The plan is
            made for ``world_size / local_world_size`` hosts.
        planner: plan in process with this AutoShard planner
            (e.g. ``make_planner("cost_greedy", PlannerContext(model))``).
        client: or ask an AutoShard service over HTTP; ``planners`` names which ones (default: the
            service's default set), and the best plan is used.
        pooling_factors, zipf_alphas: per table name (defaults 1.0 and 0).
        batch_size: samples per iteration on each device.
        compute_device: TorchRec's device type of the plan ("cuda", or "cpu" for CPU training).
        allow_column_split: which of the service's planners may split costly or large tables
            column-wise (None: its default, the cost-model planners; True: all; False: none; an
            in-process ``planner`` keeps its own setting).

    After planning, ``last_plan`` holds AutoShard's plan (costs, devices) for inspection.
    """

    def __init__(
        self,
        device_memory_gb: float,
        world_size: int | None = None,
        *,
        planner: Planner | None = None,
        client: AutoShardClient | None = None,
        planners: Sequence[str] | None = None,
        pooling_factors: Mapping[str, float] | None = None,
        zipf_alphas: Mapping[str, float] | None = None,
        batch_size: int = 2048,
        compute_device: str | None = None,
        allow_column_split: bool | None = None,
        local_world_size: int | None = None,
    ) -> None:
        if (planner is None) == (client is None):
            raise InputError(
                "planner",
                "give exactly one of planner (in process) or client (HTTP)",
                "pass planner=make_planner(...) or client=AutoShardClient(url)",
            )
        self.device_memory_gb, self.world_size = device_memory_gb, world_size
        self.local_world_size = local_world_size
        self.planner, self.client, self.planners = planner, client, planners
        self.pooling_factors, self.zipf_alphas = pooling_factors, zipf_alphas
        self.batch_size, self.allow_column_split = batch_size, allow_column_split
        self.compute_device = compute_device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.last_plan: ShardingPlan | None = None

    def plan(self, module: nn.Module, sharders: list[ModuleSharder[nn.Module]]) -> TorchRecShardingPlan:
        """Plan every EmbeddingBagCollection of ``module`` on this process (no collectives)."""
        _check_sharders(sharders)
        per_collection = tables_from_module(module, self.pooling_factors, self.zipf_alphas)
        if not per_collection:
            raise InputError("module", "holds no EmbeddingBagCollection", "pass the model whose tables to shard")
        workload = Workload(
            tuple(t for _, tables in per_collection for t in tables), self.batch_size, type(module).__name__
        )
        topology = self.topology()
        ours = self._plan(workload, topology)
        self.last_plan = ours
        plan: dict[str, Any] = {}
        for path, tables in per_collection:
            sub = _restrict(ours, {t.name for t in tables})
            converted = to_torchrec_plan(
                sub,
                Workload(tuple(tables), workload.batch_size),
                topology.num_devices,
                self.compute_device,
                topology.local_world_size,
            )
            plan[path] = converted.plan[MODULE_PATH]
        return TorchRecShardingPlan(plan)

    def collective_plan(
        self,
        module: nn.Module,
        sharders: list[ModuleSharder[nn.Module]] | None = None,
        pg: dist.ProcessGroup | None = None,
    ) -> TorchRecShardingPlan:
        """Plan on rank 0 and broadcast, so every rank shards the same way (TorchRec's contract)."""
        if pg is None:
            if not dist.is_initialized():
                raise InputError(
                    "pg",
                    "no process group",
                    "call torch.distributed.init_process_group first, or use plan() in a single process",
                )
            pg = dist.GroupMember.WORLD
        if self.world_size is None:
            self.world_size = pg.size()  # type: ignore[union-attr]
        return invoke_on_rank_and_broadcast_result(pg, 0, self.plan, module, sharders or [])  # type: ignore[arg-type]

    def topology(self) -> Topology:
        """The cluster planned for: ``world_size / local_world_size`` hosts of
        ``local_world_size`` devices with ``device_memory_gb`` each."""
        world = self._world_size()
        local = get_local_size(world) if self.local_world_size is None else self.local_world_size
        if not (isinstance(local, int) and 1 <= local <= world and world % local == 0):
            raise InputError(
                "local_world_size",
                f"{local!r} devices per host do not divide the {world} devices",
                "pass local_world_size, a divisor of world_size (or set LOCAL_WORLD_SIZE)",
            )
        return Topology.cluster(world // local, local, self.device_memory_gb)

    def _world_size(self) -> int:
        if self.world_size is not None:
            return self.world_size
        if dist.is_initialized():
            return dist.get_world_size()
        raise InputError("world_size", "unknown", "pass world_size, or plan inside a process group")

    def _plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        if self.planner is not None:  # column splitting is the planner's own setting here
            return self.planner.plan(workload, topology)
        assert self.client is not None
        return self.client.plan(workload, topology, self.planners, allow_column_split=self.allow_column_split).best_plan


def _restrict(plan: ShardingPlan, names: set[str]) -> ShardingPlan:
    """The plan's shards of the tables in ``names`` (same devices, costs kept)."""
    return ShardingPlan(
        plan.planner,
        tuple(DevicePlan(tuple(s for s in d.shards if s.table.name in names), d.cost_ms) for d in plan.devices),
        plan.plan_time_s,
    )


def _check_sharders(sharders: Sequence[ModuleSharder[nn.Module]]) -> None:
    if sharders and not any(
        issubclass(EmbeddingBagCollection, getattr(s, "module_type", type(None))) for s in sharders
    ):
        raise InputError(
            "sharders", "none shards EmbeddingBagCollection", "include torchrec's EmbeddingBagCollectionSharder"
        )


__all__ = ["AutoShardShardingPlanner", "embedding_bag_collections", "tables_from_module"]

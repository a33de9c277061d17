"""TorchRec's estimator as a cost model (``--model torchrec``): plans priced on TorchRec's own
objective, so that our planners and TorchRec's planner compare on one.

A device's cost is what TorchRec's planner counts for a rank: the sum of its shards'
``EmbeddingPerfEstimator`` totals (forward and backward compute and communication, on TorchRec's
``Topology`` for ``compute_device``: ``cuda`` prices HBM-resident kernels on its GPU model,
``cpu`` DDR on its CPU model), each shard estimated once per task and cached
(``autoshard.torchrec.estimates``). The sums are kept running, so a greedy placement's or a local
search's question costs an array operation, not an estimator call.

Memory is TorchRec's too: a device whose shards' ``EmbeddingStorageEstimator`` bytes (weights,
optimizer state, input and output buffers) pass what TorchRec's storage reservation leaves it
costs ``OVER_MEMORY_MS`` more, plus that much again per capacity's worth it is over, so the planners
keep every device within TorchRec's count as they keep away from a slow device; a plan that
could not (``fits``) has a max of at least ``OVER_MEMORY_MS``. The planners' own memory check (the
weights and optimizer state within the device's memory) applies as well.

The estimator needs the task: TorchRec prices a shard from its table, the world and local world
size and the batch. The model made for a profile (``TorchRecCostModel()``) is bound to each task
by ``for_task(workload, topology)`` (``PlannerContext.for_task`` does it for every planner); an
unbound model refuses to price.

Kernels: each shard is priced under its table's kernel (``Table.compute_kernel``: ``fused``,
``fused_uvm_caching`` with its cache load factor, ``fused_uvm``; data parallel ``dense``), its
memory the device's part (a UVM-caching shard's cache and buffers in HBM). ``choose_kernels``
chooses them (``autoshard.torchrec.kernel_choice``; ``autoshard.planning.plan`` asks it before the
planners run): on ``cuda`` the tables least costly to move go to UVM caching where the task
does not fit HBM fused; on ``cpu`` every table stays ``fused``, the one kernel TorchRec's sharder
offers there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autoshard.core.costing import EditBatch, Edits, SetCostModel
from autoshard.core.errors import InputError
from autoshard.core.types import ShardingPlan, Table, Topology, Workload
from autoshard.torchrec.estimates import COMPUTE_DEVICES, STORAGE_RESERVATION, TaskEstimates
from autoshard.torchrec.kernel_choice import choose_kernels

MODEL_NAME = "torchrec"
"""The name ``--model`` and a request's ``profile`` give this model."""
OVER_MEMORY_MS = 1e6
"""What a device past TorchRec's storage estimate costs on top of its estimate (ms): above any
real device's cost, so planners choose any fitting device first."""


class TorchRecCostModel(SetCostModel):
    """TorchRec's perf and storage estimators as a ``CostModel`` (see the module docstring).

    Args:
        compute_device: ``"cuda"`` (TorchRec's GPU model, memory as HBM) or ``"cpu"`` (its CPU
            model, memory as DDR).
        storage_reservation: the share of each device's memory TorchRec keeps back (0.15, its
            default and ``TorchRecPlanner``'s), with its input buffers; ``None``: none, the
            topology's memory is already what TorchRec's reservation left (the drop-in's).
        workload, topology: the task it prices (``for_task`` binds them; both or neither).
    """

    max_set_size: int | None = None
    exact = True
    """Its prices are TorchRec's objective itself (``autoshard.core.costing.is_exact``): planners
    take any lower price and even out plateaus of equal maxima (ties are common: equal shards
    cost exactly alike)."""

    def __init__(
        self,
        compute_device: str = "cuda",
        storage_reservation: float | None = STORAGE_RESERVATION,
        workload: Workload | None = None,
        topology: Topology | None = None,
    ) -> None:
        if compute_device not in COMPUTE_DEVICES:
            raise InputError("compute_device", f"must be cuda or cpu, got {compute_device!r}", "use cuda or cpu")
        if storage_reservation is not None and not 0.0 <= storage_reservation < 1.0:
            raise InputError(
                "storage_reservation", f"must be in [0, 1), got {storage_reservation!r}", "TorchRec's default is 0.15"
            )
        self.compute_device, self.storage_reservation = compute_device, storage_reservation
        self.estimates: TaskEstimates | None = None
        self._last_bound: TorchRecCostModel | None = None
        if (workload is None) != (topology is None):
            raise ValueError("give both workload and topology, or neither")
        if workload is not None and topology is not None:
            self.estimates = TaskEstimates(workload, topology, compute_device, storage_reservation)

    @property
    def name(self) -> str:
        return MODEL_NAME if self.compute_device == "cuda" else f"{MODEL_NAME}_cpu"

    def for_task(self, workload: Workload, topology: Topology) -> TorchRecCostModel:
        """This model pricing ``workload`` on ``topology``: itself if it already does, else the
        model it bound to that task last (planning binds once per planner batch), else a new one."""
        for model in (self, self._last_bound):
            task = None if model is None else model.estimates
            if task is not None and _same(task.workload, workload) and _same(task.topology, topology):
                return model  # type: ignore[return-value]
        self._last_bound = TorchRecCostModel(self.compute_device, self.storage_reservation, workload, topology)
        return self._last_bound

    def choose_kernels(self, workload: Workload, topology: Topology, fill: float | None = None) -> Workload:
        """``workload`` with each table's kernel chosen under TorchRec's estimate to fill at most
        ``fill`` of the devices' memory (``autoshard.torchrec.kernel_choice``): itself when every
        table stays as it is."""
        return choose_kernels(workload, self.for_task(workload, topology).task, fill)

    # --- memory as TorchRec counts it ------------------------------------------------------

    def planning_topology(self, topology: Topology, shrink_bytes: int = 0) -> Topology:
        """``topology`` with each device's memory what TorchRec's storage reservation leaves it
        (less ``shrink_bytes``): what the planners may fill by their own count (weights and
        optimizer state), so that a plan fits TorchRec's (which adds the input and output
        buffers, priced by ``accumulator``'s barrier). ``PlannerError`` when nothing is left."""
        from autoshard.core.errors import PlannerError, PlannerErrorKind
        from autoshard.core.types import GIB

        caps = [
            min(own, left - shrink_bytes) for own, left in zip(topology.device_memory_bytes_all, self.task.capacities)
        ]
        if min(caps) <= 0:
            raise PlannerError(
                PlannerErrorKind.INSUFFICIENT_MEMORY,
                "TorchRec's storage reservation (its share, the input buffers) leaves a device no memory for tables",
                ("add memory per device", f"lower the batch size ({self.task.workload.batch_size})"),
            )
        return Topology.cluster(
            topology.num_hosts,
            topology.devices_per_host,
            [c / GIB for c in caps],
            topology.intra_host_bw_gbps,
            topology.inter_host_bw_gbps,
        )

    def uncounted_bytes(self, plan: ShardingPlan) -> int:
        """The most bytes TorchRec's storage estimate counts on a device of ``plan`` beyond the
        planners' own count (weights and optimizer state): its input and output buffers."""
        sets = [[s.as_table for s in d.shards] for d in plan.devices]
        return max(used - d.memory_bytes for used, d in zip(self.storage(sets), plan.devices))

    def overflow_bytes(self, plan: ShardingPlan) -> int:
        """How far the fullest device of ``plan`` is past what TorchRec's storage estimate allows
        (0 or less: every device fits)."""
        sets = [[s.as_table for s in d.shards] for d in plan.devices]
        used = np.array(self.storage(sets), dtype=np.int64)
        return int((used - self.capacities(len(sets))).max())

    def __deepcopy__(self, memo: dict[int, Any]) -> TorchRecCostModel:
        """A copy for another thread (the service's ``ModelStore.for_thread``): unbound models
        hold nothing to share, a bound one gets its own cache."""
        if self.estimates is None:
            return TorchRecCostModel(self.compute_device, self.storage_reservation)
        task = self.estimates
        return TorchRecCostModel(self.compute_device, self.storage_reservation, task.workload, task.topology)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its arguments (the service's planning processes): the estimates are made again."""
        task = self.estimates
        bound = (task.workload, task.topology) if task is not None else (None, None)
        return TorchRecCostModel, (self.compute_device, self.storage_reservation, *bound)

    @property
    def task(self) -> TaskEstimates:
        if self.estimates is None:
            raise InputError(
                "model",
                "TorchRec's cost model prices one task's shards and is bound to none",
                "bind it first: TorchRecCostModel().for_task(workload, topology) "
                "(planning through autoshard.planning does)",
            )
        return self.estimates

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        """TorchRec trains fp32 and fp16 tables: another precision is an ``InputError`` naming the table."""
        for i, table in enumerate(workload.tables):
            if table.bytes_per_element not in (2, 4):
                raise InputError(
                    "bytes_per_element",
                    f"TorchRec's estimator prices fp32 (4) or fp16 (2) tables, not {table.bytes_per_element}",
                    "use 4 or 2 bytes per element, or another --model",
                    where=f"tables[{i}] {table.name!r}",
                )
        return ()

    # --- what a device costs ---------------------------------------------------------------

    def shard_ms(self, tables: Sequence[Table]) -> np.ndarray:
        """TorchRec's perf total of each shard (``TableShard.as_table``), ms."""
        return np.array([e.ms for e in self.task.of(tables)], dtype=np.float64)

    def shard_bytes(self, tables: Sequence[Table]) -> np.ndarray:
        """TorchRec's storage estimate of each shard, bytes (HBM on cuda, DDR on cpu)."""
        return np.array([e.bytes for e in self.task.of(tables)], dtype=np.int64)

    def capacities(self, num_sets: int) -> np.ndarray:
        """Each set's bytes for shards after TorchRec's reservation: per rank when there is one
        set per rank, else the smallest rank's (a set of unknown rank must fit anywhere)."""
        caps = np.array(self.task.capacities, dtype=np.int64)
        return caps if num_sets == len(caps) else np.full(num_sets, caps.min(), dtype=np.int64)

    def priced(self, ms: np.ndarray, used: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Device costs from their estimate sums and storage sums (``OVER_MEMORY_MS`` and more
        where the storage passes ``caps``)."""
        over = used - caps
        room = np.maximum(caps, 1).astype(np.float64)
        return np.where(over > 0, ms + OVER_MEMORY_MS * (1.0 + over / room), ms)

    def storage(self, table_sets: Sequence[Sequence[Table]]) -> list[int]:
        """TorchRec's storage estimate of each set, bytes (every shard looked up in one call)."""
        found = iter(self.task.of([t for s in table_sets for t in s]))
        return [sum(next(found).bytes for _ in s) for s in table_sets]

    def fits(self, table_sets: Sequence[Sequence[Table]]) -> list[bool]:
        """Whether each set (rank r's, with one set per rank) fits TorchRec's storage."""
        caps = self.capacities(len(table_sets))
        return [used <= cap for used, cap in zip(self.storage(table_sets), caps.tolist())]

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        self._check_batch(batch_size)
        task = self.task
        found = iter(task.of([t for s in table_sets for t in s]))  # every miss in one estimator call per option
        ms, used = np.zeros(len(table_sets)), np.zeros(len(table_sets), dtype=np.int64)
        for i, tables in enumerate(table_sets):
            for _ in tables:
                estimate = next(found)
                ms[i] += estimate.ms
                used[i] += estimate.bytes
        return self.priced(ms, used, self.capacities(len(table_sets))).tolist()

    def accumulator(self, num_sets: int, batch_size: int) -> SumAccumulator:
        self._check_batch(batch_size)
        return SumAccumulator(self, num_sets)

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> SumEdits:
        self._check_batch(batch_size)
        return SumEdits(self, base_sets)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        return self.edit_scorer(base_sets, batch_size).predict(edits).tolist()

    def _check_batch(self, batch_size: int) -> None:
        if batch_size != self.task.workload.batch_size:
            raise InputError(
                "batch_size",
                f"TorchRec's cost model was bound to batch {self.task.workload.batch_size}, asked for {batch_size}",
                "bind it to the task planned (for_task)",
            )


class SumAccumulator:
    """``num_sets`` growing sets: each set's running sums of its shards' estimates and storage."""

    def __init__(self, model: TorchRecCostModel, num_sets: int) -> None:
        self.model, self.task = model, model.task
        self.ms = np.zeros(num_sets)
        self.used = np.zeros(num_sets, dtype=np.int64)
        self.caps = model.capacities(num_sets)

    def costs(self) -> np.ndarray:
        return self.model.priced(self.ms, self.used, self.caps)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        shard = self.task.one(table)
        at = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        return self.model.priced(self.ms[at] + shard.ms, self.used[at] + shard.bytes, self.caps[at])

    def add(self, set_index: int, table: Table) -> None:
        shard = self.task.one(table)
        self.ms[set_index] += shard.ms
        self.used[set_index] += shard.bytes

    def add_all(self, set_indices: Sequence[int], tables: Sequence[Table]) -> None:
        """``add`` of each table to its set, in order (the same sums), priced in one look-up."""
        found = self.task.of(tables)
        at = np.asarray(set_indices, dtype=np.int64)
        np.add.at(self.ms, at, np.array([e.ms for e in found], dtype=np.float64))
        np.add.at(self.used, at, np.array([e.bytes for e in found], dtype=np.int64))


class SumEdits:
    """Edits of fixed base sets: each set's sums, less a removed shard's, plus an added one's."""

    def __init__(self, model: TorchRecCostModel, base_sets: Sequence[Sequence[Table]]) -> None:
        self.model = model
        flat = [t for s in base_sets for t in s]
        estimates = model.task.of(flat)
        self.shard_ms = np.array([e.ms for e in estimates], dtype=np.float64)
        self.shard_bytes = np.array([e.bytes for e in estimates], dtype=np.int64)
        sizes = np.array([len(s) for s in base_sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        owner = np.repeat(np.arange(len(base_sets)), sizes)
        self.ms = np.bincount(owner, self.shard_ms, minlength=len(base_sets))
        self.used = np.zeros(len(base_sets), dtype=np.int64)
        np.add.at(self.used, owner, self.shard_bytes)
        self.sizes = sizes
        self.caps = model.capacities(len(base_sets))

    def predict(self, edits: Edits) -> np.ndarray:
        """Each edit's cost (0 for a set left empty)."""
        batch = EditBatch.of(edits)
        if not len(batch):
            return np.zeros(0)
        added = self.model.task.of(list(batch.added))
        add_ms = np.concatenate([[0.0], [e.ms for e in added]])[batch.add + 1]
        add_bytes = np.concatenate([[0], [e.bytes for e in added]]).astype(np.int64)[batch.add + 1]
        removed = np.where(batch.removed >= 0, self.offsets[batch.base] + batch.removed, -1)
        has = removed >= 0
        at = np.maximum(removed, 0)
        ms = self.ms[batch.base] - np.where(has, self.shard_ms[at], 0.0) + add_ms
        used = self.used[batch.base] - np.where(has, self.shard_bytes[at], 0) + add_bytes
        count = self.sizes[batch.base] - has + (batch.add >= 0)
        cost = self.model.priced(ms, used, self.caps[batch.base])
        return np.where(count > 0, cost, 0.0)


def _same(a: object, b: object) -> bool:
    return a is b or a == b

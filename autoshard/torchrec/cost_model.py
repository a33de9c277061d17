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
weights and optimizer state within the device's memory) applies as well. On cuda the UVM kernels'
weights live in host memory, which TorchRec caps per rank (its ``Topology`` ``ddr_cap``:
``ddr_cap_bytes``, else its default): where a table runs one, each rank's host bytes are summed and
priced the same way; a plan still past a device's count or a rank's cap is refused (``check_memory``).

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

from collections.abc import Collection, Sequence
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
        ddr_cap_bytes: each rank's host memory (DDR) on cuda, TorchRec's ``Topology`` ``ddr_cap``
            (None: TorchRec's default, 128 GiB), where the UVM kernels keep their weights.
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
        ddr_cap_bytes: int | None = None,
    ) -> None:
        if compute_device not in COMPUTE_DEVICES:
            raise InputError("compute_device", f"must be cuda or cpu, got {compute_device!r}", "use cuda or cpu")
        if storage_reservation is not None and not 0.0 <= storage_reservation < 1.0:
            raise InputError(
                "storage_reservation", f"must be in [0, 1), got {storage_reservation!r}", "TorchRec's default is 0.15"
            )
        if ddr_cap_bytes is not None and ddr_cap_bytes <= 0:
            raise InputError(
                "ddr_cap_bytes", f"must be positive, got {ddr_cap_bytes!r}", "give each rank's host memory"
            )
        self.compute_device, self.storage_reservation = compute_device, storage_reservation
        self.ddr_cap_bytes = ddr_cap_bytes
        self.estimates: TaskEstimates | None = None
        self._last_bound: TorchRecCostModel | None = None
        self._plan_storage: tuple[object, np.ndarray, np.ndarray] | None = None  # the last plan's
        if (workload is None) != (topology is None):
            raise ValueError("give both workload and topology, or neither")
        if workload is not None and topology is not None:
            self.estimates = TaskEstimates(
                workload, topology, compute_device, storage_reservation, ddr_cap_bytes=ddr_cap_bytes
            )

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
        self._last_bound = self._bound(workload, topology)
        return self._last_bound

    def _bound(self, workload: Workload | None, topology: Topology | None) -> TorchRecCostModel:
        return TorchRecCostModel(self.compute_device, self.storage_reservation, workload, topology, self.ddr_cap_bytes)

    def choose_kernels(
        self, workload: Workload, topology: Topology, fill: float | None = None, keep: Collection[str] = ()
    ) -> Workload:
        """``workload`` with each table's kernel chosen under TorchRec's estimate to fill at most
        ``fill`` of the devices' memory (``autoshard.torchrec.kernel_choice``), those named in
        ``keep`` under their own: itself when every table stays as it is."""
        return choose_kernels(workload, self.for_task(workload, topology).task, fill, keep)

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
        used, _ = self.plan_storage(plan)
        return int(max(u - d.memory_bytes for u, d in zip(used.tolist(), plan.devices)))

    def overflow_bytes(self, plan: ShardingPlan) -> int:
        """How far the fullest device of ``plan`` is past what TorchRec's storage estimate allows
        (0 or less: every device fits)."""
        used, _ = self.plan_storage(plan)
        return int((used - self.capacities(len(used))).max())

    def host_overflow_bytes(self, plan: ShardingPlan) -> int:
        """How far the fullest rank of ``plan`` is past its host memory (TorchRec's ``ddr_cap``)
        in TorchRec's storage estimate of its UVM shards (0 or less: every rank fits; on cpu 0)."""
        _, host = self.plan_storage(plan)
        caps = self.task.host_capacities
        return 0 if caps is None else int((host - np.array(caps, dtype=np.int64)).max())

    def check_memory(self, plan: ShardingPlan) -> None:
        """``PlannerError(INSUFFICIENT_MEMORY)`` naming the rank, its bytes and what to change when
        a rank of ``plan`` holds more than TorchRec's storage estimate allows it on the device (its
        storage reservation applied) or, for UVM tables, in host memory (its ``ddr_cap``), as
        TorchRec's planner refuses such a plan: DMP would run out of memory there."""
        used, host = self.plan_storage(plan)
        if self.overflow_bytes(plan) > 0:
            _refuse(
                used,
                np.asarray(self.capacities(len(used)), dtype=np.int64),
                "on the device",
                "its memory after TorchRec's storage reservation",
                (
                    "add devices, or memory per device (--memory-gb)",
                    "on cuda, allow the tables the UVM kernels (their compute_kernels), which keep "
                    "weights in host memory",
                    "allow the tables row-wise splits (their sharding_types)",
                    "shrink the tables (fewer rows, a smaller dimension, fp16)",
                ),
            )
        if self.host_overflow_bytes(plan) > 0:
            _refuse(
                host,
                np.array(self.task.host_capacities, dtype=np.int64),
                "of UVM tables in host memory (DDR)",
                "its ddr_cap",
                (
                    "raise the host memory per rank (--ddr-cap-gb, a request's ddr_cap_gb; "
                    "TorchRecCostModel(ddr_cap_bytes=...), TorchRec's Topology ddr_cap)",
                    "add device memory per device, or devices, so that fewer tables run in host memory",
                    "allow the tables row-wise splits (their sharding_types), which spread their host memory",
                    "shrink the tables (fewer rows, a smaller dimension, fp16)",
                ),
            )

    def plan_storage(self, plan: ShardingPlan) -> tuple[np.ndarray, np.ndarray]:
        """Each device's TorchRec storage (bytes on the compute device) and host memory (DDR of
        the UVM shards on cuda) in ``plan``: counted once per plan's devices (planning asks both
        ``overflow_bytes`` and ``uncounted_bytes`` of a plan, then again of the plan it keeps)."""
        memo = self._plan_storage
        if memo is not None and memo[0] is plan.devices:
            return memo[1], memo[2]
        sizes = [len(d.shards) for d in plan.devices]
        found = self.task.of([s.as_table for d in plan.devices for s in d.shards])
        owner = np.repeat(np.arange(len(sizes)), sizes)
        used = np.zeros(len(sizes), dtype=np.int64)
        host = np.zeros(len(sizes), dtype=np.int64)
        np.add.at(used, owner, np.fromiter((e.bytes for e in found), dtype=np.int64, count=len(found)))
        np.add.at(host, owner, np.fromiter((e.host_bytes for e in found), dtype=np.int64, count=len(found)))
        self._plan_storage = (plan.devices, used, host)
        return used, host

    def __deepcopy__(self, memo: dict[int, Any]) -> TorchRecCostModel:
        """A copy for another thread (the service's ``ModelStore.for_thread``): unbound models
        hold nothing to share, a bound one gets its own cache."""
        task = self.estimates
        return self._bound(None, None) if task is None else self._bound(task.workload, task.topology)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its arguments (the service's planning processes): the estimates are made again."""
        task = self.estimates
        bound = (task.workload, task.topology) if task is not None else (None, None)
        return TorchRecCostModel, (self.compute_device, self.storage_reservation, *bound, self.ddr_cap_bytes)

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

    def host_capacities(self, num_sets: int) -> np.ndarray | None:
        """Each set's host memory (DDR) for UVM shards, as ``capacities``; None where no shard
        of the task holds host memory (no UVM kernel, or cpu): there is nothing to count."""
        if not self.task.uses_host:
            return None
        caps = np.array(self.task.host_capacities, dtype=np.int64)
        return caps if num_sets == len(caps) else np.full(num_sets, caps.min(), dtype=np.int64)

    def priced(
        self,
        ms: np.ndarray,
        used: np.ndarray,
        caps: np.ndarray,
        host: np.ndarray | None = None,
        host_caps: np.ndarray | None = None,
    ) -> np.ndarray:
        """Device costs from their estimate sums and storage sums (``OVER_MEMORY_MS`` and more
        where the storage passes ``caps``, and again where the host memory ``host`` of their UVM
        shards passes ``host_caps``)."""
        over = used - caps
        room = np.maximum(caps, 1).astype(np.float64)
        cost = np.where(over > 0, ms + OVER_MEMORY_MS * (1.0 + over / room), ms)
        if host is None or host_caps is None:
            return cost
        over = host - host_caps
        room = np.maximum(host_caps, 1).astype(np.float64)
        return np.where(over > 0, cost + OVER_MEMORY_MS * (1.0 + over / room), cost)

    def storage(self, table_sets: Sequence[Sequence[Table]]) -> list[int]:
        """TorchRec's storage estimate of each set, bytes (every shard looked up in one call)."""
        found = iter(self.task.of([t for s in table_sets for t in s]))
        return [sum(next(found).bytes for _ in s) for s in table_sets]

    def fits(self, table_sets: Sequence[Sequence[Table]]) -> list[bool]:
        """Whether each set (rank r's, with one set per rank) fits TorchRec's storage: on the
        device, and in host memory for its UVM shards."""
        caps = self.capacities(len(table_sets))
        fit = [used <= cap for used, cap in zip(self.storage(table_sets), caps.tolist())]
        host_caps = self.host_capacities(len(table_sets))
        if host_caps is None:
            return fit
        found = iter(self.task.of([t for s in table_sets for t in s]))
        host = [sum(next(found).host_bytes for _ in s) for s in table_sets]
        return [f and h <= cap for f, h, cap in zip(fit, host, host_caps.tolist())]

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        self._check_batch(batch_size)
        task = self.task
        found = task.of([t for s in table_sets for t in s])  # every miss in one estimator call per option
        num_sets, count = len(table_sets), len(found)
        owner = np.repeat(np.arange(num_sets), [len(s) for s in table_sets])
        ms = np.zeros(num_sets)
        used = np.zeros(num_sets, dtype=np.int64)
        np.add.at(ms, owner, np.fromiter((e.ms for e in found), dtype=np.float64, count=count))  # in order, as +=
        np.add.at(used, owner, np.fromiter((e.bytes for e in found), dtype=np.int64, count=count))
        host_caps = self.host_capacities(num_sets)
        host = None
        if host_caps is not None:
            host = np.zeros(num_sets, dtype=np.int64)
            np.add.at(host, owner, np.fromiter((e.host_bytes for e in found), dtype=np.int64, count=count))
        return self.priced(ms, used, self.capacities(num_sets), host, host_caps).tolist()

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
        self.host_caps = model.host_capacities(num_sets)  # None: no shard holds host memory
        self.host = None if self.host_caps is None else np.zeros(num_sets, dtype=np.int64)

    def costs(self) -> np.ndarray:
        return self.model.priced(self.ms, self.used, self.caps, self.host, self.host_caps)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        shard = self.task.one(table)
        at = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        if self.host is None or self.host_caps is None:
            return self.model.priced(self.ms[at] + shard.ms, self.used[at] + shard.bytes, self.caps[at])
        return self.model.priced(
            self.ms[at] + shard.ms,
            self.used[at] + shard.bytes,
            self.caps[at],
            self.host[at] + shard.host_bytes,
            self.host_caps[at],
        )

    def add(self, set_index: int, table: Table) -> None:
        shard = self.task.one(table)
        self.ms[set_index] += shard.ms
        self.used[set_index] += shard.bytes
        if self.host is not None:
            self.host[set_index] += shard.host_bytes

    def add_all(self, set_indices: Sequence[int], tables: Sequence[Table]) -> None:
        """``add`` of each table to its set, in order (the same sums), priced in one look-up."""
        found = self.task.of(tables)
        at = np.asarray(set_indices, dtype=np.int64)
        np.add.at(self.ms, at, np.array([e.ms for e in found], dtype=np.float64))
        np.add.at(self.used, at, np.array([e.bytes for e in found], dtype=np.int64))
        if self.host is not None:
            np.add.at(self.host, at, np.array([e.host_bytes for e in found], dtype=np.int64))


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
        self.host_caps = model.host_capacities(len(base_sets))  # None: no shard holds host memory
        if self.host_caps is not None:
            self.shard_host = np.array([e.host_bytes for e in estimates], dtype=np.int64)
            self.host = np.zeros(len(base_sets), dtype=np.int64)
            np.add.at(self.host, owner, self.shard_host)

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
        if self.host_caps is None:
            cost = self.model.priced(ms, used, self.caps[batch.base])
        else:
            add_host = np.concatenate([[0], [e.host_bytes for e in added]]).astype(np.int64)[batch.add + 1]
            host = self.host[batch.base] - np.where(has, self.shard_host[at], 0) + add_host
            cost = self.model.priced(ms, used, self.caps[batch.base], host, self.host_caps[batch.base])
        return np.where(count > 0, cost, 0.0)


def _same(a: object, b: object) -> bool:
    return a is b or a == b


def _refuse(used: np.ndarray, caps: np.ndarray, where: str, cap: str, fixes: tuple[str, ...]) -> None:
    """``PlannerError(INSUFFICIENT_MEMORY)`` for the rank furthest past its cap."""
    from autoshard.core.errors import PlannerError, PlannerErrorKind

    rank = int(np.argmax(used - caps))
    raise PlannerError(
        PlannerErrorKind.INSUFFICIENT_MEMORY,
        f"rank {rank} would hold {int(used[rank]):,} bytes {where} by TorchRec's storage estimate, past "
        f"{cap} of {int(caps[rank]):,} bytes ({int(used.sum()):,} bytes on all {len(used)} ranks, which "
        f"have {int(caps.sum()):,})",
        fixes,
    )

"""The all-to-all of pooled embeddings, added to each device's compute cost.

With table-wise (or column-wise) sharding, the device holding a table computes its pooled
output for the whole batch and sends it to the ranks that own the samples; backward sends the
gradients back. Per device and iteration, with batch B, the device's (shard) dims d_t, 4-byte
outputs and D devices::

    bytes  = 2 * B * sum(d_t) * 4 * (D - 1) / D          (forward outputs + backward gradients)
    comm_ms = 2 * latency_ms + bytes / (bandwidth_gbps * 1e6)

``bandwidth_gbps`` is the measured all-to-all bandwidth per device in GB/s (1e9 bytes/s) and
``latency_ms`` the cost of one all-to-all of no data; `autoshard bench comm` measures both on
this machine's ranks and writes them next to the cost model (``communication.json``).

On a cluster of hosts of L devices each, a device sends (L - 1) / D of its bytes to the other
devices of its host, at the measured bandwidth, and (D - L) / D to other hosts, at the topology's
``inter_host_bw_gbps`` (GiB/s, TorchRec's unit and default; never faster than the measured one).
The inter-host figure is modelled, not measured: this machine has one host.

Each shard adds its own output columns (``link_dims``, from its table's sharding type; see
``autoshard.core.sharding``): a table-, column- or row-wise shard its d columns to both tiers (a
row-wise shard's reduce-scatter moves the same bytes as an all-to-all of its partial sums); a
table-row-wise or grid shard reduce-scatters inside its host (2 B d 4 (L - 1) / L bytes) and
sends only B / L rows of the reduced output to other hosts; a data-parallel replica sends no
pooled output but all-reduces its R x d gradient (a ring: 2 (W - 1) / W x R d b bytes a device,
at the measured bandwidth on one host and at the slower of it and ``inter_host_bw_gbps`` across
hosts; modelled, like every inter-host figure).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autoshard.core.costing import (
    Accumulator,
    EditBatch,
    Edits,
    EditScorer,
    SetCostModel,
)
from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import GIB, CostModel, Table, Topology, Workload

COMMUNICATION_FILE = "communication.json"


@dataclass(frozen=True, slots=True)
class Links:
    """What a device's all-to-all crosses: ``num_devices`` ranks, ``devices_per_host`` of them on
    its host (the rest behind ``inter_host_bw_gbps``, GiB/s)."""

    num_devices: int
    devices_per_host: int
    inter_host_bw_gbps: float = 0.0

    @classmethod
    def of(cls, where: Links | Topology | int) -> Links:
        """A topology's links; a bare device count is one host."""
        if isinstance(where, Links):
            return where
        if isinstance(where, Topology):
            return cls(where.num_devices, where.local_world_size, where.inter_host_bw_gbps)
        return cls(where, where)

    @property
    def remote_share(self) -> float:
        """The share of a device's bytes that leaves its host."""
        return (self.num_devices - self.devices_per_host) / self.num_devices


def link_dims(table: Table, links: Links) -> tuple[float, float]:
    """The output columns a shard (``table``: its ``as_table``) sends inside its host and to
    other hosts, in units of a table-wise shard's all-to-all (see the module docstring)."""
    kind, d = table.sharding_type, float(table.embedding_dim)
    if kind is ShardingType.DATA_PARALLEL:
        return 0.0, 0.0
    if kind is ShardingType.TABLE_ROW_WISE or kind is ShardingType.GRID_SHARD:
        host_size = links.devices_per_host
        return d * links.num_devices / host_size, d / host_size
    return d, d


def allreduce_bytes(table: Table, links: Links) -> float:
    """Bytes a device sends to all-reduce a data-parallel replica's gradient (ring; 0 otherwise)."""
    if table.sharding_type is not ShardingType.DATA_PARALLEL or links.num_devices <= 1:
        return 0.0
    weights = table.num_embeddings * table.embedding_dim * table.bytes_per_element
    return 2.0 * (links.num_devices - 1) / links.num_devices * weights


@dataclass(frozen=True, slots=True)
class CommunicationModel:
    bandwidth_gbps: float
    latency_ms: float
    measured_on: str = ""

    def __post_init__(self) -> None:
        if not self.bandwidth_gbps > 0:
            raise InputError("bandwidth_gbps", f"must be > 0, got {self.bandwidth_gbps}")
        if not self.latency_ms >= 0:
            raise InputError("latency_ms", f"must be >= 0, got {self.latency_ms}")

    def bytes(self, dims: int, batch_size: int, num_devices: int) -> float:
        """Bytes a device of ``dims`` output columns sends to the other devices of its host (all
        of them, on one host of ``num_devices``)."""
        return 2.0 * batch_size * dims * 4 * (num_devices - 1) / num_devices

    def _host_bytes(self, dims: float, batch_size: int, links: Links) -> float:
        return 2.0 * batch_size * dims * 4 * (links.devices_per_host - 1) / links.num_devices

    def _slowest_per_ms(self, links: Links) -> float:
        """Bytes per ms over the slowest link a device's traffic crosses."""
        measured = self.bandwidth_gbps * 1e6
        if links.devices_per_host >= links.num_devices:
            return measured
        return min(measured, links.inter_host_bw_gbps * GIB / 1000)

    def _remote_ms(self, dims: float | np.ndarray, batch_size: int, links: Links) -> float | np.ndarray:
        """The inter-host part of the all-to-all (0 on one host)."""
        if links.devices_per_host >= links.num_devices:
            return 0.0
        return 2.0 * batch_size * dims * 4 * links.remote_share / self._slowest_per_ms(links)

    def allreduce_ms(self, table: Table, where: Links | Topology | int) -> float:
        """A data-parallel replica's gradient all-reduce (0 for any other shard)."""
        links = Links.of(where)
        sent = allreduce_bytes(table, links)
        return sent / self._slowest_per_ms(links) if sent else 0.0

    def cost_ms(self, tables: Sequence[Table], batch_size: int, where: Links | Topology | int) -> float:
        """The communication of a device holding ``tables`` (its shards, as tables)."""
        links = Links.of(where)
        host = remote = extra = 0.0
        for table in tables:
            h, r = link_dims(table, links)
            host, remote, extra = host + h, remote + r, extra + self.allreduce_ms(table, links)
        return self.cost_ms_of(host, len(tables), batch_size, links, remote, extra)

    def cost_ms_of(
        self,
        dims: float,
        count: int,
        batch_size: int,
        where: Links | Topology | int,
        remote_dims: float | None = None,
        extra_ms: float = 0.0,
    ) -> float:
        """The cost of a device holding ``count`` shards of ``dims`` output columns in all (and
        ``remote_dims`` to other hosts, if they differ; ``extra_ms`` of all-reduce)."""
        links = Links.of(where)
        if links.num_devices <= 1 or count == 0:
            return 0.0
        host = self._host_bytes(dims, batch_size, links) / (self.bandwidth_gbps * 1e6)
        remote = float(self._remote_ms(dims if remote_dims is None else remote_dims, batch_size, links))
        return 2 * self.latency_ms + host + remote + extra_ms

    def cost_ms_many(
        self,
        dims: np.ndarray,
        count: np.ndarray,
        batch_size: int,
        where: Links | Topology | int,
        remote_dims: np.ndarray | None = None,
        extra_ms: np.ndarray | None = None,
    ) -> np.ndarray:
        """The cost of many devices at once: arrays of their output dims inside the host (and,
        if they differ, to other hosts: ``remote_dims``), their shard counts, and their
        all-reduce time (``extra_ms``)."""
        links = Links.of(where)
        if links.num_devices <= 1:
            return np.zeros(len(dims))
        host = self._host_bytes(1, batch_size, links) * dims / (self.bandwidth_gbps * 1e6)
        remote = self._remote_ms(dims if remote_dims is None else remote_dims, batch_size, links)
        cost = 2 * self.latency_ms + host + remote
        if extra_ms is not None:
            cost = cost + extra_ms
        return np.where(count > 0, cost, 0.0)

    def terms(self, table: Table, links: Links) -> tuple[float, float, float]:
        """What ``table`` adds to a device's communication: (host dims, remote dims, all-reduce ms)."""
        host, remote = link_dims(table, links)
        return host, remote, self.allreduce_ms(table, links)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> CommunicationModel:
        try:
            data = json.loads(path.read_text())
            return cls(float(data["bandwidth_gbps"]), float(data["latency_ms"]), str(data.get("measured_on", "")))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(
                "communication",
                f"{path} is not a communication model ({error})",
                "re-measure it with `autoshard bench comm`",
            ) from None


class WithCommunication(SetCostModel):
    """A cost model plus the all-to-all cost of each device's set on a topology (or a bare
    device count: one host)."""

    def __init__(self, compute: CostModel, communication: CommunicationModel, where: Topology | int) -> None:
        self.compute, self.communication = compute, communication
        self.links = Links.of(where)
        self.max_set_size = compute.max_set_size

    @property
    def num_devices(self) -> int:
        return self.links.num_devices

    def _comm(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.communication.cost_ms(tables, batch_size, self.links)

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        return self.compute.check_workload(workload, max_tables_per_device)

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        compute = self.compute.predict_many(table_sets, batch_size)
        return [c + self._comm(s, batch_size) for c, s in zip(compute, table_sets)]

    def accumulator(self, num_sets: int, batch_size: int) -> _CommAccumulator:
        return _CommAccumulator(self.compute.accumulator(num_sets, batch_size), self, num_sets, batch_size)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        return self.edit_scorer(base_sets, batch_size).predict(edits).tolist()

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> _CommEdits:
        return _CommEdits(self.compute.edit_scorer(base_sets, batch_size), self, base_sets, batch_size)


class _CommEdits:
    """The compute model's edit scorer plus each edited set's all-to-all (additive in its dims)."""

    def __init__(
        self, compute: EditScorer, model: WithCommunication, base_sets: Sequence[Sequence[Table]], batch_size: int
    ) -> None:
        self.compute, self.model, self.batch_size = compute, model, batch_size
        terms = model.communication.terms
        self.terms = np.array([terms(t, model.links) for s in base_sets for t in s], dtype=np.float64).reshape(-1, 3)
        self.sizes = np.array([len(s) for s in base_sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.set_terms = np.array(
            [np.sum([terms(t, model.links) for t in s], axis=0) if s else np.zeros(3) for s in base_sets],
            dtype=np.float64,
        ).reshape(-1, 3)

    def predict(self, edits: Edits) -> np.ndarray:
        edits = EditBatch.of(edits)
        compute = self.compute.predict(edits)
        if not len(edits):
            return compute
        has_rem, has_add = edits.removed >= 0, edits.add >= 0
        flat_row = np.minimum(self.offsets[edits.base] + edits.removed, max(len(self.terms) - 1, 0))
        removed = np.where(has_rem[:, None], self.terms[flat_row] if len(self.terms) else 0.0, 0.0)
        added_terms = [self.model.communication.terms(t, self.model.links) for t in edits.added]
        added = np.array([(0.0, 0.0, 0.0), *added_terms], dtype=np.float64)[edits.add + 1]
        count = (self.sizes[edits.base] - has_rem + has_add).astype(np.float64)
        total = self.set_terms[edits.base] - removed + added
        return compute + self.model.communication.cost_ms_many(
            total[:, 0], count, self.batch_size, self.model.links, total[:, 1], total[:, 2]
        )


class _CommAccumulator:
    """The compute model's accumulator plus each set's all-to-all (additive in its dims)."""

    def __init__(self, compute: Accumulator, model: WithCommunication, num_sets: int, batch_size: int) -> None:
        self.compute, self.model, self.batch_size = compute, model, batch_size
        self.dims, self.count = np.zeros(num_sets), np.zeros(num_sets)
        self.remote, self.extra = np.zeros(num_sets), np.zeros(num_sets)

    def _comm(self, dims: np.ndarray, count: np.ndarray, remote: np.ndarray, extra: np.ndarray) -> np.ndarray:
        return self.model.communication.cost_ms_many(dims, count, self.batch_size, self.model.links, remote, extra)

    def costs(self) -> np.ndarray:
        return self.compute.costs() + self._comm(self.dims, self.count, self.remote, self.extra)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        at = slice(None) if rows is None else rows
        host, remote, extra = self.model.communication.terms(table, self.model.links)
        comm = self._comm(self.dims[at] + host, self.count[at] + 1, self.remote[at] + remote, self.extra[at] + extra)
        return self.compute.costs_if_added(table, rows) + comm

    def add(self, set_index: int, table: Table) -> None:
        self.compute.add(set_index, table)
        host, remote, extra = self.model.communication.terms(table, self.model.links)
        self.dims[set_index] += host
        self.remote[set_index] += remote
        self.extra[set_index] += extra
        self.count[set_index] += 1

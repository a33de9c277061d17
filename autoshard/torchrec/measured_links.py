"""TorchRec's estimator at the links a profile measured, not at the topology's declared ones.

TorchRec's ``EmbeddingPerfEstimator`` prices every collective as ``bytes / get_bw(...)`` from its
``Topology``'s ``GeneralizedCommsBandwidth`` (``BasicCommsBandwidths`` by default: the topology's
``intra_host_bw`` where the collective's ranks share a host, else ``inter_host_bw``; an all-reduce
at ``inter_host_bw x local_world_size``, one NIC a device). Those are the declared 600 / 12.5
GiB/s, while a CPU gloo cluster measures well under 1 GB/s (a profile's ``communication.json``),
so on a CPU profile TorchRec's estimator and our model mostly disagree over the links alone.

``MeasuredCommsBandwidths`` keeps TorchRec's formulas and its tier rule and swaps only the figures:
each collective TorchRec names (all-to-all, reduce-scatter, all-gather, all-reduce) at the
profile's fit of that collective on that tier (a topology's own override where the user set one,
as our model prices it), the tier by TorchRec's rule for every collective (its default prices an
all-reduce at ``inter_host_bw`` even on one host), an all-reduce still times ``local_world_size``.
TorchRec's estimator has no latency term, so the fits' latencies stay out: this judge differs from
ours by TorchRec's formulas (bytes, batch, kernels, no latency), not by the links.
"""

from __future__ import annotations

from torchrec.distributed.planner.types import CollectiveType, GeneralizedCommsBandwidth

from autoshard.core.collectives import Collective, Tier
from autoshard.core.communication import CommunicationModel
from autoshard.core.types import Topology

MEASURED_LINKS = "torchrec_estimator_measured_links"
"""The judge's name: TorchRec's estimator with the profile's measured links."""
MEASURED_LINKS_TITLE = "TorchRec's estimator at measured links"

_COLLECTIVES = {
    CollectiveType.ALL_TO_ALL: Collective.ALL_TO_ALL,
    CollectiveType.REDUCE_SCATTER: Collective.REDUCE_SCATTER,
    CollectiveType.ALL_GATHER: Collective.ALL_GATHER,
    CollectiveType.ALL_REDUCE: Collective.ALL_REDUCE,
}


class MeasuredCommsBandwidths(GeneralizedCommsBandwidth):
    """TorchRec's comms bandwidths (bytes/ms) from a profile's per-(collective, tier) fits on
    ``topology``'s links."""

    def __init__(self, communication: CommunicationModel, topology: Topology) -> None:
        self.name = "MeasuredCommsBandwidths"
        self._bytes_per_ms = {
            (collective, tier): communication.fit(collective, tier, topology).bandwidth_gbps * 1e6
            for collective in _COLLECTIVES.values()
            for tier in Tier
        }

    def get_bw(self, local_world_size: int, world_size: int, collective_type: CollectiveType) -> float:
        tier = Tier.INTRA if world_size <= local_world_size else Tier.INTER
        found = self._bytes_per_ms[_COLLECTIVES[collective_type], tier]
        return found * local_world_size if collective_type == CollectiveType.ALL_REDUCE else found

    @property
    def intra_host_bw(self) -> float:
        return self._bytes_per_ms[Collective.ALL_TO_ALL, Tier.INTRA]

    @property
    def inter_host_bw(self) -> float:
        return self._bytes_per_ms[Collective.ALL_TO_ALL, Tier.INTER]

    def describe(self) -> str:
        """The figures, GB/s intra / inter host, for notes."""

        def pair(collective: Collective) -> str:
            intra, inter = (self._bytes_per_ms[collective, t] / 1e6 for t in (Tier.INTRA, Tier.INTER))
            return f"{collective.value} {intra:.3g} / {inter:.3g}"

        figures = ", ".join(pair(c) for c in _COLLECTIVES.values())
        return f"the profile's measured links, GB/s intra / inter host: {figures} (no latency: TorchRec has none)"

    def __str__(self) -> str:
        return f"{self.name}: {self.describe()}"

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._bytes_per_ms.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MeasuredCommsBandwidths) and self._bytes_per_ms == other._bytes_per_ms


def measured_links(communication: CommunicationModel | None, topology: Topology) -> MeasuredCommsBandwidths | None:
    """The profile's measured links for TorchRec's estimator, or None where it measured none (no
    communication model, one figure for both tiers, or declared constants)."""
    if communication is None or not communication.per_tier or communication.declared:
        return None
    return MeasuredCommsBandwidths(communication, topology)


__all__ = ["MEASURED_LINKS", "MEASURED_LINKS_TITLE", "MeasuredCommsBandwidths", "measured_links"]

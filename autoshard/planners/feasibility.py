"""Memory feasibility: checks before planning, and the error when greedy placement runs out of room."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.types import GIB, Topology

if TYPE_CHECKING:
    from autoshard.planners.device_state import DeviceState
    from autoshard.planners.placement_unit import Unit

FIX_DEVICES = "use more devices"
FIX_MEMORY = "use devices with more memory for embeddings"
FIX_SPLIT = "allow column-wise splitting of large tables"
FIX_SHRINK = "shrink the tables: smaller embedding dims, or fp16 (bytes_per_element 2)"


def fmt_bytes(n: int) -> str:
    return f"{n:,} bytes ({n / GIB:.3g} GiB)"


def check_feasible(units: Sequence[Unit], topology: Topology, split_allowed: bool) -> None:
    """Raise before planning if the tables cannot fit: in total, or one of them on any device."""
    capacity = topology.device_memory_bytes  # the largest device's (every device's, unless per-device caps)
    check_total(sum(u.memory_bytes for u in units), topology)
    largest = max(units, key=lambda u: u.memory_bytes)
    if largest.memory_bytes > capacity:
        what = (
            f"table {largest.parent!r} needs {fmt_bytes(largest.memory_bytes)}"
            if largest.name == largest.parent
            else f"table {largest.parent!r}: even its column shard {largest.name} needs "
            f"{fmt_bytes(largest.memory_bytes)}"
        )
        fixes = (FIX_MEMORY, FIX_SHRINK) if split_allowed else (FIX_SPLIT, FIX_MEMORY, FIX_SHRINK)
        raise PlannerError(
            PlannerErrorKind.TABLE_DOES_NOT_FIT,
            f"{what}, more than {'one' if topology.uniform_memory else 'the largest'} device's {fmt_bytes(capacity)}",
            fixes,
        )


def check_total(total: int, topology: Topology) -> None:
    """Raise if ``total`` bytes exceed every device's memory together."""
    offered = topology.total_memory_bytes
    if total > offered:
        devices = (
            f"{topology.num_devices} device(s) x {fmt_bytes(topology.device_memory_bytes)}"
            if topology.uniform_memory
            else f"{topology.num_devices} device(s) of {topology.memory_label} GiB"
        )
        raise PlannerError(
            PlannerErrorKind.INSUFFICIENT_MEMORY,
            f"the tables need {fmt_bytes(total)} but {devices} offer {fmt_bytes(offered)}",
            (FIX_DEVICES, FIX_MEMORY, f"{FIX_SHRINK} (column-wise splitting does not reduce the total)"),
        )


def no_room_error(unit: Unit, states: Sequence[DeviceState]) -> PlannerError:
    """No device can take ``unit``: name it, the bytes it needs and the largest free space."""
    free = max((s.free_bytes for s in states if unit.parent not in s.parents), default=0)
    return PlannerError(
        PlannerErrorKind.TABLE_DOES_NOT_FIT,
        f"no device has room for table {unit.name!r}: it needs {fmt_bytes(unit.memory_bytes)}, "
        f"the largest free space is {fmt_bytes(free)} (placement ran into a packing dead end)",
        (FIX_DEVICES, FIX_SPLIT, FIX_MEMORY),
    )

"""The agent's second phase: revisiting its placement, one change off the max-cost device a step.

Placing units one by one, a policy gains little on greedy placement (docs/decisions.md, 18):
cost_greedy's edge is local search, which revisits earlier choices. Here the agent revisits its
own. Each repair step is one of local search's rounds (``local_search.round_changes``): the
max-cost device and, for every other device, the best change between the two that lowers the
max (a move, or a swap where no move lowers it). The policy scores the devices with the same
network and features as while placing, a device's row now describing its change, and picks one:
a target makes its change; the max-cost device itself is "stop". Greedy's choice (the feature
the cloned policy follows) is the change ``improve`` would make, so the clone of greedy repairs
as cost_greedy searches, and PPO may learn which changes lead further.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autoshard.core.types import CostModel
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState
from autoshard.planners.local_search import (
    Change,
    Round,
    SearchRound,
    apply_change,
    round_changes,
)
from autoshard.planners.placement_state import cost_bound
from autoshard.rl.observation import (
    GLOBAL_FEATURES,
    UNIT_FEATURES,
    Observation,
    Observations,
    device_rows,
    first_lowest,
)

if TYPE_CHECKING:
    from autoshard.rl.policy import DevicePolicy

REPAIR_PROGRESS = 1.0
"""The ``progress`` feature while repairing: placing steps stay below it (the last unit's is
(n - 1) / n), so the policy tells the phases apart without a feature of its own."""


def repair_mask(step: Round, num_devices: int) -> np.ndarray:
    """Devices the policy may pick: the targets of a change, and the max-cost device (stop)."""
    ok = np.zeros(num_devices, dtype=bool)
    ok[[step.source, *(c.target for c in step.changes)]] = True
    return ok


def change_to(step: Round, device: int) -> Change | None:
    """The change that picking ``device`` makes (None: stop)."""
    return next((c for c in step.changes if c.target == device), None)


def observe_repair(devices: Sequence[DeviceState], step: Round, scale: float, rows: np.ndarray) -> Observation:
    """The observation of a repair step for the devices ``rows``, in the placing steps' layout
    (``autoshard.rl.observation``): context with ``progress`` = ``REPAIR_PROGRESS``, nothing
    left to place and no unit; per device its cost now and after its change (a device without
    one, and the max-cost device, unchanged), the increase, the change's new max over the
    current one, memory used and free after, unit count, cost rank, and whether its change is
    the one local search makes (greedy's choice)."""
    n, source = len(devices), step.source
    loads = np.array([d.load for d in devices])
    capacity = np.array([d.capacity for d in devices], dtype=np.float64)  # each device's own
    current_max, even = float(loads.max()), sum(len(d.units) for d in devices) / n
    after, new_max, free = loads.copy(), np.full(n, current_max), np.array([d.free_bytes for d in devices], float)
    changes = step.changes
    targets = np.array([c.target for c in changes], dtype=np.int64)
    # what a change leaves alone peaks at the highest other load, or the next where that is its target
    others = [d for d in np.argsort(-loads, kind="stable")[:3] if d != source][:2]
    untouched = np.where(targets == others[0], loads[others[1]] if len(others) > 1 else 0.0, loads[others[0]])
    after[targets] = [c.target_cost for c in changes]
    new_max[targets] = np.maximum(untouched, np.maximum([c.source_cost for c in changes], after[targets]))
    moved_out = [devices[source].units[c.out].memory_bytes for c in changes]
    moved_back = [0 if c.back is None else devices[c.target].units[c.back].memory_bytes for c in changes]
    free[targets] += np.subtract(moved_back, moved_out)
    ranks = np.empty(n)
    ranks[np.argsort(loads, kind="stable")] = np.arange(n)
    context = np.zeros(len(GLOBAL_FEATURES) + len(UNIT_FEATURES), dtype=np.float32)
    context[0] = REPAIR_PROGRESS
    context[3], context[4], context[5] = current_max / scale, loads.mean() / scale, math.log2(n) / 7.0
    return Observation(
        context,
        device_rows(
            loads[rows] / scale,
            after[rows] / scale,
            (new_max[rows] - current_max) / scale,
            np.array([devices[d].memory_bytes for d in rows]) / capacity[rows],
            np.clip(free[rows] / capacity[rows], -1.0, 1.0),
            np.array([len(devices[d].units) for d in rows]) / max(even, 1e-9),
            ranks[rows] / max(n - 1, 1),
            rows == step.changes[0].target,
        ),
    )


def make(devices: list[DeviceState], step: Round, device: int) -> bool:
    """Make the change that picking ``device`` makes; False for stop (nothing changes)."""
    change = change_to(step, device)
    if change is not None:
        apply_change(devices, change)
    return change is not None


def policy_repair(
    devices: list[DeviceState],
    policy: DevicePolicy,
    cost_model: CostModel,
    batch_size: int,
    max_units: int | None,
    rounds: int,
    deadline: Deadline | None = None,
) -> int:
    """The policy's argmax through at most ``rounds`` repair steps of ``devices`` (changed in
    place; their loads must be the cost model's), until it stops, nothing lowers the max, or the
    ``deadline`` expires; returns the number of changes made."""
    scale = cost_scale(devices)
    for made in range(rounds):
        if deadline is not None and deadline.expired:
            return made
        step = round_changes(devices, cost_model, batch_size, max_units)  # each repair step: a round
        if step is None:
            return made
        rows = np.flatnonzero(repair_mask(step, len(devices)))
        seen = observe_repair(devices, step, scale, rows)
        scores = policy.scores(Observations(seen.context[None], seen.devices, (0, len(rows))))
        if not make(devices, step, int(rows[np.argmax(scores)])):
            return made
    return rounds


def follow_recorded(
    devices: list[DeviceState], rounds: Sequence[SearchRound], policy: DevicePolicy, max_units: int | None
) -> int:
    """Make the changes of local search's recorded ``rounds`` (``improve(record=...)``, from this
    placement) on ``devices`` while the policy's argmax picks them, every round checked in one
    pass of the policy; stops at the first round where it does not, or where the extrapolation
    guard withholds one of the round's changes (there the policy saw other rows). Returns how
    many were made: ``policy_repair`` goes on from there. The clone of greedy follows every
    round, so ``rl`` after ``cost_greedy`` repairs at the cost of one pass of its policy."""

    def guarded(done: SearchRound) -> bool:
        return max_units is not None and any(
            c.back is None and len(done.devices[c.target].units) >= max_units for c in done.step.changes
        )

    followed = list(itertools.takewhile(lambda done: not guarded(done), rounds))
    if not followed:
        return 0
    scale = cost_scale(devices)
    rows = [np.flatnonzero(repair_mask(done.step, len(devices))) for done in followed]
    seen = [observe_repair(done.devices, done.step, scale, r) for done, r in zip(followed, rows)]
    starts = tuple(itertools.accumulate((len(r) for r in rows), initial=0))
    observed = Observations(np.stack([s.context for s in seen]), np.concatenate([s.devices for s in seen]), starts)
    chosen = np.concatenate(rows)[first_lowest(-policy.scores(observed), observed.placement_of_row, len(followed))]
    for made, (done, device) in enumerate(zip(followed, chosen)):
        if device != done.step.changes[0].target:
            return made
        apply_change(devices, done.step.changes[0])
    return len(followed)


def cost_scale(devices: Sequence[DeviceState]) -> float:
    """What the observation divides costs by: the placement's ``PlacementState.cost_bound``."""
    return cost_bound([u for d in devices for u in d.units], len(devices))

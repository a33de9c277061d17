"""Ruin and recreate: a large-neighbourhood search that takes a placement past local search's optimum.

Local search (``local_search.improve``) stops where no single move or swap off the most loaded
device lowers the max. Each iteration here takes that device and a few others (the least
loaded or random ones), removes a random share of each one's units, places those again on the
same devices (heaviest first with the order perturbed, each by ``choose``, the packing
lookahead included, the units kept where they were), runs local search on those devices, and
keeps the result if the max fell by more than local search's tolerance. The other devices are
untouched, so an iteration costs a fraction of a placement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.errors import PlannerError
from autoshard.core.types import CostModel, Topology
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState
from autoshard.planners.local_search import REL_TOL, improve, lower_bound
from autoshard.planners.placement import Chooser, PlacementState
from autoshard.planners.placing import place
from autoshard.planners.units import Unit


@dataclass(frozen=True, slots=True)
class RuinRecreateConfig:
    """``iterations`` ruins (0: off); each takes the max device and 1 to ``max_partners``
    others, removes a share drawn from [``min_share``, 1] of each one's units (at least one;
    the share lowered so that at most about ``max_units`` units go in all),
    re-places them heaviest first with each unit's cost scaled by ``exp(order_noise * N(0, 1))``
    for the order, then runs ``rounds`` of local search on those devices."""

    iterations: int = 0
    max_partners: int = 3
    min_share: float = 0.3
    order_noise: float = 0.3
    rounds: int = 10
    max_units: int | None = None


Start = Callable[[list[Unit], Topology], PlacementState]
"""A fresh placement of these units (in this order) on a topology of the ruined devices."""


def ruin_and_recreate(
    states: Sequence[DeviceState],
    cost_model: CostModel,
    batch_size: int,
    topology: Topology,
    start: Start,
    chooser: Callable[[], Chooser],
    rng: np.random.Generator,
    config: RuinRecreateConfig,
    deadline: Deadline | None = None,
) -> list[DeviceState]:
    """The best placement found from ``states`` (a new list; ``states`` itself is left as it
    was); ``states[*].load`` must hold predicted costs. ``chooser()`` makes each recreation's
    chooser. Stops at the lower bound, after ``config.iterations``, or once ``deadline`` expires."""
    best = [s.copy() for s in states]
    if len(best) < 2:
        return best
    bound = lower_bound(best) * (1 + REL_TOL)
    for _ in range(config.iterations):
        if (deadline is not None and deadline.expired) or _max(best) <= bound:
            break
        ruined = _ruined(best, rng, config.max_partners)
        share = rng.uniform(config.min_share, 1.0)
        if config.max_units is not None:  # a small neighbourhood, however many units a device holds
            share = min(share, config.max_units / sum(len(best[d].units) for d in ruined))
        kept: list[list[Unit]] = []
        removed: list[Unit] = []
        for d in ruined:
            units = best[d].units
            count = max(1, round(share * len(units)))
            out = set(rng.choice(len(units), count, replace=False).tolist()) if units else set()
            kept.append([u for i, u in enumerate(units) if i not in out])
            removed += [u for i, u in enumerate(units) if i in out]
        keys = np.array([-u.cost for u in removed]) * np.exp(config.order_noise * rng.standard_normal(len(removed)))
        order = [u for units in kept for u in units] + [removed[i] for i in np.argsort(keys, kind="stable")]
        state = start(order, replace(topology, num_devices=len(ruined)))
        state.preplace([j for j, units in enumerate(kept) for _ in units])  # the units that stay, where they were
        try:
            recreated = place(state, chooser()).devices
        except PlannerError:  # FFD's lookahead is not exact: this order ran into a dead end
            continue
        improve(recreated, cost_model, batch_size, config.rounds, deadline)
        trial = list(best)
        for device, s in zip(ruined, recreated):
            trial[device] = DeviceState(device, s.capacity, s.units, s.memory_bytes, s.load, s.parents)
        if _max(trial) < _max(best) * (1 - REL_TOL):
            best = trial
    return best


def _ruined(states: Sequence[DeviceState], rng: np.random.Generator, max_partners: int) -> list[int]:
    """The max device and its partners: the least loaded ones or random ones, a coin decides."""
    source = max(states, key=lambda s: (s.load, -s.index)).index
    others = [s.index for s in states if s.index != source]
    count = int(rng.integers(1, min(max_partners, len(others)) + 1))
    if rng.random() < 0.5:
        partners = sorted(others, key=lambda d: (states[d].load, d))[:count]
    else:
        partners = sorted(rng.choice(others, count, replace=False).tolist())
    return [source, *partners]


def _max(states: Sequence[DeviceState]) -> float:
    return max(s.load for s in states)

"""Fit ``time = latency + bytes / bandwidth`` to one collective's measured points on one link tier.

A point is (bytes a rank holds, median ms) of one op as ``autoshard.torchrec.comm_worker`` measures it: all the
``CALLS`` calls a DMP iteration makes of the collective (the ids' lengths and ids; the pooled
outputs forward and their gradients backward). The fit's points are per call (``call_point``):
the bytes a rank *sends* on the tier (``sent_bytes``), the unit ``autoshard.core.collectives``
prices shards in, and the op's ms, each over ``CALLS``; so ``CALLS`` x latency + bytes /
bandwidth, as the model prices an iteration, is the op's time. The large messages set the
bandwidth and the small ones the latency (``fit_line``), so noise on a 100 ms call cannot swamp
a 0.1 ms latency.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoshard.core.collectives import CALLS, Collective, LinkFit, Tier


def sent_bytes(collective: Collective, held: float, world: int) -> float:
    """Bytes one rank sends in one call of ``collective`` over ``world`` ranks on a buffer of
    ``held`` bytes a rank (all-to-all and reduce-scatter input, all-gather output, all-reduce
    tensor; a ring all-reduce sends twice a reduce-scatter's bytes)."""
    share = held * (world - 1) / world
    return 2.0 * share if collective is Collective.ALL_REDUCE else share


def call_point(collective: Collective, held: float, ms: float, world: int) -> tuple[float, float]:
    """One call's (bytes a rank sends, ms) of an op that held ``held`` bytes a rank and took ``ms``."""
    calls = CALLS[collective]
    return sent_bytes(collective, held, world) / calls, ms / calls


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(latency ms, bandwidth GB/s) of points of (bytes, ms): the bandwidth from the larger half
    of the sizes (least squares; where the bytes dominate), the latency the median of what the
    smaller half takes beyond its bytes at that bandwidth (never below 0)."""
    ordered = sorted((float(b), float(ms)) for b, ms in points)
    if len(ordered) < 2 or ordered[0][0] == ordered[-1][0]:
        raise ValueError("a fit needs at least two message sizes")
    x, y = np.array([b for b, _ in ordered]), np.array([ms for _, ms in ordered])
    large = len(x) // 2 if len(x) > 3 else len(x) - 2  # the larger half, at least 2 points
    ms_per_byte = float(np.polyfit(x[large:], y[large:], 1)[0])
    if ms_per_byte <= 0:  # noise swamps the bytes: the largest message's rate
        ms_per_byte = float(y[-1] / x[-1])
    small = (len(x) + 1) // 2  # the smaller half
    latency = max(0.0, float(np.median(y[:small] - x[:small] * ms_per_byte)))
    return latency, 1.0 / ms_per_byte / 1e6


def fit_collective(
    collective: Collective, tier: Tier, held_points: Sequence[Sequence[float]], world: int, link: str
) -> LinkFit:
    """The fit of ``collective`` on ``tier`` from the worker's (bytes held, median ms) points of ops."""
    points = [call_point(collective, held, float(ms), world) for held, ms in held_points]
    latency, bandwidth = fit_line(points)
    return LinkFit(
        collective,
        tier,
        round(latency, 4),
        round(bandwidth, 4),
        "measured",
        tuple((int(b), round(ms, 4)) for b, ms in points),
        world,
        link,
    )

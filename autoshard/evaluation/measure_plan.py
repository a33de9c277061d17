"""Measured truth about plans: every device's shard run with the microbenchmark, plans interleaved.

For each round, every plan's devices are measured in turn (plan A's devices, then B's, ...).
Rounds go in pairs, the second of a pair in the first's order backwards, each pair rotated by
one, so that a drift within a round (later plans measuring slower) falls on every plan alike
rather than on the later ones; an even number of rounds balances it exactly (docs/decisions.md,
24). A device set (the same shards) that several plans hold is one piece of work: it is measured
once per round and every plan holding it reads that measurement, so two plans compare by the
devices they differ in, not by two draws of the noise of the one they share (plans bound by the
same table alone on a device, or two planners agreeing on a whole plan, e.g. rl+refine keeping
cost_greedy's, read the same). Each device is timed for at least ``MIN_DEVICE_MS`` (more
repeats for short steps). A plan's measured cost in a round is the max over its devices.
Reported per plan: per-device medians over rounds, the median measured max with its spread, and
the ratio of each plan's max to the reference plan's, per round, with a 95% confidence interval
(t-interval on log ratios).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from autoshard.core.dmp_batch import as_run, is_replica
from autoshard.core.stats import ratio_ci95
from autoshard.core.types import MeasuredPlan, ShardingPlan, Table
from cost_model.bench.harness import measure
from cost_model.traces.records import BenchConfig

MIN_DEVICE_MS = 50.0
"""Each device of each round is timed for at least this long (``bench.measure``'s
``min_total_ms``): a few repeats of a sub-millisecond step are too noisy to rank plans by
(chosen by measurement: docs/decisions.md, 24)."""


def measure_plans(
    plans: Sequence[ShardingPlan],
    batch_size: int,
    config: BenchConfig,
    rounds: int = 5,
    reference: int = 0,
    min_device_ms: float = MIN_DEVICE_MS,
    on_round: Callable[[int], None] | None = None,
    world_size: int | None = None,
) -> list[MeasuredPlan]:
    """Interleaved measurement of plans of one task; ratios are to ``plans[reference]``.
    ``on_round(done)`` is called after each round (a progress bar). ``world_size``: each device
    run as DMP runs a rank of that many (``_device_ms``); None: every shard at ``batch_size``."""
    bench = BenchConfig(**{**{f: getattr(config, f) for f in config.__slots__}, "batch_size": batch_size})
    per_round = [[[0.0] * len(p.devices) for p in plans] for _ in range(rounds)]
    for r in range(rounds):
        this_round: dict[tuple, float] = {}  # a device set -> its measurement in this round
        for p in measuring_order(len(plans), r):
            for d, device in enumerate(plans[p].devices):
                key = device.set_key
                if key not in this_round:
                    tables = [s.as_table for s in device.shards]
                    this_round[key] = _device_ms(tables, bench, r * 7919 + d, min_device_ms, world_size)
                per_round[r][p][d] = this_round[key]
        if on_round is not None:
            on_round(r + 1)
    out = []
    for p, plan in enumerate(plans):
        maxima = [max(per_round[r][p]) for r in range(rounds)]
        ref = [max(per_round[r][reference]) for r in range(rounds)]
        ratio, low, high = ratio_ci95(maxima, ref)
        q = np.percentile(maxima, [25, 75])
        out.append(
            MeasuredPlan(
                plan.planner,
                tuple(statistics.median(per_round[r][p][d] for r in range(rounds)) for d in range(len(plan.devices))),
                statistics.median(maxima),
                float(q[1] - q[0]),
                ratio,
                (low, high),
                tuple(maxima),
                tuple(tuple(per_round[r][p]) for r in range(rounds)),
            )
        )
    return out


def measuring_order(count: int, round_: int) -> list[int]:
    """The order plans are measured in, in round ``round_``: rounds go in pairs, the second of a
    pair the first backwards (so over a pair every plan's positions add up to ``count - 1``), and
    each pair rotated by one from the last."""
    order = [(k + round_ // 2) % count for k in range(count)]
    return order[::-1] if round_ % 2 else order


def _device_ms(
    tables: Sequence[Table], bench: BenchConfig, seed: int, min_device_ms: float, world_size: int | None
) -> float:
    """One device's measured ms. With ``world_size``, as DMP runs a rank and as the cost model
    prices it (``autoshard.core.dmp_batch``): its sharded shards as one set at B x W bags, its
    replicas (at their full pooling factor) as another at B, the two summed."""
    if not tables:
        return 0.0
    if world_size is None or world_size <= 1:
        return measure(tables, bench, seed, min_device_ms).total.median
    sharded = [t for t in tables if not is_replica(t)]
    replicas = [as_run(t, world_size) for t in tables if is_replica(t)]
    wide = replace(bench, batch_size=bench.batch_size * world_size)
    total = measure(sharded, wide, seed, min_device_ms).total.median if sharded else 0.0
    return total + (measure(replicas, bench, seed, min_device_ms).total.median if replicas else 0.0)

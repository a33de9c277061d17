"""Index batches drawn from a table's access distribution (bounded Zipf over its rows)."""

from __future__ import annotations

import numpy as np

from autoshard.core.sharding import SCATTER_PRIME


def zipf_ranks(rows: int, alpha: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` ranks in [0, rows) with P(rank k) ~ (k + 1)^-alpha (continuous inverse-CDF sampling)."""
    u = rng.random(n)
    top = rows + 1.0
    if alpha < 1e-6:
        x = 1.0 + u * rows
    elif abs(alpha - 1.0) < 1e-6:
        x = top**u
    else:
        e = 1.0 - alpha
        x = (1.0 + u * (top**e - 1.0)) ** (1.0 / e)
    return np.minimum(x.astype(np.int64) - 1, rows - 1).clip(0)


def zipf_rows(rows: int, alpha: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Row ids: Zipf ranks scattered over the table (``autoshard.core.sharding.scattered_row``)."""
    return (zipf_ranks(rows, alpha, n, rng) * SCATTER_PRIME) % rows


def bag_lengths(batch_size: int, pooling_factor: float) -> np.ndarray:
    """Per-sample bag lengths whose mean is the pooling factor: each bag floor(L) or floor(L) + 1
    lookups, the longer ones spread evenly (Bresenham), floor(B x frac(L)) of them, so that the
    batch holds B x floor(L) + floor(B x frac(L)) lookups (exactly B x L where that is whole).

    A pooling factor below 1 (a row block's or a data-parallel replica's share of a table's
    lookups; ``autoshard.core.types.TableShard.as_table``) gives bags of 0 or 1 lookups: empty
    bags, as a device holding one row block of a table sees for the samples whose ids fall in
    other blocks (FBGEMM TBE and ``EmbeddingBag`` take zero-length bags)."""
    base = int(np.floor(pooling_factor))
    frac = max(0.0, pooling_factor - base)
    steps = np.floor(np.arange(batch_size + 1) * frac + 1e-9)  # Bresenham: evenly spread ceil samples
    return base + np.diff(steps).astype(np.int64)

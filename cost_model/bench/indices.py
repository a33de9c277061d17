"""Index batches drawn from a table's access distribution (bounded Zipf over its rows)."""

from __future__ import annotations

import numpy as np

# A prime above any physical row count: rank -> row by multiplication scatters hot rows over
# the table, as hashed ids do in production, and is a bijection modulo any smaller row count.
_SCATTER_PRIME = 2_147_483_647


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
    """Row ids: Zipf ranks scattered over the table."""
    return (zipf_ranks(rows, alpha, n, rng) * _SCATTER_PRIME) % rows


def bag_lengths(batch_size: int, pooling_factor: float) -> np.ndarray:
    """Per-sample bag lengths whose mean is exactly the pooling factor (floor/ceil mix, >= 1)."""
    base = max(1, int(np.floor(pooling_factor)))
    frac = max(0.0, pooling_factor - base)
    steps = np.floor(np.arange(batch_size + 1) * frac + 1e-9)  # Bresenham: evenly spread ceil samples
    return base + np.diff(steps).astype(np.int64)

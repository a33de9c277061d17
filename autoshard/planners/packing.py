"""Whether items fit into bins by first-fit decreasing: the packing lookahead of placement
(``PlacementState``'s mask), for many sets of bins at once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def packable(sizes_desc: Sequence[int], free: Sequence[int]) -> bool:
    """Whether items (sizes, largest first) fit into bins with ``free`` bytes, by first-fit
    decreasing (``packable_many`` on one set of bins)."""
    return bool(packable_many(sizes_desc, np.asarray(free, dtype=np.int64)[None, :])[0])


SETTLED_EVERY = 8
"""``packable_many`` checks whether a row has settled (the rest provably fits) every this many
items: once true it stays true (placing x bytes lowers the room beyond the next, smaller item by
at most x, and the total left by exactly x), so the answers are the same, in about half the time
of checking every item (docs/decisions.md, 32)."""


def packable_many(sizes_desc: Sequence[int], free: np.ndarray) -> np.ndarray:
    """For each row of ``free`` (``[n, bins]`` bytes), whether the items (sizes, largest first)
    fit by first-fit decreasing, all rows at once; a row stops early once the rest provably
    fits (every bin's room beyond the current item adds up to the remaining total, so any-fit
    cannot fail; checked every ``SETTLED_EVERY`` items)."""
    bins = -np.sort(-np.asarray(free, dtype=np.int64), axis=1)  # each row's bins, largest first
    fits_all = np.ones(len(bins), dtype=bool)
    rows = np.arange(len(bins))  # the rows still open; ``bins`` holds theirs only
    width = bins.shape[1]
    starts = rows * width  # each open row's first bin in ``bins`` flattened (fancy 2-D indexing is slower)
    remaining = int(sum(sizes_desc))
    for k, size in enumerate(sizes_desc):
        if k % SETTLED_EVERY == 0:
            unsettled = np.maximum(bins - size, 0).sum(axis=1) < remaining
            if not unsettled.all():
                bins, rows = bins[unsettled], rows[unsettled]
                starts = np.arange(len(rows)) * width
        if not len(rows):
            break
        room = bins >= size
        at = starts + room.argmax(axis=1)  # each row's first bin with room (its first bin where none has)
        placed = room.ravel()[at]
        if not placed.all():
            fits_all[rows[~placed]] = False
            bins, rows = bins[placed], rows[placed]
            starts = np.arange(len(rows)) * width
            at = starts + (at[placed] % width)
        bins.ravel()[at] -= size
        remaining -= size
    return fits_all

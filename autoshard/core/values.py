"""What counts as an integer and a number in inputs (``bool`` is neither; numbers are finite)."""

from __future__ import annotations

import math


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

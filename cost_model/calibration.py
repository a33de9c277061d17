"""Putting a trace file measured on a drifted machine on its profile's scale.

Hosts of one profile (same CPU name) measure the same sets up to 2.6x apart, and one host drifts
by 10-25% within an hour (``autoshard bench drift``; docs/traces.md). A file collected at such a
moment carries that factor in every label; trained beside the profile's other traces, it teaches
the model that its tables are slower than they are. Calibration measures the factor on the
file's own **anchor sets**, the sets of at most ``max_tables`` tables, which the profile's model
has seen densely (every pool table alone, and hundreds of 2-table sets), as the median of
measured / predicted; a set with a table outside the model's trained ranges
(``TrainedRanges.covers``) is no anchor, since the model is not known to be right there. The
factor is stored in the file as a ``calibration`` line; the raw measurements stay as they were,
and ``read_traces`` divides every timing by the factor.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autoshard.errors import InputError
from cost_model.predictor import NeuralCostModel
from cost_model.traces import iter_lines, read_header, read_traces, write_trace

MIN_ANCHORS = 10


@dataclass(frozen=True, slots=True)
class Calibration:
    factor: float  # measured / predicted on the anchors: the file's labels are divided by it
    anchors: int
    quartiles: tuple[float, float]  # of measured / predicted over the anchors
    max_tables: int
    model: str

    def to_record(self) -> dict:
        return {"type": "calibration", **asdict(self), "quartiles": list(self.quartiles)}


def estimate_calibration(path: Path, model: NeuralCostModel, model_name: str, max_tables: int = 2) -> Calibration:
    """The factor of ``path``'s raw measurements against ``model`` on the file's anchor sets."""
    traces = read_traces(path, calibrated=False)
    if traces.profile.id != model.profile.id:
        raise InputError("traces", f"traces of profile {traces.profile.id}, the model is {model.profile.id}",
                         "calibrate against the model of the traces' own profile")
    covered = (lambda t: True) if model.ranges is None else model.ranges.covers
    anchors = [s for s in traces.samples if len(s.tables) <= max_tables and all(map(covered, s.tables))]
    if len(anchors) < MIN_ANCHORS:
        raise InputError("max_tables", f"{len(anchors)} sets of at most {max_tables} tables within the model's trained "
                         f"ranges in {path}: too few anchors "
                         f"(at least {MIN_ANCHORS})", "raise --max-tables, or collect with small sets (--max-tables 10)")
    ratios = [s.cost_ms / model.predict(s.tables, s.batch_size) for s in anchors]
    low, high = np.quantile(ratios, [0.25, 0.75])
    return Calibration(float(statistics.median(ratios)), len(anchors), (float(low), float(high)), max_tables, model_name)


def write_calibration(path: Path, calibration: Calibration) -> None:
    """Store ``calibration`` in ``path`` (replacing an earlier one); the samples stay as measured."""
    header = read_header(path)
    if header is None:
        raise InputError("traces", f"{path} is empty", "collect traces into it first")
    records = [line for line in iter_lines(path) if line.get("type") not in ("header", "calibration")]
    write_trace(path, header, [calibration.to_record(), *records])

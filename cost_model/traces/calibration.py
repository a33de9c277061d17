"""Putting a trace file measured on a drifted machine on its profile's scale.

Hosts of one profile (same CPU name) can measure the same sets at different speeds, and one host
drifts within an hour (``autoshard bench drift``; docs/decisions.md, 10). A file collected at such a
moment carries that factor in every label; trained beside the profile's other traces, it teaches
the model that its tables are slower than they are. Calibration measures the factor on the
file's own **anchor sets**, the sets of at most ``max_tables`` tables, which the profile's model
has seen densely (every pool table alone, and hundreds of 2-table sets), as the median of
measured / predicted; a set with a table outside the model's trained ranges
(``TrainedRanges.covers``) is no anchor, since the model is not known to be right there. The
factor is stored in the file as a ``calibration`` line; the raw measurements stay as they were,
and ``read_traces`` divides every timing by the factor.

Where the file's small sets are not sets the model is known to be right on (a pool of heavy
tables, collected because the model prices them wrong), the factor comes instead from ``bench
drift`` checks run beside the collection: the profile's own traced sets re-measured then, the
median of now / then over every set of every check (``calibration_from_drift``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autoshard.core.errors import InputError
from cost_model.predictor import NeuralCostModel
from cost_model.traces.store import iter_lines, read_header, read_traces, write_trace

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
        raise InputError(
            "traces",
            f"traces of profile {traces.profile.id}, the model is {model.profile.id}",
            "calibrate against the model of the traces' own profile",
        )
    covered = (lambda t: True) if model.ranges is None else model.ranges.covers
    anchors = [s for s in traces.samples if len(s.tables) <= max_tables and all(map(covered, s.tables))]
    if len(anchors) < MIN_ANCHORS:
        raise InputError(
            "max_tables",
            f"{len(anchors)} sets of at most {max_tables} tables within the model's trained "
            f"ranges in {path}: too few anchors "
            f"(at least {MIN_ANCHORS})",
            "raise --max-tables, or collect with small sets (--max-tables 10)",
        )
    ratios = [s.cost_ms / model.predict(s.tables, s.batch_size) for s in anchors]
    low, high = np.quantile(ratios, [0.25, 0.75])
    return Calibration(
        float(statistics.median(ratios)), len(anchors), (float(low), float(high)), max_tables, model_name
    )


def calibration_from_drift(path: Path, checks: list[tuple[str, dict]]) -> Calibration:
    """The factor of ``path``'s raw measurements from ``bench drift --json`` checks (name, report)
    of this host run beside its collection: the median now / then over their sets."""
    traces = read_traces(path, calibrated=False)
    ratios = []
    for name, check in checks:
        try:
            this_cpu, alike, same = check["this_cpu"], check["sets_alike"], check["same_device"]
            ratios += [float(s["ratio"]) for s in check["sets"]]
        except (KeyError, TypeError, ValueError):
            raise InputError(
                "--drift",
                f"{name} is not a report of `autoshard bench drift --json`",
                "pass what `autoshard bench drift --traces <profile traces> --json` prints",
            ) from None
        if this_cpu != traces.profile.cpu or not same:
            raise InputError(
                "--drift",
                f"{name} was measured on {this_cpu!r} against traces of another machine; "
                f"{path} is of {traces.profile.cpu!r}",
                "run `bench drift` with the profile's own traces on the machine that collected the file",
            )
        if not alike:
            raise InputError(
                "--drift",
                f"{name}: the profile's sets no longer keep their relative costs here, so no "
                "one factor puts this machine's timings on the profile's scale",
                "collect a profile on this machine instead (docs/profiles.md)",
            )
    if len(ratios) < MIN_ANCHORS:
        raise InputError(
            "--drift",
            f"{len(ratios)} re-measured sets: too few (at least {MIN_ANCHORS})",
            "run `bench drift --samples 24`",
        )
    low, high = np.quantile(ratios, [0.25, 0.75])
    return Calibration(
        float(statistics.median(ratios)),
        len(ratios),
        (float(low), float(high)),
        0,
        "bench drift: " + ", ".join(name for name, _ in checks),
    )


def write_calibration(path: Path, calibration: Calibration) -> None:
    """Store ``calibration`` in ``path`` (replacing an earlier one); the samples stay as measured."""
    header = read_header(path)
    if header is None:
        raise InputError("traces", f"{path} is empty", "collect traces into it first")
    records = [line for line in iter_lines(path) if line.get("type") not in ("header", "calibration")]
    write_trace(path, header, [calibration.to_record(), *records])

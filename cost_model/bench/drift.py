"""Is a profile's trace data still this machine? Re-measure some of its sets and compare.

A cost model is trained on one device's traces. The same machine type can measure differently
later (another host, another VM, a noisy neighbour). Planners rank plans by relative costs, so a
uniform factor would not matter, but a factor that depends on the set (e.g. small sets slowing
down most) changes which plan is best. ``check_drift`` re-measures a
seeded sample of the traces' sets in interleaved rounds with the traces' own benchmark settings,
each set at the batch size it was measured at, and reports the ratio of now to then, per set
and overall. It also compares the device the traces name with this one: traces of another CPU or
GPU model do not describe this machine, whatever the median ratio says (another CPU can read a
median near 1 and sets far apart). Traces recorded before the CPU's family and model were (the
first "AMD EPYC" profile) compare by name, which a VM shares across generations; so the check
also asks whether the sets keep their relative costs: when more than a quarter of them run more
than 0.8-1.25x off the median factor, the cost of one set against another has changed, and plans
ranked by the model rank wrongly here (thresholds chosen by measurement: docs/decisions.md, 11).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.errors import InputError
from cost_model.bench.harness import measure
from cost_model.profile import cpu_model, device_name
from cost_model.traces.store import TraceSet

TOLERANCE = (0.8, 1.25)
"""A median ratio outside this range means the traces no longer describe this machine; a set whose
ratio over the median ratio is outside it has changed its cost relative to the others."""

_FIXES = (
    "`scripts/profile_machine.sh`, an hour; or in minutes, adapt this one: `autoshard bench collect --samples 300 "
    "--passes 3 ...` then `autoshard cost adapt`, docs/profiles.md"
)

MAX_DEPARTING_SHARE = 0.25
"""More than this share of sets off the median factor: the sets' relative costs have changed."""


@dataclass(frozen=True, slots=True)
class SetDrift:
    sample_id: int
    tables: int
    then_ms: float
    now_ms: float

    @property
    def ratio(self) -> float:
        return self.now_ms / self.then_ms


@dataclass(frozen=True, slots=True)
class Drift:
    sets: tuple[SetDrift, ...]
    traced_device: str  # the device named in the traces' header
    this_device: str  # the device the sets were re-measured on
    traced_cpu: str | None = None  # the CPU's vendor, family and model (``cpu_model``), where the traces record it
    this_cpu: str | None = None

    @property
    def same_device(self) -> bool:
        """The same device name, and the same CPU family and model where both are known."""
        known = self.traced_cpu is not None and self.this_cpu is not None
        return self.traced_device == self.this_device and not (known and self.traced_cpu != self.this_cpu)

    def _described(self, name: str, cpu: str | None) -> str:
        return repr(name) if cpu is None else f"{name!r} ({cpu})"

    @property
    def median_ratio(self) -> float:
        return statistics.median(s.ratio for s in self.sets)

    @property
    def ratio_range(self) -> tuple[float, float]:
        ratios = [s.ratio for s in self.sets]
        return min(ratios), max(ratios)

    @property
    def departing(self) -> tuple[SetDrift, ...]:
        """The sets whose ratio is off the median ratio by more than ``TOLERANCE``."""
        low, high = TOLERANCE
        median = self.median_ratio
        return tuple(s for s in self.sets if not low <= s.ratio / median <= high)

    @property
    def sets_alike(self) -> bool:
        """The sets keep their relative costs: at most ``MAX_DEPARTING_SHARE`` of them depart."""
        return len(self.departing) <= MAX_DEPARTING_SHARE * len(self.sets)

    @property
    def holds(self) -> bool:
        return self.same_device and self.within_tolerance and self.sets_alike

    @property
    def within_tolerance(self) -> bool:
        low, high = TOLERANCE
        return low <= self.median_ratio <= high

    def verdict(self) -> str:
        """Why the traces do or do not describe this machine, in a sentence."""
        low, high = self.ratio_range
        ratio = f"the traced sets take {self.median_ratio:.2f}x their traced time here (range {low:.2f}-{high:.2f})"
        if not self.same_device:
            traced, this = (
                self._described(self.traced_device, self.traced_cpu),
                self._described(self.this_device, self.this_cpu),
            )
            return (
                f"{ratio}, but the traces were measured on {traced} and this machine is {this}: they do not "
                f"describe it; collect a profile here ({_FIXES}) before trusting predictions of this machine"
            )
        if not self.within_tolerance:
            return (
                f"{ratio}: outside {TOLERANCE[0]}-{TOLERANCE[1]}, this machine no longer measures like the traces; "
                "re-collect them (`autoshard bench collect`) and retrain before trusting predictions here"
            )
        if not self.sets_alike:
            off = ", ".join(f"set {s.sample_id} x{s.ratio:.2f}" for s in self.departing)
            return (
                f"{ratio}, but {len(self.departing)} of {len(self.sets)} sets run more than {TOLERANCE[0]}-"
                f"{TOLERANCE[1]}x off that factor ({off}): the sets' costs relative to each other have changed, so "
                "this is other hardware or a differently loaded machine and plans the model ranks may rank "
                f"otherwise here; collect a profile here ({_FIXES}) before trusting predictions of this machine"
            )
        return f"{ratio}: the traces still describe this machine"

    def to_dict(self) -> dict:
        return {
            "median_ratio": self.median_ratio,
            "ratio_range": list(self.ratio_range),
            "holds": self.holds,
            "tolerance": list(TOLERANCE),
            "traced_device": self.traced_device,
            "this_device": self.this_device,
            "traced_cpu": self.traced_cpu,
            "this_cpu": self.this_cpu,
            "same_device": self.same_device,
            "sets_alike": self.sets_alike,
            "departing_sets": [s.sample_id for s in self.departing],
            "max_departing_share": MAX_DEPARTING_SHARE,
            "sets": [
                {"id": s.sample_id, "tables": s.tables, "then_ms": s.then_ms, "now_ms": s.now_ms, "ratio": s.ratio}
                for s in self.sets
            ],
        }


def check_drift(traces: TraceSet, samples: int = 12, rounds: int = 3, seed: int = 0) -> Drift:
    """Re-measure ``samples`` seeded sets of ``traces`` in ``rounds`` interleaved rounds."""
    sets = traces.sets()
    if not sets:
        raise InputError(
            "traces",
            "the traces hold no table sets (only single tables)",
            "pass a trace file from `autoshard bench collect` with --samples > 0",
        )
    chosen = [sets[i] for i in np.random.default_rng(seed).choice(len(sets), min(samples, len(sets)), replace=False)]
    config = traces.bench_config()
    now: dict[int, list[float]] = {s.id: [] for s in chosen}
    for round_ in range(rounds):
        for sample in chosen:
            at = replace(config, batch_size=sample.batch_size)
            now[sample.id].append(measure(sample.tables, at, seed=round_).total.median)
    return Drift(
        tuple(SetDrift(s.id, len(s.tables), s.cost_ms, statistics.median(now[s.id])) for s in chosen),
        traces.profile.device_name,
        device_name(config.device),
        traces.profile.cpu,
        cpu_model(config.device),
    )

"""Trace files: append-only JSON lines, plain (``.jsonl``) or gzip-compressed (``.jsonl.gz``; each
line is sync-flushed, so a killed writer leaves every finished line readable).

Line 1 is the header: the device profile, the benchmark settings, the collection plan and every
pool table. Each further line is one measurement of one table set in one pass::

  {"type": "sample", "id": 17, "pass": 0, "kind": "set", "split": "train",
   "tables": ["syn0_0012", ...], "fwd": {"median": .., "iqr": .., "n": ..}, "bwd": {..}, "total": {..}}

A line may carry ``"batch": 8192``, the batch size it ran at (collections that draw a batch size
per sample); without it, the header's benchmark batch size.

A sample is measured once per pass; passes are minutes apart, so the median over passes is a
label robust to the machine's drift. A line cut short by a kill is dropped on reading.
"""

from __future__ import annotations

import gzip
import json
import statistics
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.types import Table
from autoshard.core.workload_file import table_from_dict, table_to_dict
from cost_model.profile import DeviceProfile, ExecutionMode
from cost_model.traces.records import BenchConfig, Measurement, Stats

TRACE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Sample:
    """One table set, with its measurement in every pass collected so far."""

    id: int
    kind: str  # "single" (one pool table alone), "set" (random) or "plan" (a device set of a plan)
    split: str  # "train" or "test": which pool its tables come from
    tables: tuple[Table, ...]
    passes: tuple[Measurement, ...]
    batch_size: int  # what it ran at
    plans: tuple[tuple[str, str, int], ...] = ()  # for "plan": every (task, planner, device) that holds it

    @property
    def cost_ms(self) -> float:
        """The label: median over passes of each pass's median total time."""
        return statistics.median(m.total.median for m in self.passes)

    @property
    def pass_spread(self) -> float:
        """(max - min) / median over passes: how much the same set varies across time."""
        values = [m.total.median for m in self.passes]
        return (max(values) - min(values)) / statistics.median(values)


@dataclass(frozen=True, slots=True)
class TraceSet:
    header: dict[str, Any]
    profile: DeviceProfile
    batch_size: int  # the header's benchmark batch size; each sample records its own
    samples: tuple[Sample, ...]

    @property
    def singles(self) -> dict[str, Sample]:
        """Each pool table alone: its single-table sample."""
        return {s.tables[0].name: s for s in self.samples if s.kind == "single"}

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The distinct batch sizes the samples ran at, sorted."""
        return tuple(sorted({s.batch_size for s in self.samples})) or (self.batch_size,)

    def sets(self, split: str | None = None) -> list[Sample]:
        return [s for s in self.samples if s.kind == "set" and (split is None or s.split == split)]

    def bench_config(self) -> BenchConfig:
        """The benchmark settings these traces were measured with (on this machine's CPU)."""
        b = self.header["bench"]
        return BenchConfig(
            int(b["batch_size"]),
            int(b["warmups"]),
            int(b["repeats"]),
            "cpu",
            ExecutionMode(b["mode"]),
            int(b["threads"]),
            int(b["row_cap_bytes"]),
        )


def _open(path: Path, mode: str):
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


_TORN_GZIP = (EOFError, gzip.BadGzipFile, zlib.error)  # a gzip stream cut short by a kill


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Parsed lines; a last line cut short by a kill is skipped. A file that is not a trace file
    (a folder, not text, lines that are not JSON objects) is an ``InputError``."""

    def not_traces(why: str) -> InputError:
        return InputError(
            "traces", f"{path} is not a trace file ({why})", "pass a file written by `autoshard bench collect`"
        )

    if path.is_dir():
        raise not_traces("a folder")
    with _open(path, "r") as f:
        try:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn write: at most the sample in flight is lost
                if not isinstance(record, dict):
                    raise not_traces(f"line {number} is not a JSON object")
                yield record
        except _TORN_GZIP:
            return
        except UnicodeDecodeError:
            raise not_traces("not UTF-8 text") from None


def read_header(path: Path) -> dict[str, Any] | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    for line in iter_lines(path):
        if line.get("type") == "header":
            return line
        break
    raise InputError(
        "traces", f"{path} does not start with a trace header", "pass a file written by `autoshard bench collect`"
    )


def has_header(path: Path, header: dict[str, Any]) -> bool:
    """Whether ``path`` already holds traces with this header (False: missing or empty);
    traces with another header are an error, so that a resume never mixes settings."""
    existing = read_header(path)
    if existing is not None and existing != header:
        raise InputError(
            "--out",
            f"{path} was collected with other settings ({_differences(existing, header)})",
            "use a new --out file, or the same options as before to resume",
        )
    return existing is not None


def _differences(before: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str:
    """The settings two headers differ in, as ``key: then -> now`` (tables only counted)."""
    out = []
    for key in sorted(set(before) | set(now)):
        a, b = before.get(key), now.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out.append(_differences(a, b, f"{prefix}{key}."))
        elif key == "tables":
            out.append(f"{prefix}tables: {len(a or ())} then, {len(b or ())} now (another pool)")
        else:
            out.append(f"{prefix}{key}: {a!r} then, {b!r} now")
    return "; ".join(o for o in out if o)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    return {"fwd": m.forward.to_dict(), "bwd": m.backward.to_dict(), "total": m.total.to_dict()}


def measurement_from_dict(d: dict[str, Any]) -> Measurement:
    return Measurement(Stats.from_dict(d["fwd"]), Stats.from_dict(d["bwd"]), Stats.from_dict(d["total"]))


def header_tables(header: dict[str, Any]) -> dict[str, Table]:
    return {d["name"]: table_from_dict({k: v for k, v in d.items() if k != "split"}) for d in header["tables"]}


def make_header(
    profile: DeviceProfile, bench: dict[str, Any], plan: dict[str, Any], tables: list[tuple[Table, str]]
) -> dict[str, Any]:
    header = {
        "type": "header",
        "version": TRACE_VERSION,
        "profile": profile.to_dict(),
        "bench": bench,
        "plan": plan,
        "tables": [{**table_to_dict(t), "split": split} for t, split in tables],
    }
    return json.loads(json.dumps(header))  # as it will read back, so headers compare equal


def read_traces(path: str | Path, calibrated: bool = True) -> TraceSet:
    """Load a trace file; samples keep every pass, ordered by id. A file with a ``calibration``
    line (``cost_model.traces.calibration``) has every timing divided by its factor, unless
    ``calibrated`` is False (the raw measurements)."""
    path = Path(path)
    if not path.exists():
        raise InputError("traces", f"no such trace file: {path}", "run `autoshard bench collect` first")
    header = read_header(path)
    if header is None:
        raise InputError("traces", f"{path} is empty", "collect traces into it first")
    if header.get("version") != TRACE_VERSION:
        raise InputError(
            "traces",
            f"trace version {header.get('version')} is not {TRACE_VERSION}",
            "re-collect the traces with this version of autoshard",
        )
    try:
        return _trace_set(path, header, calibrated)
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # a record without what traces hold
        raise InputError(
            "traces",
            f"{path} holds a malformed record ({type(error).__name__}: {error})",
            "pass a file written by `autoshard bench collect`",
        ) from None


def _trace_set(path: Path, header: dict[str, Any], calibrated: bool) -> TraceSet:
    tables = header_tables(header)
    default_batch = int(header["bench"]["batch_size"])
    grouped: dict[int, tuple[dict[str, Any], list[Measurement]]] = {}
    factor = 1.0
    for line in iter_lines(path):
        if line.get("type") == "calibration" and calibrated:
            factor = float(line["factor"])
        if line.get("type") != "sample":
            continue
        first, passes = grouped.setdefault(line["id"], (line, []))
        passes.append(measurement_from_dict(line))
    if factor != 1.0:
        grouped = {i: (first, [_scaled(m, 1 / factor) for m in ms]) for i, (first, ms) in grouped.items()}
    samples = tuple(
        Sample(
            i,
            first["kind"],
            first["split"],
            tuple(tables[n] for n in first["tables"]),
            tuple(ms),
            int(first.get("batch", default_batch)),
            tuple((str(t), str(p), int(d)) for t, p, d in first.get("plans", ())),
        )
        for i, (first, ms) in sorted(grouped.items())
    )
    return TraceSet(header, DeviceProfile.from_dict(header["profile"]), default_batch, samples)


def _scaled(m: Measurement, by: float) -> Measurement:
    scale = lambda s: Stats(s.median * by, s.iqr * by, s.n)  # noqa: E731
    return Measurement(scale(m.forward), scale(m.backward), scale(m.total))


def merge_traces(parts: list[TraceSet]) -> TraceSet:
    """Several trace files of one profile as one (the first one's header; sample ids renumbered in
    order; every sample keeps its batch size): random sets plus plan sets, for training and evaluation."""
    first = parts[0]
    for part in parts[1:]:
        if part.profile.id != first.profile.id:
            raise InputError(
                "traces",
                f"traces of profile {part.profile.id} cannot join traces of {first.profile.id}",
                "pass trace files of one device profile",
            )
    samples = [s for part in parts for s in part.samples]
    return TraceSet(
        first.header,
        first.profile,
        first.batch_size,
        tuple(Sample(i, s.kind, s.split, s.tables, s.passes, s.batch_size, s.plans) for i, s in enumerate(samples)),
    )


def _temporary(path: Path) -> Path:
    """A sibling to write before an atomic rename; keeps the suffix, so ``.gz`` stays compressed."""
    return path.with_name(f".{path.stem}.tmp{path.suffix}")


def write_trace(path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Write a whole trace file at once (through a temporary file, so a kill leaves the old one)."""
    tmp = _temporary(path)
    with _open(tmp, "w") as f:
        f.write(json.dumps(header) + "\n")
        for record in records:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    tmp.replace(path)


def measured_passes(path: Path, header: dict[str, Any]) -> set[tuple[int, int]]:
    """The (sample id, pass) pairs ``path`` already holds under ``header`` (none for a missing
    file or one of other settings): what a resumed collection skips. A complete file, even a
    calibrated one, is then left alone rather than opened for writing."""
    if not has_header(path, header):
        return set()
    return {(l["id"], l["pass"]) for l in iter_lines(path) if l.get("type") == "sample"}


class TraceWriter:
    """Appends sample lines, flushed one by one, so a kill loses at most the sample in flight."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        if has_header(path, header):
            if any(line.get("type") == "calibration" for line in iter_lines(path)):
                raise InputError(
                    "out",
                    f"{path} is calibrated (`autoshard bench calibrate`): its factor belongs to "
                    "the measurements already in it",
                    "collect into a new --out file",
                )
            _drop_torn_tail(path)
        else:
            write_trace(path, header, [])
        self._file = _open(path, "a")

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline (and, in a ``.gz`` file, a gzip
    stream left without its end)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    if path.suffix != ".gz":
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            path.write_bytes(data[: data.rfind(b"\n") + 1])
        return
    chunks, whole = [], True
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read1(1 << 16):
                chunks.append(chunk)
    except _TORN_GZIP:
        whole = False
    data = b"".join(chunks)
    if not whole or not data.endswith(b"\n"):
        tmp = _temporary(path)
        with gzip.open(tmp, "wb") as f:
            f.write(data[: data.rfind(b"\n") + 1])
        tmp.replace(path)

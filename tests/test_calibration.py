"""Calibration of a trace file measured on a drifted machine: the factor is measured on the
file's small sets against the profile's model, stored in the file, and divides every timing."""

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.errors import InputError
from cost_model.calibration import estimate_calibration, write_calibration
from cost_model.traces import TraceWriter, read_header, read_traces

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "traces" / "cpu-amd-epyc-fbgemm_tbe-t1.fp16-rowwise.jsonl.gz"
MODEL = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"


def _copy(tmp_path: Path, name: str, times: float = 1.0) -> Path:
    """The shipped file's header and raw samples (no calibration), every timing times ``times``."""
    out = tmp_path / name
    with gzip.open(TRACES, "rt") as src, gzip.open(out, "wt") as dst:
        for line in src:
            record = json.loads(line)
            if record.get("type") == "calibration":
                continue
            if record.get("type") == "sample":
                for part in ("fwd", "bwd", "total"):
                    record[part] = {**record[part], "median": record[part]["median"] * times,
                                    "iqr": record[part]["iqr"] * times}
            dst.write(json.dumps(record) + "\n")
    return out


def test_the_factor_divides_every_timing_and_follows_the_drift(tmp_path, shipped_model):
    plain, slow = _copy(tmp_path, "plain.jsonl.gz"), _copy(tmp_path, "slow.jsonl.gz", times=2.0)
    raw = read_traces(plain)
    first = estimate_calibration(plain, shipped_model, "shipped")
    second = estimate_calibration(slow, shipped_model, "shipped")
    assert second.factor == pytest.approx(2 * first.factor, rel=1e-4)  # twice as slow: twice the factor
    assert first.anchors == sum(len(s.tables) <= 2 for s in raw.samples) >= 10
    write_calibration(plain, first)
    write_calibration(slow, second)
    calibrated, calibrated_slow = read_traces(plain), read_traces(slow)
    for a, b, c in zip(raw.samples, calibrated.samples, calibrated_slow.samples):
        assert b.cost_ms == pytest.approx(a.cost_ms / first.factor, rel=1e-4)
        assert c.cost_ms == pytest.approx(b.cost_ms, rel=1e-4)  # both drifts land on one scale
    assert read_traces(plain, calibrated=False).samples[0].cost_ms == pytest.approx(raw.samples[0].cost_ms)
    write_calibration(plain, estimate_calibration(plain, shipped_model, "shipped"))  # again: from the raw timings
    assert read_traces(plain).samples[0].cost_ms == pytest.approx(calibrated.samples[0].cost_ms, rel=1e-6)


def test_too_few_anchors_and_resuming_a_calibrated_file_are_refused(tmp_path, shipped_model):
    path = _copy(tmp_path, "t.jsonl.gz")
    with pytest.raises(InputError, match="max_tables"):
        estimate_calibration(path, shipped_model, "shipped", max_tables=0)
    write_calibration(path, estimate_calibration(path, shipped_model, "shipped"))
    with pytest.raises(InputError, match="calibrated"):
        TraceWriter(path, read_header(path))


def test_the_cli_calibrates_in_place_and_names_a_missing_file(tmp_path):
    path = _copy(tmp_path, "t.jsonl.gz")
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "calibrate", "--traces", str(path), "--model", str(MODEL), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["factor"] > 0
    assert any(json.loads(line).get("type") == "calibration" for line in gzip.open(path, "rt"))
    missing = runner.invoke(app, ["bench", "calibrate", "--traces", str(tmp_path / "none.jsonl.gz"), "--model", str(MODEL)])
    assert missing.exit_code == 2 and "--traces" in missing.output

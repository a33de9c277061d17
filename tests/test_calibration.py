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


def test_a_complete_calibrated_collection_is_left_alone_and_an_incomplete_one_refused(tmp_path):
    """Re-running a collection whose file is complete measures nothing and opens nothing, even
    after calibration (so scripts/profile_machine.sh can be run again); adding measurements to a
    calibrated file is still refused, since its factor belongs to the measurements in it."""
    from cost_model.bench import BenchConfig
    from cost_model.calibration import Calibration
    from cost_model.collect import CollectConfig, collect
    from cost_model.profile import ExecutionMode
    from autoshard.synthetic import PoolConfig
    from cost_model.traces import iter_lines, write_trace

    config = CollectConfig(bench=BenchConfig(batch_size=32, warmups=1, repeats=2, mode=ExecutionMode.EMBEDDING_BAG,
                                             row_cap_bytes=2**20),
                           pool=PoolConfig(size=4), samples=2, max_tables=2)
    out = tmp_path / "t.jsonl"
    assert collect(config, out) > 0
    write_calibration(out, Calibration(1.25, 10, (1.1, 1.4), 2, "a model"))
    before = out.read_bytes()
    assert collect(config, out) == 0 and out.read_bytes() == before
    lines = list(iter_lines(out))
    write_trace(out, lines[0], lines[1:-1])  # one measurement short
    with pytest.raises(InputError, match="calibrated"):
        collect(config, out)

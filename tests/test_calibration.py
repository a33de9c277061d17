"""Calibration of a trace file measured on a drifted machine: the factor is measured on the
file's small sets against the profile's model, stored in the file, and divides every timing."""

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError
from cost_model.traces.calibration import estimate_calibration, write_calibration
from cost_model.traces.store import TraceWriter, read_header, read_traces

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
                    record[part] = {
                        **record[part],
                        "median": record[part]["median"] * times,
                        "iqr": record[part]["iqr"] * times,
                    }
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
    missing = runner.invoke(
        app, ["bench", "calibrate", "--traces", str(tmp_path / "none.jsonl.gz"), "--model", str(MODEL)]
    )
    assert missing.exit_code == 2 and "--traces" in missing.output


def test_a_complete_calibrated_collection_is_left_alone_and_an_incomplete_one_refused(tmp_path):
    """Re-running a collection whose file is complete measures nothing and opens nothing, even
    after calibration (so scripts/profile_machine.sh can be run again); adding measurements to a
    calibrated file is still refused, since its factor belongs to the measurements in it."""
    from autoshard.core.synthetic import PoolConfig
    from cost_model.bench.collect import CollectConfig, collect
    from cost_model.profile import ExecutionMode
    from cost_model.traces.calibration import Calibration
    from cost_model.traces.records import BenchConfig
    from cost_model.traces.store import iter_lines, write_trace

    config = CollectConfig(
        bench=BenchConfig(batch_size=32, warmups=1, repeats=2, mode=ExecutionMode.EMBEDDING_BAG, row_cap_bytes=2**20),
        pool=PoolConfig(size=4),
        samples=2,
        max_tables=2,
    )
    out = tmp_path / "t.jsonl"
    assert collect(config, out) > 0
    write_calibration(out, Calibration(1.25, 10, (1.1, 1.4), 2, "a model"))
    before = out.read_bytes()
    assert collect(config, out) == 0 and out.read_bytes() == before
    lines = list(iter_lines(out))
    write_trace(out, lines[0], lines[1:-1])  # one measurement short
    with pytest.raises(InputError, match="calibrated"):
        collect(config, out)


def _drift(ratios, cpu=None, alike=True, same=True) -> dict:
    """A `bench drift --json` report whose re-measured sets ran ``ratios`` x their traced time."""
    return {
        "median_ratio": sorted(ratios)[len(ratios) // 2],
        "this_cpu": cpu,
        "sets_alike": alike,
        "same_device": same,
        "sets": [{"id": i, "ratio": r} for i, r in enumerate(ratios)],
    }


def test_drift_checks_beside_a_collection_give_its_factor_and_mismatched_ones_are_refused(tmp_path):
    from cost_model.traces.calibration import calibration_from_drift

    path = _copy(tmp_path, "heavy.jsonl.gz")
    raw = read_traces(path)
    checks = [("before", _drift([0.6, 0.7, 0.8, 0.65, 0.75, 0.7])), ("after", _drift([0.5, 0.7, 0.72, 0.68, 0.9, 0.7]))]
    calibration = calibration_from_drift(path, checks)
    assert calibration.factor == pytest.approx(0.7) and calibration.anchors == 12  # the median over both checks
    assert calibration.model == "bench drift: before, after"
    write_calibration(path, calibration)
    for a, b in zip(raw.samples, read_traces(path).samples):
        assert b.cost_ms == pytest.approx(a.cost_ms / 0.7, rel=1e-4)  # measured fast: put back on the profile's scale
    for bad, words in (
        (_drift([0.7] * 12, cpu="AuthenticAMD family 26 model 2"), "another machine"),
        (_drift([0.7] * 12, alike=False), "relative costs"),
        (_drift([0.7] * 4), "too few"),
        ({"median_ratio": 0.7}, "not a report"),
    ):
        with pytest.raises(InputError, match=words) as error:
            calibration_from_drift(path, [("check", bad)])
        assert error.value.field == "--drift"


def test_the_cli_takes_either_a_model_or_drift_checks(tmp_path):
    path = _copy(tmp_path, "t.jsonl.gz")
    check = tmp_path / "drift.json"
    check.write_text(json.dumps(_drift([0.8, 0.9, 1.0, 0.85, 0.95, 0.9, 0.9, 0.88, 0.92, 0.9])))
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "calibrate", "--traces", str(path), "--drift", str(check), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["factor"] == pytest.approx(0.9)
    for args in ([], ["--model", str(MODEL), "--drift", str(check)]):
        neither = runner.invoke(app, ["bench", "calibrate", "--traces", str(path), *args])
        assert neither.exit_code != 0 and "--model" in neither.output and "Traceback" not in neither.output
    missing = runner.invoke(app, ["bench", "calibrate", "--traces", str(path), "--drift", str(tmp_path / "no.json")])
    assert missing.exit_code != 0 and "--drift" in missing.output

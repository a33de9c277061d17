"""`autoshard bench drift`: traces whose labels this machine no longer reproduces are reported, and
the command fails; the re-measured sets are the traces' own, with their benchmark settings."""

import json
import re

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.synthetic import PoolConfig
from cost_model.bench.collect import CollectConfig, collect
from cost_model.bench.drift import Drift, SetDrift, check_drift
from cost_model.profile import ExecutionMode
from cost_model.traces.records import BenchConfig
from cost_model.traces.store import iter_lines, read_traces, write_trace

BENCH = BenchConfig(batch_size=32, warmups=1, repeats=3, mode=ExecutionMode.EMBEDDING_BAG, row_cap_bytes=2**20)


def _traces(tmp_path, scale: float):
    """Real traces of a few small sets, their labels multiplied by ``scale`` (as if measured on
    a machine ``scale`` times slower)."""
    out = tmp_path / "t.jsonl"
    collect(CollectConfig(bench=BENCH, pool=PoolConfig(size=6), samples=4, max_tables=3, singles=False), out)
    lines = list(iter_lines(out))
    for line in lines[1:]:
        for part in ("fwd", "bwd", "total"):
            line[part]["median"] *= scale
    write_trace(out, lines[0], lines[1:])
    return out


def test_drift_remeasures_the_traces_sets_with_their_settings(tmp_path):
    traces = read_traces(_traces(tmp_path, 1.0))
    assert traces.bench_config() == BENCH
    drift = check_drift(traces, samples=2, rounds=1)
    assert len(drift.sets) == 2 and {s.sample_id for s in drift.sets} <= {s.id for s in traces.sets()}
    assert all(s.now_ms > 0 and s.then_ms > 0 for s in drift.sets)


def test_each_set_is_remeasured_at_the_batch_size_it_was_measured_at(tmp_path, monkeypatch):
    import cost_model.bench.drift as drift_module

    out = tmp_path / "batches.jsonl"
    collect(
        CollectConfig(
            bench=BENCH, pool=PoolConfig(size=6), samples=6, max_tables=3, singles=False, batch_sizes=(16, 64)
        ),
        out,
    )
    traces = read_traces(out)
    seen: dict[tuple[str, ...], int] = {}
    real = drift_module.measure

    def recording(tables, config, seed=0):  # the real benchmark, noting the batch size it ran at
        seen[tuple(t.name for t in tables)] = config.batch_size
        return real(tables, config, seed=seed)

    monkeypatch.setattr(drift_module, "measure", recording)
    drift = check_drift(traces, samples=6, rounds=1)
    batches = {tuple(t.name for t in s.tables): s.batch_size for s in traces.sets()}
    assert {batches[k] for k in seen} == {16, 64} and all(seen[k] == batches[k] for k in seen)
    assert len(drift.sets) == 6


def test_traces_100x_slower_than_this_machine_fail_the_check(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")  # in process: no re-exec with the allocator settings
    path = _traces(tmp_path, 100.0)
    result = CliRunner().invoke(
        app, ["bench", "drift", "--traces", str(path), "--samples", "2", "--rounds", "1", "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["holds"] is False and report["median_ratio"] < 0.1
    result = CliRunner().invoke(app, ["bench", "drift", "--traces", str(path), "--samples", "2", "--rounds", "1"])
    assert result.exit_code == 1 and "re-collect" in result.output


def test_traces_of_another_device_do_not_describe_this_machine(tmp_path, monkeypatch):
    """Right median, wrong hardware: traces whose header names another CPU fail the check, and
    the answer names both devices and says to collect a profile here."""
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")
    path = _traces(tmp_path, 1.0)
    lines = list(iter_lines(path))
    lines[0]["profile"]["device_name"] = "Another CPU 9000"
    write_trace(path, lines[0], lines[1:])
    drift = check_drift(read_traces(path), samples=2, rounds=1)
    assert drift.traced_device == "Another CPU 9000" and drift.this_device != drift.traced_device
    assert not drift.same_device and not drift.holds
    result = CliRunner().invoke(
        app, ["bench", "drift", "--traces", str(path), "--samples", "2", "--rounds", "1", "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["same_device"] is False and report["traced_device"] == "Another CPU 9000"
    result = CliRunner().invoke(app, ["bench", "drift", "--traces", str(path), "--samples", "2", "--rounds", "1"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "Another CPU 9000" in text and drift.this_device in text
    assert "collect a profile here" in text


def test_the_same_cpu_name_of_another_generation_does_not_describe_this_machine(tmp_path):
    """A VM names two generations alike ("AMD EPYC"): where the traces record the CPU's family
    and model, another family or model fails the check as another name does."""
    path = _traces(tmp_path, 1.0)
    traces = read_traces(path)
    if traces.profile.cpu is None:
        pytest.skip("this machine's /proc/cpuinfo has no vendor, family and model")
    lines = list(iter_lines(path))
    lines[0]["profile"]["cpu"] = "GenuineIntel family 6 model 1"
    write_trace(path, lines[0], lines[1:])
    drift = check_drift(read_traces(path), samples=2, rounds=1)
    assert drift.traced_device == drift.this_device and drift.this_cpu == traces.profile.cpu
    assert not drift.same_device and not drift.holds
    assert "GenuineIntel family 6 model 1" in drift.verdict() and traces.profile.cpu in drift.verdict()


def test_traces_recorded_before_the_cpu_model_was_compare_by_name(tmp_path):
    path = _traces(tmp_path, 1.0)
    lines = list(iter_lines(path))
    lines[0]["profile"].pop("cpu", None)
    write_trace(path, lines[0], lines[1:])
    traces = read_traces(path)
    assert traces.profile.cpu is None and not re.search(r"-f\d+m\d+-", traces.profile.id)
    assert check_drift(traces, samples=2, rounds=1).same_device


def test_traces_of_this_device_measured_alike_hold(tmp_path):
    traces = read_traces(_traces(tmp_path, 1.0))
    drift = check_drift(traces, samples=2, rounds=1)
    assert drift.same_device and drift.this_device == traces.profile.device_name
    assert drift.holds == (0.8 <= drift.median_ratio <= 1.25 and drift.sets_alike)


def _drift_of(ratios, cpu="AuthenticAMD family 25 model 17"):
    sets = tuple(SetDrift(i, 1 + i % 10, 10.0, 10.0 * r) for i, r in enumerate(ratios))
    return Drift(sets, "AMD EPYC", "AMD EPYC", None, cpu)  # traces recorded before the family and model: by name


def test_a_uniform_factor_with_noise_holds():
    """The profile's own host: the sets' ratios spread about 1.2x round the median (30 checks on
    it spanned at most 1.5x), each set within 0.8-1.25x of the median factor."""
    drift = _drift_of([0.90, 0.93, 0.87, 0.95, 0.91, 1.02, 0.88, 0.97, 0.92, 0.85, 1.05, 0.89])
    assert drift.same_device and drift.within_tolerance and drift.sets_alike and drift.holds
    assert drift.departing == () and "still describe" in drift.verdict()


def test_sets_whose_relative_costs_changed_do_not_describe_this_machine():
    """Measured 2026-12-03 on an "AMD EPYC" of family 25 model 17 with the first EPYC profile's
    traces, which predate the family and model: a median of 0.91x, but 0.52-1.50x set by set (the
    same sets at 0.50-1.69x in a run before). The name matches, so only the sets can tell."""
    ratios = [0.83, 0.81, 0.94, 0.85, 0.88, 0.87, 1.14, 1.08, 1.03, 1.11, 0.82, 1.25, 1.01, 1.50, 0.69, 0.52]
    drift = _drift_of(ratios)
    assert drift.same_device and drift.within_tolerance
    assert {s.sample_id for s in drift.departing} == {6, 11, 13, 14, 15}  # x1.14, x1.25, x1.50, x0.69, x0.52 of 0.91
    assert not drift.sets_alike and not drift.holds
    text = drift.verdict()
    assert "5 of 16 sets" in text and "set 15 x0.52" in text and "collect a profile here" in text
    report = drift.to_dict()
    assert (
        report["holds"] is False and report["sets_alike"] is False and report["departing_sets"] == [6, 11, 13, 14, 15]
    )


def test_up_to_a_quarter_of_the_sets_may_depart():
    """Noise moves a set now and then (a busy minute): 3 of 12 off the factor holds, 4 of 12 not."""
    base = [1.0] * 12
    assert _drift_of([1.4, 1.4, 0.7] + base[3:]).holds
    assert not _drift_of([1.4, 1.4, 0.7, 0.7] + base[4:]).holds


def test_a_missing_trace_file_names_the_option(tmp_path):
    result = CliRunner().invoke(app, ["bench", "drift", "--traces", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "--traces" in result.output

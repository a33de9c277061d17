"""Real microbenchmarks, trace files, resumable and distributed collection."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from autoshard.core.types import Table
from cost_model.bench.harness import measure
from cost_model.bench.indices import bag_lengths, zipf_ranks
from cost_model.profile import ExecutionMode, fbgemm_available
from cost_model.traces.records import BenchConfig
from cost_model.traces.store import read_traces
from cost_model.traces.summary import summarize
from tests.conftest import autoshard_cmd

TINY = (Table("a", 50, 8, 2.0, 0.0), Table("b", 200, 16, 3.5, 1.2))


@pytest.mark.parametrize("mode", [ExecutionMode.EMBEDDING_BAG, ExecutionMode.FBGEMM_TBE])
def test_two_tiny_tables_give_positive_finite_times(mode):
    if mode is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        pytest.skip("fbgemm-gpu-cpu not installed")
    m = measure(TINY, BenchConfig(batch_size=64, warmups=1, repeats=3, mode=mode))
    for stats in (m.forward, m.backward, m.total):
        assert stats.n == 3 and math.isfinite(stats.median) and stats.median > 0
    assert m.total.median >= m.forward.median


def test_embedding_bag_update_really_trains():
    """The benchmarked step is a real forward + backward + sparse SGD update of the touched rows."""
    import torch

    from cost_model.bench.harness import _build_embedding_bags, make_batch

    config = BenchConfig(batch_size=16, mode=ExecutionMode.EMBEDDING_BAG)
    forward, backward = _build_embedding_bags(TINY[:1], config)
    indices, offsets = make_batch(TINY[:1], config, np.random.default_rng(0))
    before = forward(indices, offsets).detach().clone()
    backward(forward(indices, offsets))
    assert not torch.allclose(before, forward(indices, offsets))


def test_zipf_and_bag_lengths():
    rng = np.random.default_rng(0)
    uniform, skewed = zipf_ranks(1000, 0.0, 50_000, rng), zipf_ranks(1000, 1.2, 50_000, rng)
    assert uniform.min() >= 0 and uniform.max() < 1000 and skewed.max() < 1000
    assert len(np.unique(skewed)) < len(np.unique(uniform))
    assert (skewed == 0).mean() > 10 * (uniform == 0).mean()
    lengths = bag_lengths(1000, 2.3)
    assert lengths.min() == 2 and lengths.max() == 3 and abs(lengths.mean() - 2.3) < 1e-9
    assert (bag_lengths(10, 0.2) == [0, 0, 0, 0, 1, 0, 0, 0, 0, 1]).all()  # below 1: empty bags, mean 0.2


def _collect(out, args, extra=(), **kwargs):
    return subprocess.run(
        [*autoshard_cmd(), "bench", "collect", "--out", str(out), *args, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def test_collect_round_trips_and_summarizes(tmp_path, tiny_collect_args):
    out = tmp_path / "t.jsonl"
    result = _collect(out, tiny_collect_args, ["--samples", "6", "--passes", "2"])
    assert result.returncode == 0, result.stderr
    traces = read_traces(out)
    assert len(traces.samples) == 8 + 6 and all(len(s.passes) == 2 for s in traces.samples)
    assert len(traces.singles) == 8 and all(s.cost_ms > 0 for s in traces.singles.values())
    assert traces.header["bench"]["malloc_settings"] is True
    summary = summarize(traces).to_dict()
    for key in ("mean", "p10", "p90"):
        assert summary["non_additivity"][key] > 0
    assert summary["samples"] == 14 and summary["profile"]["mode"] == "embedding_bag"
    cli = subprocess.run(
        [*autoshard_cmd(), "bench", "summary", str(out), "--json"], capture_output=True, text=True, timeout=120
    )
    assert json.loads(cli.stdout)["samples"] == 14
    # gzip-compressed traces read back the same
    import gzip

    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as f:
        f.write(out.read_text())
    assert read_traces(tmp_path / "t.jsonl.gz") == traces


def test_a_summary_of_traces_without_singles_says_so_instead_of_none():
    """The adapted profile's traces measure sets only (``--no-singles``): non-additivity has no
    figure, and the table says why rather than printing ``None (None-None)``."""
    from typer.testing import CliRunner

    from autoshard.cli import app
    from tests.conftest import ROOT

    path = ROOT / "data" / "traces" / "cpu-amd-epyc-f25m17-fbgemm_tbe-t1.jsonl.gz"
    result = CliRunner().invoke(app, ["bench", "summary", str(path)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "None" not in said and "no set whose tables were all" in said


def test_killed_collection_resumes_and_keeps_every_completed_sample(tmp_path, tiny_collect_args):
    out = tmp_path / "t.jsonl"
    args = [*tiny_collect_args, "--samples", "400", "--max-tables", "2"]
    proc = subprocess.Popen(
        [*autoshard_cmd(), "bench", "collect", "--out", str(out), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 30):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = [json.loads(l) for l in out.read_text().splitlines()[1:] if l.endswith("}")]
    assert 29 <= len(kept) < 408
    # a torn last line, as a kill mid-write leaves it
    with open(out, "a") as f:
        f.write('{"type": "sample", "id": 99')
    assert _collect(out, args).returncode == 0
    traces = read_traces(out)
    assert sorted(s.id for s in traces.samples) == list(range(408))
    lines = [json.loads(l) for l in out.read_text().splitlines()[1:]]
    assert lines[: len(kept)] == kept  # nothing completed was lost or redone
    assert len(lines) == 408


def test_resume_refuses_other_settings(tmp_path, tiny_collect_args):
    out = tmp_path / "t.jsonl"
    assert _collect(out, tiny_collect_args, ["--samples", "1"]).returncode == 0
    result = _collect(out, tiny_collect_args, ["--samples", "1", "--seed", "5"])
    assert result.returncode == 2 and "other settings" in result.stderr and "Traceback" not in result.stderr
    assert "seed: 0 then, 5 now" in " ".join(result.stderr.split())  # which setting, named


def test_torchrun_gathers_samples_from_two_ranks(tmp_path, tiny_collect_args):
    out = tmp_path / "t.jsonl"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(29500 + os.getpid() % 1000),
        "-m",
        "autoshard",
    ]
    result = subprocess.run(
        [*torchrun, "bench", "collect", "--out", str(out), *tiny_collect_args, "--samples", "6"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    traces = read_traces(out)
    assert sorted(s.id for s in traces.samples) == list(range(14))
    assert not list(tmp_path.glob("*.part"))
    single = tmp_path / "single.jsonl"
    assert _collect(single, tiny_collect_args, ["--samples", "6"]).returncode == 0
    assert [s.tables for s in read_traces(single).samples] == [s.tables for s in traces.samples]


def test_min_total_ms_repeats_a_short_step_until_it_is_timed_long_enough():
    """The measured evaluation's ``min_total_ms``: a tiny set's step is repeated beyond the
    configured repeats, until the timed steps add up to the asked time (capped)."""
    from cost_model.bench.harness import MAX_REPEATS, BenchConfig, measure
    from cost_model.profile import ExecutionMode

    config = BenchConfig(batch_size=64, warmups=1, repeats=3, mode=ExecutionMode.EMBEDDING_BAG)
    tables = [Table("tiny", 100, 8, 1.0)]
    plain = measure(tables, config)
    longer = measure(tables, config, min_total_ms=20 * 3 * plain.total.median)
    assert plain.total.n == 3
    assert min(MAX_REPEATS, 20) <= longer.total.n <= MAX_REPEATS

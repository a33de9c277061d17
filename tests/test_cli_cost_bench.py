"""`autoshard cost add-ranges` (record a model's trained ranges) and `autoshard bench collect
--precisions / --optimizers` (traces over other precisions and optimizers), cheaply: add-ranges on
a copy of the shipped model with the shipped traces, collect with a tiny FBGEMM TBE config."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from tests.conftest import ROOT, autoshard_cmd

SHIPPED = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"
TRACES = ROOT / "data" / "traces" / "cpu-amd-epyc-fbgemm_tbe-t1.jsonl.gz"
SMALL_TRACES = ROOT / "tests" / "fixtures" / "cpu_traces_small.jsonl.gz"


def _stripped_copy(folder):
    """The shipped model as an older checkpoint: same weights, no trained ranges."""
    from cost_model.checkpoint import load_cost_model, save_checkpoint

    model = load_cost_model(SHIPPED)
    shipped_ranges, model.ranges = model.ranges, None
    save_checkpoint(model, folder, model.metrics)
    return shipped_ranges


def test_add_ranges_records_the_training_split_and_keeps_predictions(tmp_path):
    from cost_model.checkpoint import load_cost_model
    from tests.service_support import synthetic_workload

    shipped_ranges = _stripped_copy(tmp_path)
    before = load_cost_model(tmp_path)
    assert before.ranges is None and before.check_workload(synthetic_workload(5))  # "records no trained ranges"
    sources = json.loads((SHIPPED / "metrics.json").read_text())["traces"]
    files = [
        arg
        for source in (sources if isinstance(sources, list) else [sources])
        for arg in ("--traces", str(ROOT / source))
    ]
    result = CliRunner().invoke(app, ["cost", "add-ranges", "--model", str(tmp_path), *files, "--json"])
    assert result.exit_code == 0, result.output
    after = load_cost_model(tmp_path)
    assert after.ranges == shipped_ranges  # the shipped checkpoint's ranges: training split of seed 0
    assert after.ranges.bytes_per_element == (2, 4) and after.ranges.optimizers == ("rowwise_adagrad", "sgd")
    workload = synthetic_workload(12)
    assert after.check_workload(workload) == ()
    assert after.predict_many([workload.tables[:4], workload.tables[4:]], 2048) == pytest.approx(
        before.predict_many([workload.tables[:4], workload.tables[4:]], 2048), rel=1e-6
    )


def test_add_ranges_errors_name_the_option(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["cost", "add-ranges", "--model", str(tmp_path), "--traces", str(TRACES)])
    assert result.exit_code == 2 and "--model" in result.output and "cost_model.pt" in result.output
    shutil.copyfile(SHIPPED / "cost_model.pt", tmp_path / "cost_model.pt")
    result = runner.invoke(
        app, ["cost", "add-ranges", "--model", str(tmp_path), "--traces", str(tmp_path / "none.jsonl")]
    )
    assert result.exit_code == 2 and "--traces" in result.output
    other = tmp_path / "other.jsonl.gz"  # the small fixture, as if measured on another device
    lines = gzip.decompress(SMALL_TRACES.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    header["profile"].update(device_name="Other CPU", id="cpu-other-cpu-fbgemm_tbe-t1")
    other.write_bytes(gzip.compress("\n".join([json.dumps(header), *lines[1:]]).encode() + b"\n"))
    result = runner.invoke(app, ["cost", "add-ranges", "--model", str(tmp_path), "--traces", str(other)])
    assert result.exit_code == 2 and "device profile" in result.output, result.output
    assert (tmp_path / "cost_model.pt").read_bytes() == (SHIPPED / "cost_model.pt").read_bytes()  # untouched


TINY_TBE = [
    "--device",
    "cpu",
    "--mode",
    "fbgemm_tbe",
    "--pool-size",
    "8",
    "--max-tables",
    "3",
    "--batch-sizes",
    "64",
    "--warmups",
    "1",
    "--repeats",
    "3",
    "--row-cap-mb",
    "1",
    "--samples",
    "2",
    "--passes",
    "1",
]


def _collect(out, *extra):
    return subprocess.run(
        [*autoshard_cmd(), "bench", "collect", "--out", str(out), *extra], capture_output=True, text=True, timeout=300
    )


def test_collect_draws_precisions_and_optimizers(tmp_path):
    pytest.importorskip("fbgemm_gpu")
    from cost_model.traces.store import read_traces

    out = tmp_path / "mixed.jsonl"
    # seed 2: this 8-table pool draws both of each (seed 0 draws fp16 for all 8)
    result = _collect(out, *TINY_TBE, "--seed", "2", "--precisions", "4,2", "--optimizers", "sgd,rowwise_adagrad")
    assert result.returncode == 0, result.stderr
    traces = read_traces(out)
    tables = {t for s in traces.samples for t in s.tables}
    assert {t.bytes_per_element for t in tables} == {4, 2}
    assert {t.optimizer.value for t in tables} == {"sgd", "rowwise_adagrad"}
    assert traces.header["plan"]["precisions"] == [4, 2]
    assert traces.header["plan"]["optimizers"] == ["sgd", "rowwise_adagrad"]
    assert len(traces.samples) == 8 + 2 and all(s.cost_ms > 0 for s in traces.samples)


def test_collect_draws_a_batch_size_per_sample_and_the_model_trains_on_them(tmp_path):
    pytest.importorskip("fbgemm_gpu")
    from cost_model.dataset import make_splits
    from cost_model.traces.store import read_traces
    from cost_model.train import TrainConfig, train_cost_model

    out = tmp_path / "batches.jsonl"
    result = _collect(out, *TINY_TBE, "--samples", "20", "--batch-sizes", "64,512")
    assert result.returncode == 0, result.stderr
    traces = read_traces(out)
    assert traces.header["plan"]["batch_sizes"] == [64, 512]
    assert {s.batch_size for s in traces.samples} == {64, 512}
    lines = [json.loads(l) for l in out.read_text().splitlines()[1:]]
    assert all(l["batch"] in (64, 512) for l in lines)
    again = _collect(out, *TINY_TBE, "--samples", "20", "--batch-sizes", "64,512")  # resumes: nothing left to measure
    assert again.returncode == 0 and "measured 0 samples" in again.stdout + again.stderr
    model = train_cost_model(
        make_splits(traces), traces.profile, traces.header["bench"]["row_cap_bytes"], TrainConfig(max_epochs=2)
    ).model
    assert model.ranges.batch_size == (64, 512)


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--batch-sizes", "512,0", "'0'"),
        ("--batch-sizes", "512,x", "'x'"),
        ("--batch-sizes", "512,512", "twice"),
        ("--precisions", "4,3", "'3'"),
        ("--precisions", "fp16", "'fp16'"),
        ("--precisions", "4,,2", "comma"),
        ("--precisions", "4,4", "twice"),
        ("--optimizers", "sgd,adam", "'adam'"),
        ("--optimizers", "", "comma"),
    ],
)
def test_collect_refuses_bad_precisions_and_optimizers(tmp_path, option, value, words):
    result = CliRunner().invoke(app, ["bench", "collect", "--out", str(tmp_path / "t.jsonl"), option, value])
    assert result.exit_code == 2, result.output
    assert option in result.output and words in result.output
    assert not (tmp_path / "t.jsonl").exists()


def test_collect_says_which_mode_can_measure_fp16(tmp_path):
    result = _collect(
        tmp_path / "t.jsonl", *[a if a != "fbgemm_tbe" else "embedding_bag" for a in TINY_TBE], "--precisions", "2"
    )
    assert result.returncode == 2 and "bytes_per_element" in result.stderr and "fbgemm_tbe" in result.stderr


def test_files_that_are_not_traces_exit_2_naming_them(tmp_path):
    """A header line that is not an object, a binary file, a folder: `bench summary` and `cost
    eval` name the file and what is wrong, never a traceback."""
    junk, binary = tmp_path / "junk.jsonl", tmp_path / "binary.jsonl"
    junk.write_text("[1]\n")
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    runner = CliRunner()
    for path, expected in ((junk, "line 1 is not a JSON object"), (binary, "not UTF-8 text"), (tmp_path, "a folder")):
        for args in (["bench", "summary", str(path)], ["cost", "eval", "--model", str(SHIPPED), "--traces", str(path)]):
            result = runner.invoke(app, args)
            said = " ".join(result.output.split())
            assert result.exit_code == 2 and expected in said and "Traceback" not in said, (args, result.output)


def test_linear_beyond_is_saved_and_reprices_only_sets_past_it(tmp_path, monkeypatch):
    """`autoshard cost linear-beyond` re-saves the checkpoint: sets up to the limit keep their
    prices, a larger one costs n / limit times a limit-sized set with its mean and max; metrics.json
    records it, its held-out evaluation measured again; without --tables the limit is the largest
    trained set again."""
    from autoshard.core.synthetic import PoolConfig, generate_pool
    from cost_model.checkpoint import load_cost_model

    monkeypatch.chdir(ROOT)  # metrics.json names its traces from the repository root
    shutil.copytree(SHIPPED, tmp_path, dirs_exist_ok=True)
    before = load_cost_model(tmp_path)
    held_out = json.loads((SHIPPED / "metrics.json").read_text())["evaluation"]["unseen_sets"]["estimators"]["neural"]
    assert before.linear_beyond is None and before.size_limit == before.max_set_size
    pool = generate_pool(PoolConfig(size=300, seed=5)).all
    small, limit_sized = pool[:6], pool[:12]
    result = CliRunner().invoke(app, ["cost", "linear-beyond", "--model", str(tmp_path), "--tables", "12"])
    assert result.exit_code == 0, result.output
    after = load_cost_model(tmp_path)
    assert after.linear_beyond == after.size_limit == 12 and after.max_set_size == before.max_set_size
    assert after.predict_many([small, limit_sized], 2048) == pytest.approx(
        before.predict_many([small, limit_sized], 2048), rel=1e-6
    )
    one, three = after.predict_many([limit_sized, limit_sized * 3], 2048)  # same mean and max code, 3x the size
    assert three == pytest.approx(3 * one, rel=1e-4) and three != pytest.approx(before.predict(limit_sized * 3, 2048))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    recorded = metrics["linear_beyond"]
    assert recorded["tables"] == recorded["size_limit"] == 12 and "--tables 12" in recorded["command"]
    again = metrics["evaluation"]["unseen_sets"]["estimators"]["neural"]
    assert again["samples"] == held_out["samples"] and again["mape"] != held_out["mape"]  # its sets of > 12 repriced
    result = CliRunner().invoke(app, ["cost", "linear-beyond", "--model", str(tmp_path)])
    assert result.exit_code == 0 and load_cost_model(tmp_path).size_limit == before.max_set_size


def test_linear_beyond_errors_name_the_option(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["cost", "linear-beyond", "--model", str(tmp_path), "--tables", "32"])
    assert result.exit_code == 2 and "--model" in result.output and "cost_model.pt" in result.output
    result = runner.invoke(app, ["cost", "linear-beyond", "--model", str(tmp_path), "--tables", "0"])
    assert result.exit_code == 2 and "--tables" in result.output


def test_collect_keeps_each_set_within_the_set_memory_budget(tmp_path):
    pytest.importorskip("fbgemm_gpu")
    from cost_model.bench.collect import physical_rows
    from cost_model.traces.store import read_traces

    out = tmp_path / "budget.jsonl"
    budget_gb = 1.5 / 1024  # 1.5 MiB: at most a table or two of the 1 MiB row cap
    result = _collect(out, *TINY_TBE, "--no-singles", "--set-memory-gb", str(budget_gb))
    assert result.returncode == 0, result.stderr
    traces = read_traces(out)
    assert traces.header["plan"]["set_memory_gb"] == pytest.approx(budget_gb)
    cap = traces.header["bench"]["row_cap_bytes"]
    for sample in traces.samples:
        used = sum(physical_rows(t, cap) * t.embedding_dim * t.bytes_per_element for t in sample.tables)
        assert 0 < used <= budget_gb * 1024**3
    refused = CliRunner().invoke(app, ["bench", "collect", "--out", str(tmp_path / "t.jsonl"), "--set-memory-gb", "0"])
    assert refused.exit_code == 2 and "--set-memory-gb" in refused.output and "> 0" in refused.output

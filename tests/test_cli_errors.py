"""Bad input at the CLI, as two audits tried it: each a message naming the option and a fix,
exit code 2, never a traceback."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from autoshard.cli import app

runner = CliRunner()


def said(result) -> str:
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "criteo_kaggle", "--devices", "2", "--memory-gb", "4", "--model", "none", "--seed", "-1"],
        ["policy", "eval", "--seed", "-1"],
    ],
)
def test_a_negative_seed_is_refused_by_its_option(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--seed" in said(result) and "Traceback" not in said(result)


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "criteo_kaggle", "--devices", "2", "--memory-gb", "4", "--departure-margin", "1.5"],
        ["plan", "criteo_kaggle", "--devices", "2", "--memory-gb", "4", "--departure-margin", "-0.1"],
    ],
)
def test_a_departure_margin_outside_0_to_0_99_is_refused_by_its_option(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--departure-margin" in said(result) and "Traceback" not in said(result)


def test_the_departure_margins_help_gives_the_planners_default():
    from autoshard.cli.support import DEPARTURE_MARGIN_HELP
    from autoshard.planners.context import DEPARTURE_MARGIN

    assert f"default {DEPARTURE_MARGIN:g}" in DEPARTURE_MARGIN_HELP


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize(
    "args",
    [
        ["bench", "collect", "--device", "cuda", "--out", "unused.jsonl"],
        ["bench", "comm", "--device", "cuda", "--out", "unused.json"],
    ],
)
def test_cuda_asked_where_there_is_none_names_the_option(args, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")  # no re-exec of pytest for the allocator settings
    result = runner.invoke(app, [*args[:-1], str(tmp_path / args[-1])])
    assert result.exit_code == 2 and "--device: cuda asked" in said(result) and "--device cpu" in said(result)
    assert not list(tmp_path.iterdir())


def test_a_profile_that_is_a_file_or_missing_names_profile(tmp_path):
    (tmp_path / "afile").write_text("x")
    for path, expected in (
        (tmp_path / "afile", "is a file, not a profile folder"),
        (tmp_path / "none", "no cost model"),
    ):
        result = runner.invoke(app, ["policy", "eval", "--profile", str(path)])
        assert result.exit_code == 2 and "error: --profile:" in said(result) and str(path) in said(result)
        assert expected in said(result) and "--model" not in said(result)


def test_an_output_folder_that_is_a_file_says_so(tmp_path):
    (tmp_path / "afile").write_text("x")
    result = runner.invoke(
        app,
        [
            "cost",
            "train",
            "--traces",
            "tests/fixtures/cpu_traces_small.jsonl.gz",
            "--out",
            str(tmp_path / "afile"),
            "--max-epochs",
            "1",
        ],
    )
    assert result.exit_code == 2 and "is a file where a folder is needed" in said(result)


def test_serve_with_fail_fast_and_no_models_exits_2_with_the_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSHARD_MODEL_DIR", str(tmp_path))  # restored after: serve sets it for its workers
    result = runner.invoke(
        app, ["serve", "--model-dir", str(tmp_path), "--port", "0"], env={"AUTOSHARD_FAIL_FAST": "1"}
    )
    assert result.exit_code == 2 and "refusing to start (AUTOSHARD_FAIL_FAST)" in said(result)
    bad = runner.invoke(app, ["serve", "--port", "0"], env={"AUTOSHARD_POOL_SIZE": "abc"})
    assert bad.exit_code == 2 and "AUTOSHARD_POOL_SIZE" in said(bad) and "'abc'" in said(bad)


@pytest.mark.parametrize("option, value", [("--devices", "100000000000000000000"), ("--memory-gb", "1e15")])
def test_a_topology_past_its_bounds_is_refused_by_its_option(option, value):
    """Once a traceback (memory past int64) or a process killed for memory (10^20 devices)."""
    args = {"--devices": "4", "--memory-gb": "8", option: value}
    result = runner.invoke(app, ["plan", "criteo_kaggle", "--model", "none", *(x for kv in args.items() for x in kv)])
    assert result.exit_code == 2 and option in said(result) and "Traceback" not in said(result)


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("autoshard ")


def test_collect_names_the_option_and_the_range(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")
    result = runner.invoke(
        app,
        [
            "bench",
            "collect",
            "--out",
            str(tmp_path / "t.jsonl"),
            "--large-samples",
            "2",
            "--large-max-tables",
            "2",
            "--max-tables",
            "5",
        ],
    )
    assert result.exit_code == 2 and "--large-max-tables: must be above --max-tables (5), got 2" in said(result)
    assert not (tmp_path / "t.jsonl").exists()


def test_an_error_located_at_an_item_of_its_field_names_the_field_once():
    from autoshard.core.errors import InputError

    assert (
        str(InputError("planners", "unknown planner 'x'", "use one of a, b", where="planners[1]"))
        == "planners[1]: unknown planner 'x' (fix: use one of a, b)"
    )
    assert (
        str(InputError("embedding_dim", "must be >= 1", where="tables[3] 'x'"))
        == "tables[3] 'x': embedding_dim: must be >= 1"
    )


def test_only_the_autoshard_command_is_re_executed_for_the_allocator_settings(monkeypatch, capsys):
    """A command that measures re-executes itself with the allocator settings, but only when the
    process is the ``autoshard`` command: run in-process (here, pytest), re-executing would start
    the host over, so it warns and goes on."""
    import os
    import sys

    import cost_model.profile
    from autoshard.cli import support
    from cost_model.process import is_autoshard_command

    monkeypatch.setattr(cost_model.profile, "malloc_settings_active", lambda: False)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "AUTOSHARD_NO_REEXEC"})
    executed = []
    monkeypatch.setattr(os, "execv", lambda exe, argv: executed.append(argv))
    monkeypatch.setattr(sys, "argv", ["/venv/lib/python3.11/site-packages/pytest/__main__.py", "tests"])
    support.ensure_malloc_settings()
    assert executed == [] and "allocator settings are off" in " ".join(capsys.readouterr().err.split())
    for command in (["/venv/bin/autoshard", "plan", "w.json", "--verify"], ["/src/autoshard/__main__.py", "bench"]):
        monkeypatch.setattr(sys, "argv", command)
        support.ensure_malloc_settings()
        assert executed[-1] == [sys.executable, *command]
        assert os.environ["MALLOC_MMAP_MAX_"] == "0"
    assert not is_autoshard_command([]) and not is_autoshard_command(["-"])

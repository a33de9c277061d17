"""Plan-aware traces end to end, on a tiny real profile (EmbeddingBag on this CPU): anchors ->
a model -> `bench plans` (device sets of plans, measured, resumable) -> `cost eval` with split (c)."""

import json

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.synthetic import PoolConfig
from autoshard.core.types import DeviceSet, Table
from cost_model.bench.collect import CollectConfig, collect
from cost_model.bench.plan_traces import distinct_sets
from cost_model.profile import ExecutionMode
from cost_model.traces.records import BenchConfig
from cost_model.traces.store import merge_traces, read_traces


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """Anchor traces of a 40-table pool and a model trained on them (a few epochs)."""
    folder = tmp_path_factory.mktemp("profile")
    anchors = folder / "anchors.jsonl"
    bench = BenchConfig(batch_size=32, warmups=1, repeats=3, mode=ExecutionMode.EMBEDDING_BAG, row_cap_bytes=2**20)
    collect(CollectConfig(bench=bench, pool=PoolConfig(size=40), samples=60, max_tables=6, passes=2), anchors)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOSHARD_NO_REEXEC", "1")
        result = CliRunner().invoke(
            app, ["cost", "train", "--traces", str(anchors), "--out", str(folder / "model"), "--max-epochs", "3"]
        )
    assert result.exit_code == 0, result.output
    return anchors, folder / "model"


@pytest.fixture(autouse=True)
def no_reexec(monkeypatch):
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")


def test_distinct_sets_are_measured_once_with_every_plan_that_holds_them():
    a, b, c = Table("a", 10, 4), Table("b", 10, 4), Table("c", 10, 4)
    found = distinct_sets(
        [
            DeviceSet(("t", "p", 0), (a, b), 64),
            DeviceSet(("t", "q", 1), (b, a), 64),
            DeviceSet(("t", "q", 0), (c,), 64),
            DeviceSet(("u", "p", 0), (a, b), 128),
        ]
    )
    assert found == [
        ((a, b), 64, [("t", "p", 0), ("t", "q", 1)]),
        ((c,), 64, [("t", "q", 0)]),
        ((a, b), 128, [("u", "p", 0)]),
    ]


def test_plan_sets_become_split_c_and_resume(profile, tmp_path):
    anchors, model = profile
    plans = tmp_path / "plans.jsonl"
    args = [
        "bench",
        "plans",
        "--traces",
        str(anchors),
        "--model",
        str(model),
        "--out",
        str(plans),
        "--tasks",
        "3",
        "--passes",
        "2",
        "--planners",
        "round_robin,size_greedy,lookup_greedy,cost_greedy",
        "--devices",
        "2,4",
        "--batch-sizes",
        "16,32",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    traces = read_traces(plans)
    assert traces.samples and all(s.kind == "plan" and s.split == "test" and len(s.passes) == 2 for s in traces.samples)
    assert {s.batch_size for s in traces.samples} <= {16, 32}  # each set at its task's batch size
    held = {p for s in traces.samples for p in s.plans}
    assert {planner for _, planner, _ in held} == {"round_robin", "size_greedy", "lookup_greedy", "cost_greedy"}
    test_tables = {d["name"] for d in read_traces(anchors).header["tables"] if d["split"] == "test"}
    assert all(t.name.split("[")[0] in test_tables for s in traces.samples for t in s.tables)  # unseen tables
    # (or shards of them: cost_greedy may row-shard or replicate a table)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "measured 0 set passes" in again.output
    result = CliRunner().invoke(
        app, ["cost", "eval", "--model", str(model), "--traces", str(anchors), "--traces", str(plans), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["plan_sets"]["estimators"]["neural"]["samples"] == len(traces.samples)
    choices = report["plan_sets"]["plan_choices"]
    assert choices["tasks"] == 3 and choices["plans"] == 12 and choices["pairs"] >= 0


def test_traces_of_another_profile_do_not_merge(profile, tmp_path):
    from dataclasses import replace

    from autoshard.core.errors import InputError

    anchors = read_traces(profile[0])
    other = replace(anchors, profile=replace(anchors.profile, device_name="Other CPU"))
    with pytest.raises(InputError, match="cannot join"):
        merge_traces([anchors, other])


def test_plan_sets_are_refused_on_another_machine_and_old_anchors_say_why():
    """Plan sets are labels beside the anchors': measured on another machine (or mode) they would
    mix two machines' costs. Anchors recorded before traces named the CPU's family and model
    cannot tell whether a machine is theirs, and the error says so instead of naming a machine."""
    from dataclasses import replace

    from autoshard.core.errors import InputError
    from cost_model.bench.plan_traces import check_same_machine
    from cost_model.profile import DeviceProfile

    here = DeviceProfile(
        "cpu", "AMD EPYC", ExecutionMode.FBGEMM_TBE, 1, "2.13.0", "1.8.0", "AuthenticAMD family 25 model 1"
    )
    check_same_machine(here, replace(here, torch_version="2.12.0"))  # the same machine: no error
    with pytest.raises(InputError, match="the anchor traces are cpu-amd-epyc-f26m2-fbgemm_tbe-t1") as other:
        check_same_machine(here, replace(here, cpu="AuthenticAMD family 26 model 2"))
    with pytest.raises(InputError, match="the anchor traces are cpu-amd-epyc-f25m1-fbgemm_tbe-t1"):
        check_same_machine(replace(here, cpu="AuthenticAMD family 26 model 2"), here)
    with pytest.raises(InputError, match="before traces named the CPU's family and model") as old:
        check_same_machine(here, replace(here, cpu=None))
    assert other.value.field == old.value.field == "traces" and "bench collect" in old.value.fix
    with pytest.raises(InputError, match="the anchor traces are cpu-other-cpu-fbgemm_tbe-t1"):
        check_same_machine(here, replace(here, device_name="Other CPU", cpu=None))


def test_traces_at_other_batch_sizes_merge_and_keep_each_samples_batch(profile):
    from dataclasses import replace

    anchors = read_traces(profile[0])
    doubled = replace(
        anchors,
        batch_size=anchors.batch_size * 2,
        samples=tuple(replace(s, batch_size=s.batch_size * 2) for s in anchors.samples),
    )
    merged = merge_traces([anchors, doubled])
    assert [s.batch_size for s in merged.samples] == (
        [anchors.batch_size] * len(anchors.samples) + [anchors.batch_size * 2] * len(anchors.samples)
    )
    assert merged.batch_sizes == (anchors.batch_size, anchors.batch_size * 2)

"""The neural cost model: invariance, training on real traces, checkpoints, the estimator report."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError, ModelError
from autoshard.core.synthetic import PoolConfig, generate_pool
from autoshard.core.types import CostModel
from cost_model.accuracy import evaluate_all, mape
from cost_model.checkpoint import load_cost_model, save_checkpoint
from cost_model.dataset import make_splits
from cost_model.estimators import SumOfSingles
from cost_model.features import NUM_FEATURES
from cost_model.network import NetworkConfig, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile, ExecutionMode
from cost_model.traces.store import read_traces
from cost_model.train import TrainConfig, train_cost_model

FIXTURE = Path(__file__).parent / "fixtures" / "cpu_traces_small.jsonl.gz"
PROFILE = DeviceProfile("cpu", "test cpu", ExecutionMode.FBGEMM_TBE, 1, "2.13.0", "1.8.0")
TABLES = generate_pool(PoolConfig(size=300, seed=7)).all


def untrained_model(seed: int = 0) -> NeuralCostModel:
    torch.manual_seed(seed)
    return NeuralCostModel(
        SetCostNetwork(NetworkConfig()), torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), PROFILE, 128 * 2**20, 2048
    )


@pytest.fixture(scope="module")
def trained():
    traces = read_traces(FIXTURE)
    splits = make_splits(traces, seed=0)
    result = train_cost_model(
        splits, traces.profile, traces.header["bench"]["row_cap_bytes"], TrainConfig(max_epochs=60, patience=20)
    )
    return traces, splits, result


def test_model_is_permutation_invariant_and_takes_1_to_200_tables():
    model = untrained_model()
    assert isinstance(model, CostModel)
    tables = list(TABLES[:12])
    a = model.predict(tables, 2048)
    b = model.predict(tables[::-1], 2048)
    assert a == pytest.approx(b, rel=1e-5)
    shuffled = [tables[i] for i in np.random.default_rng(0).permutation(12)]
    assert model.predict(shuffled, 2048) == pytest.approx(a, rel=1e-5)
    one, many = model.predict(tables[:1], 2048), model.predict(list(TABLES[:200]), 2048)
    assert np.isfinite([one, many]).all() and one > 0 and many > 0
    assert model.predict([], 2048) == 0.0


def test_batched_prediction_equals_one_by_one():
    model = untrained_model()
    sets = [list(TABLES[i : i + k]) for i, k in [(0, 1), (5, 7), (40, 20), (100, 3)]]
    batched = model.predict_many(sets, 2048)
    assert batched == pytest.approx([model.predict(s, 2048) for s in sets], rel=1e-5)


def test_training_on_real_traces_learns_and_beats_sum_of_singles(trained):
    traces, splits, result = trained
    assert result.best_validation_loss < 0.5 * result.first_validation_loss
    held_out = splits.unseen_sets + splits.unseen_tables
    true = np.array([s.total_ms for s in held_out])
    neural = mape(np.array(result.model.predict_many([s.tables for s in held_out], traces.batch_size)), true)
    additive = mape(
        SumOfSingles(traces.singles).predict([s.tables for s in held_out], [s.batch_size for s in held_out]), true
    )
    assert neural < additive


def test_save_load_round_trips_exact_predictions(tmp_path, trained):
    traces, _, result = trained
    save_checkpoint(result.model, tmp_path)
    loaded = load_cost_model(tmp_path, expected_profile=traces.profile.id)
    sets = [list(TABLES[i : i + 9]) for i in range(0, 90, 9)]
    assert loaded.predict_many(sets, 2048) == result.model.predict_many(sets, 2048)


def test_corrupt_missing_and_mismatched_checkpoints_are_refused(tmp_path):
    save_checkpoint(untrained_model(), tmp_path / "ok")
    with pytest.raises(ModelError, match="trained on device profile"):
        load_cost_model(tmp_path / "ok", expected_profile="cuda-h100-fbgemm_tbe-t1")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "cost_model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="not a readable cost-model checkpoint"):
        load_cost_model(tmp_path / "bad")
    with pytest.raises(ModelError, match="no cost model"):
        load_cost_model(tmp_path / "missing")
    data = torch.load(tmp_path / "ok" / "cost_model.pt", weights_only=True)
    torch.save({**data, "format_version": 99}, tmp_path / "old.pt")
    with pytest.raises(ModelError, match="checkpoint format 99"):
        load_cost_model(tmp_path / "old.pt")
    torch.save({**data, "network_config": {**data["network_config"], "table_code": 7}}, tmp_path / "shape.pt")
    with pytest.raises(ModelError, match="does not match"):
        load_cost_model(tmp_path / "shape.pt")


def test_estimator_report_has_every_field(trained):
    traces, splits, result = trained
    report = evaluate_all(result.model, splits, traces).to_dict()
    for split in ("unseen_sets", "unseen_tables"):
        body = report[split]
        assert set(body["estimators"]) == {"sum_of_singles", "linear_aggregate", "bandwidth_analytical", "neural"}
        for s in body["estimators"].values():
            assert set(s) == {"mape", "spearman", "ranking_accuracy", "samples"}
            assert 0 <= s["mape"] and -1 <= s["spearman"] <= 1 and 0 <= s["ranking_accuracy"] <= 1
        assert {"pass_to_pass_mape", "passes"} <= set(body["noise_floor"])
        assert isinstance(body["neural_beats_all"], bool)


def test_cli_train_then_eval(tmp_path):
    runner = CliRunner()
    out = tmp_path / "model"
    result = runner.invoke(app, ["cost", "train", "--traces", str(FIXTURE), "--out", str(out), "--max-epochs", "5"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["command"].startswith("autoshard cost train") and metrics["train_seconds"] > 0
    assert (out / "train_log.csv").read_text().count("\n") == 6
    result = runner.invoke(app, ["cost", "eval", "--model", str(out), "--traces", str(FIXTURE), "--json"])
    assert result.exit_code == 0, result.output
    assert "unseen_tables" in json.loads(result.stdout)
    bad = runner.invoke(app, ["cost", "eval", "--model", str(tmp_path / "nope"), "--traces", str(FIXTURE)])
    assert bad.exit_code == 2 and "no cost model" in bad.output


def test_cli_trains_a_named_network_and_refuses_an_unknown_one(tmp_path):
    runner = CliRunner()
    out = tmp_path / "grouped"
    result = runner.invoke(
        app,
        [
            "cost",
            "train",
            "--traces",
            str(FIXTURE),
            "--out",
            str(out),
            "--max-epochs",
            "2",
            "--network",
            "narrow_grouped",
        ],
    )  # not a tuning candidate, trainable by name
    assert result.exit_code == 0, result.output
    network = json.loads((out / "metrics.json").read_text())["network"]
    assert network["grouped"] and network["table_code"] == 64
    for extra, says in (
        (["--network", "huge"], "unknown network 'huge'"),
        (["--network", "narrow", "--tune"], "both choose the network"),
    ):
        bad = runner.invoke(app, ["cost", "train", "--traces", str(FIXTURE), "--out", str(tmp_path / "x")] + extra)
        assert bad.exit_code == 2 and says in bad.output and "--network" in bad.output


def test_cli_tune_chooses_on_validation_and_eval_scores_a_fresh_pool(tmp_path):
    from cost_model.checkpoint import load_cost_model
    from cost_model.tune import GRID

    runner = CliRunner()
    out = tmp_path / "tuned"
    result = runner.invoke(
        app, ["cost", "train", "--traces", str(FIXTURE), "--out", str(out), "--max-epochs", "3", "--tune"]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    rows = metrics["tuning"]["candidates"]
    assert [r["name"] for r in rows] == [c.name for c in GRID]
    best = min(rows, key=lambda r: r["validation_mape"])
    close = [r for r in rows if r["validation_mape"] <= best["validation_mape"] + best["standard_error"] + 1e-4]
    chosen = next(r for r in rows if r["name"] == metrics["tuning"]["chosen"])
    assert chosen in close and chosen["parameters"] == min(r["parameters"] for r in close)  # one-standard-error rule
    assert metrics["network"] == chosen["network"] and metrics["learning_rate"] == chosen["learning_rate"]
    assert load_cost_model(out).network.config.table_code == chosen["network"]["table_code"]
    assert (out / "train_log.csv").read_text() == (out / "tuning" / f"{chosen['name']}.csv").read_text()
    result = runner.invoke(
        app, ["cost", "eval", "--model", str(out), "--traces", str(FIXTURE), "--fresh-pool", str(FIXTURE), "--json"]
    )
    assert result.exit_code == 0, result.output
    sets = sum(s.kind == "set" for s in read_traces(FIXTURE).samples)
    assert json.loads(result.stdout)["fresh_pool"]["estimators"]["neural"]["samples"] == sets


def test_incremental_edits_equal_rebuilt_sets():
    model = untrained_model(3)
    base = [list(TABLES[0:5]), list(TABLES[5:6]), [], list(TABLES[10:20])]
    edits, rebuilt = [], []
    for b, tables in enumerate(base):
        for r in [None, *range(len(tables))]:
            for add in (None, TABLES[250]):
                edits.append((b, r, add))
                rebuilt.append([t for i, t in enumerate(tables) if i != r] + ([add] if add else []))
    assert model.predict_edits(base, edits, 2048) == pytest.approx(model.predict_many(rebuilt, 2048), rel=1e-5)


def test_an_edit_scorer_prices_batches_as_predict_edits_prices_them_at_once():
    """Local search prices a state's moves, then its swaps' source sides, then their targets, on
    one scorer; an added table of the base sets (the same object) reuses their rows, another one
    is encoded: each batch costs what one ``predict_edits`` of every edit says."""
    from autoshard.core.costing import EditBatch

    model = untrained_model(3)
    base = [list(TABLES[0:5]), list(TABLES[5:6]), [], list(TABLES[10:20])]
    inside = [(0, 1, TABLES[12]), (3, 0, TABLES[1]), (2, None, TABLES[5]), (1, 0, None), (0, None, TABLES[0])]
    outside = [(0, 2, TABLES[250]), (2, None, TABLES[251]), (3, 4, None)]
    scorer = model.edit_scorer(base, 2048)
    at_once = model.predict_edits(base, inside + outside, 2048)
    in_batches = [*scorer.predict(EditBatch.of(inside)), *scorer.predict(outside)]
    assert in_batches == pytest.approx(at_once, rel=1e-6)
    assert scorer.positions(EditBatch.of(inside).added) is not None and scorer.positions([TABLES[250]]) is None


def test_the_per_table_caches_stay_bounded_and_price_as_a_fresh_model(monkeypatch):
    """A planning worker's caches outlive its requests: past ``CACHED_TABLES`` they start afresh,
    between calls and never during one (a call that needs more keeps them all for itself), and
    every price equals a fresh model's."""
    import cost_model.accumulator as accumulator

    monkeypatch.setattr(accumulator, "CACHED_TABLES", 20)
    torch.manual_seed(3)
    capped = NeuralCostModel(
        SetCostNetwork(NetworkConfig()),
        torch.zeros(NUM_FEATURES),
        torch.ones(NUM_FEATURES),
        PROFILE,
        128 * 2**20,
        2048,
        max_cached=20,
    )
    head = capped.split_head
    for start in range(0, 240, 8):  # 30 requests of 8 tables each, one after the other
        tables = list(TABLES[start : start + 8])
        fresh = untrained_model(3)
        edits = [(0, r, TABLES[start + 8]) for r in range(8)]
        assert capped.predict_edits([tables], edits, 2048) == pytest.approx(
            fresh.predict_edits([tables], edits, 2048), rel=1e-6
        )
        running, sets = capped.accumulator(2, 2048), [[], []]
        for k, table in enumerate(tables):
            assert running.costs_if_added(table) == pytest.approx(
                fresh.predict_many([s + [table] for s in sets], 2048), rel=1e-5
            )
            running.add(k % 2, table)
            sets[k % 2].append(table)
        assert len(head._row) <= 20 and len(capped._codes) <= 20 and len(capped.features._cache) <= 20
    many = list(TABLES[:60])  # one call past the cap: its rows stay put for the call
    edits = [(0, r, TABLES[100]) for r in range(0, 60, 7)]
    assert capped.predict_edits([many], edits, 2048) == pytest.approx(
        untrained_model(3).predict_edits([many], edits, 2048), rel=1e-6
    )


def test_expected_unique_rows_is_the_bounded_zipf_expectation():
    """Feature 8: E[distinct rows] = sum_i 1 - (1 - p_i)^n ~ sum_i 1 - exp(-n p_i), p_i ~ i^-a.
    Exact per rank up to 48 rows, rank buckets beyond (within 1% of the per-rank sum); a batch of
    tables of every size gives what each gives alone."""
    from cost_model.features import expected_unique_rows, expected_unique_rows_many

    def per_rank(rows: int, alpha: float, draws: float) -> float:
        p = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
        p /= p.sum()
        return float(-np.expm1(-draws * p).sum())

    assert expected_unique_rows(10, 0.0, 1e9) == pytest.approx(10.0)  # every row is drawn
    assert expected_unique_rows(1_000_000, 0.0, 1.0) == pytest.approx(1.0, rel=1e-3)  # one draw, one row
    cases = [
        (1, 0.0, 5.0),
        (48, 1.2, 100.0),
        (49, 0.5, 30.0),
        (5_000, 1.05, 8192.0),
        (200_000, 0.0, 40_960.0),
        (200_000, 2.0, 40_960.0),
    ]
    for rows, alpha, draws in cases:
        exact = per_rank(rows, alpha, draws)
        assert expected_unique_rows(rows, alpha, draws) == pytest.approx(exact, rel=1e-12 if rows <= 48 else 1e-2)
    together = expected_unique_rows_many(*(np.array(c) for c in zip(*cases)))
    assert together == pytest.approx([expected_unique_rows(*c) for c in cases], rel=1e-12)


def _other_machine(tmp_path: Path) -> Path:
    """The fixture's sets as another machine measured them: the same tables, but a set's cost
    depends on the machine set by set (here 0.6x for one table, rising 25% with each further
    table), as a family 25 EPYC measured the first EPYC's sets at 0.52-1.50x (docs/profiles.md)."""
    from cost_model.traces.store import iter_lines, write_trace

    lines = list(iter_lines(FIXTURE))
    header = {**lines[0], "profile": {**lines[0]["profile"], "device_name": "Other CPU", "cpu": None}}
    header["profile"].pop("id", None)
    for line in lines[1:]:
        if line.get("type") == "sample":
            factor = 0.6 * 1.25 ** (len(line["tables"]) - 1)
            for part in ("fwd", "bwd", "total"):
                line[part]["median"] *= factor
    out = tmp_path / "other.jsonl"
    write_trace(out, header, lines[1:])
    return out


def test_adapt_fine_tunes_a_model_to_another_machine(tmp_path, trained):
    """`autoshard cost adapt` starts from the given model (not from scratch) and learns the other
    machine's set-dependent costs: on that machine's held-out tables it beats the model it
    started from, even with the best single factor applied."""
    traces, splits, result = trained
    base = tmp_path / "base"
    save_checkpoint(result.model, base)
    (base / "policy.pt").write_bytes(b"policy")  # copied as is; the service loads it, not this test
    other = _other_machine(tmp_path)
    out = tmp_path / "adapted"
    run = CliRunner().invoke(
        app,
        [
            "cost",
            "adapt",
            "--model",
            str(base),
            "--traces",
            str(other),
            "--out",
            str(out),
        ],
    )
    assert run.exit_code == 0, run.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["adapted_from"]["profile"] == traces.profile.id and metrics["profile"]["device_name"] == "Other CPU"
    assert (out / "policy.pt").read_bytes() == b"policy"
    adapted = load_cost_model(out)
    assert adapted.network.config == result.model.network.config
    assert (
        adapted.ranges.rows[0] <= result.model.ranges.rows[0] and adapted.ranges.rows[1] >= result.model.ranges.rows[1]
    )
    held = make_splits(read_traces(other), seed=0).unseen_tables
    true = np.array([s.total_ms for s in held])
    before = np.array([result.model.predict(list(s.tables), s.batch_size) for s in held])
    after = np.array([adapted.predict(list(s.tables), s.batch_size) for s in held])
    factor = float(np.median(true / before))
    assert mape(after, true) < 0.5 * min(mape(before, true), mape(before * factor, true))  # 0.15 vs 0.44, 0.53


def test_adapting_starts_from_the_model():
    """Fine-tuning at a vanishing learning rate leaves the predictions where they were: the
    weights and the feature normalisation are the given model's."""
    traces = read_traces(FIXTURE)
    splits = make_splits(traces, seed=0)
    row_cap = traces.header["bench"]["row_cap_bytes"]
    base = train_cost_model(splits, traces.profile, row_cap, TrainConfig(max_epochs=3)).model
    same = train_cost_model(
        splits, traces.profile, row_cap, TrainConfig(max_epochs=1, learning_rate=1e-12), start_from=base
    ).model
    sets = [list(s.tables) for s in splits.unseen_tables[:10]]
    assert np.allclose([same.predict(s, 2048) for s in sets], [base.predict(s, 2048) for s in sets], rtol=1e-4)
    assert torch.equal(same.feature_mean, base.feature_mean) and torch.equal(same.feature_std, base.feature_std)


def test_adapting_needs_traces_at_the_models_row_cap():
    """Features depend on the row cap (rows past it are not benchmarked): traces measured at
    another cap than the model's would teach it another machine's answer to the same features."""
    traces = read_traces(FIXTURE)
    base = NeuralCostModel(
        SetCostNetwork(NetworkConfig()), torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), PROFILE, 2**20, 2048
    )
    with pytest.raises(InputError, match="row cap") as caught:
        train_cost_model(
            make_splits(traces, 0),
            traces.profile,
            traces.header["bench"]["row_cap_bytes"],
            TrainConfig(max_epochs=1),
            start_from=base,
        )
    assert "--row-cap-mb" in caught.value.fix


def test_adapt_names_a_missing_model(tmp_path):
    run = CliRunner().invoke(
        app,
        ["cost", "adapt", "--model", str(tmp_path / "none"), "--traces", str(FIXTURE), "--out", str(tmp_path / "out")],
    )
    assert run.exit_code == 2 and "--model" in run.output and "no cost_model.pt" in run.output


def test_adapt_refuses_to_overwrite_the_model_it_starts_from(tmp_path, trained):
    save_checkpoint(trained[2].model, tmp_path / "base")
    before = (tmp_path / "base" / "cost_model.pt").read_bytes()
    run = CliRunner().invoke(
        app,
        [
            "cost",
            "adapt",
            "--model",
            str(tmp_path / "base"),
            "--traces",
            str(FIXTURE),
            "--out",
            str(tmp_path / "base" / "."),
        ],
    )
    assert run.exit_code == 2 and "--out" in run.output and "overwrite" in run.output
    assert (tmp_path / "base" / "cost_model.pt").read_bytes() == before


def test_linear_beyond_measures_the_evaluation_again_on_the_models_own_split(tmp_path):
    """`cost train --seed` records its split seed; `cost linear-beyond` measures the held-out
    evaluation again on that split (not seed 0's), the limit applied."""
    from cost_model.accuracy import evaluate_all
    from cost_model.checkpoint import load_cost_model
    from cost_model.dataset import make_splits
    from cost_model.traces.store import read_traces

    runner = CliRunner()
    out = tmp_path / "model"
    result = runner.invoke(
        app, ["cost", "train", "--traces", str(FIXTURE), "--out", str(out), "--max-epochs", "2", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.json").read_text())["split_seed"] == 3
    result = runner.invoke(app, ["cost", "linear-beyond", "--model", str(out), "--tables", "2"])
    assert result.exit_code == 0, result.output
    data = read_traces(FIXTURE)
    expected = evaluate_all(load_cost_model(out), make_splits(data, 3), data).to_dict()
    assert json.loads((out / "metrics.json").read_text())["evaluation"] == json.loads(json.dumps(expected))

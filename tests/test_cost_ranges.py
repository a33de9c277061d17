"""Trained input ranges: computed from traces, stored in checkpoints, and the refuse/warn policy."""

from pathlib import Path

import pytest
import torch

from autoshard.core.errors import InputError
from autoshard.core.types import Optimizer, Table, Workload
from cost_model.checkpoint import load_cost_model, save_checkpoint
from cost_model.features import NUM_FEATURES
from cost_model.network import NetworkConfig, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile, ExecutionMode
from cost_model.ranges import TrainedRanges
from cost_model.train import feature_scale

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"
TRACES = ROOT / "data" / "traces" / "cpu-amd-epyc-fbgemm_tbe-t1.jsonl.gz"
PROFILE = DeviceProfile("cpu", "test cpu", ExecutionMode.FBGEMM_TBE, 1, "2.13.0", "1.8.0")
SETS = [(Table("a", 100, 8, 1.0, 0.0),), (Table("b", 5000, 64, 20.0, 1.2), Table("c", 10**6, 16, 3.5, 0.4))]
RANGES = TrainedRanges.of(SETS, [2048])


def model(ranges: TrainedRanges | None = RANGES) -> NeuralCostModel:
    torch.manual_seed(0)
    return NeuralCostModel(
        SetCostNetwork(NetworkConfig()),
        torch.zeros(NUM_FEATURES),
        torch.ones(NUM_FEATURES),
        PROFILE,
        128 * 2**20,
        2048,
        ranges=ranges,
    )


def test_ranges_span_the_training_sets_and_round_trip_as_plain_data(tmp_path):
    assert RANGES == TrainedRanges((2048, 2048), (1, 2), (100, 10**6), (8, 64), (1.0, 20.0), (0.0, 1.2), (4,), ("sgd",))
    data = RANGES.to_dict()
    torch.save(data, tmp_path / "r.pt")
    assert TrainedRanges.from_dict(torch.load(tmp_path / "r.pt", weights_only=True)) == RANGES
    with pytest.raises(ValueError):
        TrainedRanges.of([()], [2048])


def test_checkpoints_store_ranges_and_older_ones_load_without(tmp_path):
    save_checkpoint(model(), tmp_path / "with")
    assert load_cost_model(tmp_path / "with").ranges == RANGES
    save_checkpoint(model(None), tmp_path / "without")
    data = torch.load(tmp_path / "without" / "cost_model.pt", weights_only=True)
    del data["trained_ranges"]  # as saved before ranges existed
    torch.save(data, tmp_path / "old.pt")
    old = load_cost_model(tmp_path / "old.pt")
    assert old.ranges is None
    assert "no trained ranges" in old.check_workload(Workload(SETS[1]))[0]


def test_unseen_precision_is_refused_naming_table_field_range_and_fix():
    tables = (Table("ok", 100, 8), Table("half", 100, 8, bytes_per_element=2), Table("h2", 100, 8, bytes_per_element=2))
    with pytest.raises(InputError) as caught:
        model().check_workload(Workload(tables))
    error = caught.value
    assert error.where == "tables[1]" and error.field == "bytes_per_element"
    assert "'half'" in error.message and "2 (fp16)" in error.message and "4 (fp32)" in error.message
    assert "1 more table" in error.message
    assert "use bytes_per_element 4 (fp32)" in error.fix and "include 2 (fp16)" in error.fix


def test_unseen_optimizer_is_refused():
    tables = (Table("t", 100, 8), Table("ada", 100, 8, optimizer=Optimizer.ROWWISE_ADAGRAD))
    with pytest.raises(InputError, match="rowwise_adagrad") as caught:
        model().check_workload(Workload(tables))
    assert caught.value.where == "tables[1]" and caught.value.field == "optimizer" and "sgd" in caught.value.fix


def test_in_range_workload_gives_no_warning():
    assert model().check_workload(Workload(SETS[1]), max_tables_per_device=2) == ()


def test_extrapolation_warns_once_per_field():
    tables = (
        Table("t1", 100, 8, 1.0),
        Table("t5", 100, 8, 40.0),
        Table("t7", 100, 8, 80.0),
        Table("t9", 100, 8, 35.0),
        Table("tiny", 10, 128, 1.0, 2.0),
    )
    warnings = model().check_workload(Workload(tables, batch_size=512), max_tables_per_device=5)
    assert len(warnings) == 6, warnings
    assert "batch_size 512 is outside the trained range 2048" in warnings[0]
    assert "3 tables have pooling_factor above the trained max 20 (e.g. 't7': 80)" in warnings
    assert "1 table has num_embeddings below the trained min 100 (e.g. 'tiny': 10)" in warnings
    assert any("embedding_dim above the trained max 64" in w for w in warnings)
    assert any("zipf_alpha above the trained max 1.2 (e.g. 'tiny': 2)" in w for w in warnings)
    assert "beyond the largest trained set of 2" in warnings[-1]


def test_values_just_beyond_the_sampled_extremes_do_not_warn():
    near = (Table("n1", 70, 8, 29.0, 1.29), Table("n2", 1_400_000, 96, 1.0, 0.0))
    assert model().check_workload(Workload(near, batch_size=3072)) == ()
    assert len(model().check_workload(Workload(near, batch_size=3073))) == 1


def test_constant_features_divide_by_one():
    assert feature_scale(torch.tensor([1e-6, 0.0, 0.5])).tolist() == [1.0, 1.0, 0.5]


def test_training_records_the_ranges_of_its_training_split():
    from cost_model.dataset import make_splits
    from cost_model.traces.store import read_traces
    from cost_model.train import TrainConfig, train_cost_model

    traces = read_traces(ROOT / "tests" / "fixtures" / "cpu_traces_small.jsonl.gz")
    splits = make_splits(traces)
    result = train_cost_model(
        splits, traces.profile, traces.header["bench"]["row_cap_bytes"], TrainConfig(max_epochs=1)
    )
    assert result.model.ranges == TrainedRanges.of([s.tables for s in splits.train], [traces.batch_size])


def test_shipped_model_carries_the_ranges_of_its_training_traces():
    import json

    from cost_model.dataset import make_splits
    from cost_model.traces.store import merge_traces, read_traces

    shipped = load_cost_model(ROOT / "data" / "models" / "default")
    assert (ROOT / "data" / "models" / "default").resolve() == SHIPPED.resolve()
    sources = json.loads((SHIPPED / "metrics.json").read_text())["traces"]
    traces = merge_traces([read_traces(ROOT / s) for s in (sources if isinstance(sources, list) else [sources])])
    train = make_splits(traces).train
    assert shipped.ranges == TrainedRanges.of([s.tables for s in train], [s.batch_size for s in train])
    assert shipped.ranges.bytes_per_element == (2, 4) and shipped.ranges.optimizers == ("rowwise_adagrad", "sgd")
    assert shipped.ranges.tables_per_set[1] > 64 and shipped.ranges.batch_size == (512, 16384)  # the large sets train


def test_covers_is_the_trained_span_without_margins():
    assert all(RANGES.covers(t) for s in SETS for t in s)
    assert RANGES.covers(Table("mid", 2000, 32, 5.0, 0.8))
    assert not RANGES.covers(Table("few rows", 99, 32, 5.0, 0.8))  # warned only beyond 1.5x, not covered
    assert not RANGES.covers(Table("wide", 2000, 128, 5.0, 0.8))
    assert not RANGES.covers(Table("skewed", 2000, 32, 5.0, 1.3))
    assert not RANGES.covers(Table("fp16", 2000, 32, 5.0, 0.8, 2))
    assert not RANGES.covers(Table("adagrad", 2000, 32, 5.0, 0.8, 4, Optimizer.ROWWISE_ADAGRAD))

"""The grouped network (one price per TBE op, times an interaction factor): every path planners
use (whole sets, running sets, edited sets) gives the same answer, and a set of one op is priced
by the op head alone."""

import numpy as np
import pytest
import torch

from autoshard.core.types import Optimizer, Table
from cost_model.features import NUM_FEATURES, op_key
from cost_model.network import NetworkConfig, OpIndex, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile, ExecutionMode

PROFILE = DeviceProfile("cpu", "test cpu", ExecutionMode.FBGEMM_TBE, 1, "2.13.0", "1.8.0")
BATCH = 2048
KINDS = [(4, Optimizer.SGD), (2, Optimizer.SGD), (4, Optimizer.ROWWISE_ADAGRAD), (2, Optimizer.ROWWISE_ADAGRAD)]


@pytest.fixture(scope="module")
def model():
    """A grouped network with random weights, its interaction head's last layer included (it
    starts at zero, which would hide a wrong factor)."""
    torch.manual_seed(0)
    network = SetCostNetwork(
        NetworkConfig(table_hidden=32, table_code=16, head_hidden=32, dropout=0.0, grouped=True, interaction_hidden=16)
    )
    torch.nn.init.normal_(network.interaction[-1].weight, std=0.3)
    torch.nn.init.normal_(network.interaction[-1].bias, std=0.3)
    return NeuralCostModel(network, torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), PROFILE, 128 << 20, BATCH)


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(3)
    return [
        Table(
            f"t{i}",
            int(10 ** rng.uniform(2, 6)),
            int(rng.choice([16, 32, 64])),
            float(rng.uniform(1, 20)),
            float(rng.uniform(0, 1.2)),
            *KINDS[int(rng.integers(len(KINDS)))],
        )
        for i in range(40)
    ]


def test_one_op_is_priced_by_the_op_head_alone(model, tables):
    """For a homogeneous set the factor is exactly 1: the grouped network's answer is its op
    head's answer on the whole set."""
    homogeneous = [t for t in tables if op_key(t) == KINDS[0]][:6]
    assert len(homogeneous) >= 3
    codes = model.codes(homogeneous, BATCH)
    with torch.inference_mode():
        op_alone = model.network.predict_pooled(
            codes.sum(0, keepdim=True), torch.tensor([float(len(homogeneous))]), codes.amax(0, keepdim=True)
        )
        grouped = model.network.pool_and_predict(
            codes,
            torch.zeros(len(homogeneous), dtype=torch.long),
            1,
            ops=OpIndex.of([[op_key(t) for t in homogeneous]]),
        )
    assert torch.allclose(grouped, op_alone, atol=1e-5)


def test_a_mixed_set_is_not_the_sum_of_its_ops_alone(model, tables):
    """The interaction factor applies to sets of several ops (a test that the factor is wired)."""
    mixed = tables[:8]
    assert len({op_key(t) for t in mixed}) > 1
    by_op: dict = {}
    for t in mixed:
        by_op.setdefault(op_key(t), []).append(t)
    sum_of_ops = sum(model.predict(group, BATCH) for group in by_op.values())
    assert model.predict(mixed, BATCH) != pytest.approx(sum_of_ops, rel=1e-3)


def test_running_sets_agree_with_whole_sets(model, tables):
    rng = np.random.default_rng(1)
    sets: list[list[Table]] = [[] for _ in range(5)]
    accumulator = model.accumulator(5, BATCH)
    for table in tables:
        expected = [model.predict([*s, table], BATCH) for s in sets]
        assert accumulator.costs_if_added(table) == pytest.approx(expected, rel=1e-4)
        assert accumulator.costs_if_added(table, np.array([3, 1])) == pytest.approx(
            [expected[3], expected[1]], rel=1e-4
        )
        target = int(rng.integers(5))
        accumulator.add(target, table)
        sets[target].append(table)
        assert accumulator.costs() == pytest.approx([model.predict(s, BATCH) if s else 0.0 for s in sets], rel=1e-4)


def test_edited_sets_agree_with_rebuilt_sets(model, tables):
    """Moves out of an op (emptying it, too), into a new op, within one op, swaps, and no-ops."""
    rng = np.random.default_rng(2)
    base = [tables[0:7], tables[7:9], [tables[9]], tables[10:20], []]
    edits = []
    for _ in range(300):
        b = int(rng.integers(len(base)))
        r = int(rng.integers(len(base[b]))) if base[b] and rng.random() < 0.7 else None
        t = tables[int(rng.integers(20, 40))] if rng.random() < 0.7 else None
        edits.append((b, r, t))
    rebuilt = [[t for k, t in enumerate(base[b]) if k != r] + ([t] if t is not None else []) for b, r, t in edits]
    expected = [model.predict(s, BATCH) if s else 0.0 for s in rebuilt]
    assert model.predict_edits(base, edits, BATCH) == pytest.approx(expected, rel=1e-4)

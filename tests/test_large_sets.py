"""Sets larger than any the cost model was trained on: priced linearly in their size past the
limit, the same on every path planners use (whole sets, running sets, edited sets)."""

import numpy as np
import pytest

from autoshard.core.synthetic import PoolConfig, generate_pool

BATCH = 2048


@pytest.fixture(scope="module")
def model(shipped_model):
    return shipped_model


@pytest.fixture(scope="module")
def pool():
    return generate_pool(PoolConfig(size=900, seed=13)).all


def _sets(pool, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [[pool[i] for i in rng.choice(len(pool), n, replace=False)] for n in sizes]


def test_the_limit_is_the_largest_trained_set_unless_set(model):
    assert model.size_limit == model.max_set_size == model.ranges.tables_per_set[1]
    model.linear_beyond = 8
    try:
        assert model.size_limit == 8
    finally:
        model.linear_beyond = None


def test_sets_within_the_limit_get_the_network_answer(model, pool):
    sets = _sets(pool, [1, 3, 10, model.size_limit])
    shipped = model.predict_many(sets, BATCH)
    model.linear_beyond = 10**9  # no set reaches it: the network alone
    try:
        assert model.predict_many(sets, BATCH) == pytest.approx(shipped, rel=1e-6)
    finally:
        model.linear_beyond = None


def test_a_set_k_times_the_limit_costs_k_times_a_limit_sized_set_with_its_mean_and_max(model, pool):
    """Three copies of a limit-sized set have the same mean and max code: 3x its cost."""
    limit = model.size_limit
    base = _sets(pool, [limit], seed=1)[0]
    tripled = base * 3
    one, three = model.predict_many([base, tripled], BATCH)
    assert three == pytest.approx(3 * one, rel=1e-4)


def test_running_edited_and_whole_sets_agree_beyond_the_limit(model, pool):
    limit = model.size_limit
    sets = _sets(pool, [limit - 1, limit, limit + 1, 2 * limit, 4 * limit], seed=2)
    whole = np.asarray(model.predict_many(sets, BATCH))
    accumulator = model.accumulator(len(sets), BATCH)
    for k, tables in enumerate(sets):
        for table in tables[:-1]:
            accumulator.add(k, table)
    added = np.array([accumulator.costs_if_added(tables[-1], np.array([k]))[0] for k, tables in enumerate(sets)])
    for k, tables in enumerate(sets):
        accumulator.add(k, tables[-1])
    edited_in = np.asarray(
        model.predict_edits([s[:-1] for s in sets], [(k, None, s[-1]) for k, s in enumerate(sets)], BATCH)
    )
    extra = pool[-1]
    edited_out = np.asarray(
        model.predict_edits([[*s, extra] for s in sets], [(k, len(s), None) for k, s in enumerate(sets)], BATCH)
    )
    for other in (added, accumulator.costs(), edited_in, edited_out):
        assert other == pytest.approx(whole, rel=1e-4)


def test_cost_keeps_growing_with_the_set_past_the_limit(model, pool):
    """Past the limit, adding tables to a set never makes it cheaper by much: the head's answer at
    an unseen log n does not decide (the floor keeps it at least its costliest table)."""
    limit = model.size_limit
    grown = _sets(pool, [6 * limit], seed=3)[0]
    costs = model.predict_many([grown[:n] for n in range(limit, 6 * limit + 1, limit // 2)], BATCH)
    assert costs[-1] > 3 * costs[0]
    assert all(b > 0.9 * a for a, b in zip(costs, costs[1:]))

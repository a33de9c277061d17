"""The floor: no cost model answer lets a set cost less than its costliest table alone, on any of
the paths planners use (whole sets, running sets, edited sets, the placement state)."""

import numpy as np
import pytest

from autoshard.core.synthetic import PoolConfig, generate_pool
from autoshard.core.types import Optimizer, Table, TableShard, Topology, Workload
from autoshard.planners.choosers import candidates
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.packing import packable
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit
from autoshard.planning.registry import PLANNERS, make_planner
from autoshard.rl.policy import OptionPolicy
from tests.conftest import SHIPPED_PROFILE

BATCH = 4096


@pytest.fixture(scope="module")
def model(shipped_model):
    return shipped_model


@pytest.fixture(scope="module")
def sets():
    """Random sets of 2-12 pool tables, each with one giant (the case the network got wrong)."""
    pool = generate_pool(PoolConfig(size=400, seed=11)).all
    rng = np.random.default_rng(0)
    giants = sorted(pool, key=lambda t: t.num_embeddings * t.embedding_dim)[-20:]
    return [
        [giants[k % 20], *(pool[i] for i in rng.choice(len(pool), rng.integers(1, 12), replace=False))]
        for k in range(60)
    ]


# The set local search found on 1,000 tables x 128 devices with an earlier model: its network
# predicted 11.08 ms for the giant with these 7 tables and 11.69 ms for the giant alone; measured,
# 32.3 ms against 30.1 ms. Whatever a network predicts for it, the floor must hold.
GIANT = Table("syn7_12022", 3566702, 128, 53.8, 0.29)
COMPANY = [
    Table("syn7_6213", 1851, 64, 1.0, 0.83),
    Table("syn7_0604", 80186, 32, 2.1, 0.99),
    Table("syn7_11381", 218, 16, 8.4, 1.15),
    Table("syn7_2312", 22091, 32, 1.0, 0.12),
    Table("syn7_0268", 490, 32, 1.0, 1.31),
    Table("syn7_8166", 92387, 16, 1.0, 0.04),
    Table("syn7_0423", 2159, 16, 1.0, 1.32),
]


def test_the_measured_giant_with_company_costs_at_least_the_giant_alone(model):
    alone = model.predict([GIANT], 2048)
    assert model.predict([GIANT, *COMPANY], 2048) >= alone * (1 - 1e-6)  # float32: batches round apart
    assert model.predict_edits([[GIANT, *COMPANY]], [(0, 1, None)], 2048)[0] >= alone * (1 - 1e-6)
    accumulator = model.accumulator(1, 2048)
    for table in COMPANY:
        accumulator.add(0, table)
    assert accumulator.costs_if_added(GIANT)[0] >= alone * (1 - 1e-6)


def test_whole_sets_cost_at_least_their_costliest_table_alone(model, sets):
    costs = np.asarray(model.predict_many(sets, BATCH))
    floors = np.array([model.alone_ms(s, BATCH).max() for s in sets])
    assert (costs >= floors * (1 - 1e-6)).all()


def test_running_and_edited_sets_agree_with_whole_sets(model, sets):
    accumulator = model.accumulator(len(sets), BATCH)
    for i, tables in enumerate(sets):
        for table in tables[:-1]:
            accumulator.add(i, table)
    last = [s[-1] for s in sets]
    added = np.array([accumulator.costs_if_added(t, np.array([i]))[0] for i, t in enumerate(last)])
    assert added == pytest.approx(model.predict_many(sets, BATCH), rel=1e-4)
    # remove each set's giant (position 0) and add another set's last table
    edits = [(i, 0, last[(i + 1) % len(sets)]) for i in range(len(sets))]
    rebuilt = [s[1:] + [last[(i + 1) % len(sets)]] for i, s in enumerate(sets)]
    assert model.predict_edits(sets, edits, BATCH) == pytest.approx(model.predict_many(rebuilt, BATCH), rel=1e-4)


def test_adding_a_unit_never_lowers_a_devices_cost_in_the_placement_state(model, sets):
    tables = sets[0] + sets[1]
    units = [Unit.of(TableShard(t), c) for t, c in zip(tables, model.alone_ms(tables, BATCH))]
    state = PlacementState(units, Topology(3, 1000.0), model.accumulator(3, BATCH))
    while not state.done:
        after = state.costs_if_added()
        assert (after >= state.loads).all()
        state.apply(int(np.argmin(after)))


def test_one_placement_costs_the_same_whatever_planner_made_it(model):
    """On one device every planner places the same set. The shipped model prices the giant with
    the fp16 table at more than all three together (adding the small fp32 table lowers it): the
    placement's floor held its load at the higher figure step by step, and cost_greedy reported
    it, 2% above the same set from the heuristics. A finished placement's loads are its sets'
    predictions, so every planner reports the set alike."""
    a = Table("a", 1_000_000, 128, 20.0)
    b = Table("b", 500, 8, 1.0)
    c = Table("c", 20_000_000, 64, 2.0, bytes_per_element=2, optimizer=Optimizer.ROWWISE_ADAGRAD)
    workload = Workload((a, b, c), batch_size=4096)
    whole = model.predict([a, b, c], 4096)
    assert model.predict([a, c], 4096) > whole * 1.01  # the model's dip: the case under test
    context = PlannerContext(model, OptionPolicy.load(SHIPPED_PROFILE / "policy.pt"))
    for name in (n for n, spec in PLANNERS.items() if spec.kind is not PlannerKind.REFERENCE):
        plan = make_planner(name, context).plan(workload, Topology(1, 16.0))
        assert plan.max_cost_ms == pytest.approx(whole, rel=1e-5), name


def test_candidates_are_the_least_loaded_and_one_empty_device():
    units = [Unit.of(TableShard(Table(f"t{i}", 10, 4)), 1.0) for i in range(30)]
    state = PlacementState(units, Topology(40, 1.0))
    state.loads[:] = np.arange(40)[::-1]
    state.count[:] = 1
    state.count[[3, 5]], state.loads[[3, 5]] = 0, 0.0  # two empty devices: alike, only the first is a candidate
    allowed = np.arange(40)
    picked = candidates(state, allowed, limit=4)
    assert picked.tolist() == [3, 37, 38, 39]


@pytest.mark.parametrize(
    "sizes, free, fits",
    [
        ([5, 4, 3], [6, 6], False),  # 5 and 4 need a bin each; 3 has no room left
        ([5, 4, 3], [8, 5], True),  # 5+3 | 4
        ([4, 4, 4], [12], True),
        ([7], [6, 6], False),
        ([3, 3, 2, 2], [5, 5], True),  # 3+2 | 3+2
        ([], [0], True),
    ],
)
def test_first_fit_decreasing_by_hand(sizes, free, fits):
    assert packable(sizes, free) is fits

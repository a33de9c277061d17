"""cost_greedy's spread variants judged by the max device (``spread_variants``): under TorchRec's
estimator, where a table-wise table costs more than its replica or its host's row split on
every device, cost_greedy replicates or row-splits it as TorchRec's planner does, and plans no
worse than TorchRec's planner; the either-variants price the costliest tables within a budget."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torchrec")

from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import Table, Topology, Workload  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planners.placement_unit import model_costs  # noqa: E402
from autoshard.planners.sharding_options import ALL_TYPES, spread_options  # noqa: E402
from autoshard.planners.spread_variants import (  # noqa: E402
    EITHER_SHARD_BUDGET,
    cheaper_spread,
    either_kinds,
    spread_variants,
)
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.torchrec.cost_model import TorchRecCostModel  # noqa: E402
from autoshard.torchrec.planner import TorchRecPlanner  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")


def few_tables_a_device(seed: int = 0) -> Workload:
    """Fewer tables than devices, most of them small (a replica is cheap), a few large."""
    rng = np.random.default_rng(seed)
    tables = [Table(f"small{i}", int(10 ** rng.uniform(1, 4)), 128, float(rng.choice([1, 3, 6]))) for i in range(9)]
    tables += [Table(f"large{i}", int(10 ** rng.uniform(5, 6.3)), 128, float(rng.choice([3, 10]))) for i in range(4)]
    return Workload(tuple(tables), 1024, f"few{seed}")


def test_cost_greedy_is_no_worse_than_torchrecs_planner_with_few_tables_a_device():
    """With fewer tables than devices, a table-wise table is a device's whole load: TorchRec's
    planner replicates the small ones and row-splits the rest; cost_greedy must find a plan as
    good (it replicated only where the replicas' summed cost was below the table's, before)."""
    workload, topology = few_tables_a_device(), Topology.cluster(2, 8, 2.0)
    model = TorchRecCostModel()
    context = PlannerContext(model, departure_margin=0.0)
    [ours] = compare_planners(workload, topology, ["cost_greedy"], context).plans
    theirs = TorchRecPlanner(cost_model=model.for_task(workload, topology), sharding_types="all")
    plan = theirs.plan(workload, topology)
    assert ours.max_cost_ms <= plan.max_cost_ms * (1 + 1e-9)
    kinds = {s.sharding_type for d in ours.devices for s in d.shards}
    assert kinds & {ShardingType.DATA_PARALLEL, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD}


def test_either_variants_take_the_costliest_tables_within_the_budget():
    """The either-variant holds the costliest tables alone first, as many as the shard budget
    prices; the cheap variant's tables each have an option whose shards cost less in sum."""
    tables = tuple(Table(f"t{i:03d}", 1000 + 37 * i, 16 + 8 * (i % 4), 1.0 + i % 7) for i in range(200))
    workload, topology = Workload(tables, 512, "many"), Topology.cluster(4, 8, 8.0)
    cost_fn = model_costs(TorchRecCostModel().for_task(workload, topology), workload.batch_size)
    variants = {v.name: v for v in spread_variants(workload, topology, cost_fn, False, ALL_TYPES)}
    either = variants["needed+heavy+either"]
    budget = EITHER_SHARD_BUDGET // (3 * topology.local_world_size + 1)
    assert len(either.either) == budget < len(tables)
    costs = dict(zip((t.name for t in tables), cost_fn(list(tables))))
    chosen = [costs[name] for name in either.either]
    left = [c for name, c in costs.items() if name not in either.either and name not in either.any_type]
    assert min(chosen) >= max(left)
    kinds = {t.name: ALL_TYPES for t in tables}
    for table in cheaper_spread([t for t in tables if t.name in either.either], topology, cost_fn, kinds, costs):
        sums = [
            sum(cost_fn([s.as_table for _, s in o.placements]))
            for o in spread_options(table, topology, either_kinds(ALL_TYPES, topology), max_grid_ways=2)
        ]
        assert min(sums) < costs[table.name]

"""The held-out grid of ``autoshard policy eval`` on the 4D problem (issue 53): clusters of hosts,
giant tasks whose largest tables fit no device whole, and a lower bound valid for row-wise,
table-row-wise and data-parallel forms."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.communication import CommunicationModel
from autoshard.core.sharding import ShardingType
from autoshard.core.task import Task
from autoshard.core.types import GIB, Table, Topology, Workload
from autoshard.evaluation.grid import (
    GridConfig,
    GridRow,
    chart,
    evaluate_grid,
    grid_tasks,
    has_oversized_table,
    lower_bound_ms,
    markdown,
    summarise,
)
from autoshard.planners.context import PlannerContext
from autoshard.planning.registry import HEURISTICS
from tests.cost_models import AnalyticalTestCostModel

TINY = GridConfig(tables=(8, 20), topologies=((1, 4), (2, 2)))
# The analytical model at batch 1000: a table (or shard) alone costs 4e-4 x pooling x columns + 0.1 ms
# (a row shard's pooling is its share of the lookups). "giant": 4,000 rows x 64 columns, pooling 10,
# 1,024,000 bytes; on devices of 524,288 bytes it fits only as shards.
GIANT = Table("giant", 4000, 64, 10.0)
SMALL = Table("small", 1000, 8)
HALF_MB = 524_288 / GIB


def test_the_bound_gives_a_table_that_fits_no_device_its_row_wise_shard():
    """1x4, no column splits: "giant" fits no device whole, nor as a replica; as row_wise (or
    table_row_wise over the one host) its 4 shards of 1,000 rows each serve 1/4 of its lookups:
    4e-4 x 2.5 x 64 + 0.1 = 0.164 each: the bound, with or without "small" (0.1032 whole)."""
    model = AnalyticalTestCostModel()
    context = PlannerContext(model, allow_column_split=False)
    tight = Topology.cluster(1, 4, HALF_MB)
    alone = Task("alone", Workload((GIANT,), batch_size=1000), tight)
    pair = Task("pair", Workload((GIANT, SMALL), batch_size=1000), tight)
    assert has_oversized_table(alone)
    assert lower_bound_ms(alone, context, None) == pytest.approx(0.164)
    assert lower_bound_ms(pair, context, None) == pytest.approx(0.164)
    # every plan of cost_greedy and the heuristics is at or above it
    rows = evaluate_grid([pair], context, None, ["cost_greedy", *HEURISTICS])
    assert rows[0].max_ms and min(rows[0].max_ms.values()) >= rows[0].lower_bound_ms * (1 - 1e-9)


def test_the_bound_uses_table_row_wise_over_one_host_and_none_where_no_form_fits():
    """2x2, only table_wise and table_row_wise allowed: "giant" fits only as 2 shards of 2,000 rows
    (512,000 bytes) on one host's 2 devices, each serving half its lookups: 4e-4 x 5 x 64 + 0.1 =
    0.228. On devices too small for those shards no form fits: no plan, no bound."""
    model = AnalyticalTestCostModel()
    kinds = frozenset({ShardingType.TABLE_WISE, ShardingType.TABLE_ROW_WISE})
    context = PlannerContext(model, allow_column_split=False, sharding_types=kinds)
    workload = Workload((GIANT,), batch_size=1000)
    assert lower_bound_ms(Task("t", workload, Topology.cluster(2, 2, HALF_MB)), context, None) == pytest.approx(0.228)
    # every type: row_wise over all 4 devices (or grid_shard: 32-column blocks over a host) is cheaper
    every = PlannerContext(model, allow_column_split=False)
    assert lower_bound_ms(Task("t", workload, Topology.cluster(2, 2, HALF_MB)), every, None) == pytest.approx(0.164)
    assert lower_bound_ms(Task("t", workload, Topology.cluster(2, 2, 0.1 * HALF_MB)), context, None) is None
    assert lower_bound_ms(Task("t", workload, Topology.cluster(2, 2, HALF_MB)), PlannerContext(), None) is None


def test_giant_tasks_are_every_second_one_and_hold_a_table_larger_than_a_device():
    tasks = grid_tasks(TINY)
    assert [t.name for t in tasks] == ["grid8x1x4", "grid8x2x2-giant", "grid20x1x4", "grid20x2x2-giant"]
    assert [TINY.is_giant(i) for i in range(4)] == [False, True, False, True]
    assert [(t.topology.num_hosts, t.topology.devices_per_host) for t in tasks] == [(1, 4), (2, 2)] * 2
    for i, task in enumerate(tasks):
        memory, share = task.topology.device_memory_bytes, task.workload.memory_bytes / task.topology.num_devices
        if TINY.is_giant(i):
            assert has_oversized_table(task) and memory == pytest.approx(1.3 * share, rel=1e-3)
        else:
            assert not has_oversized_table(task) and memory >= 1.3 * share * (1 - 1e-3)
    assert not any(GridConfig(giant_every=0).is_giant(i) for i in range(4))


@pytest.mark.parametrize("communication", [None, CommunicationModel(3.0, 0.01)])
def test_no_plan_on_a_tiny_grid_is_below_its_lower_bound(communication):
    """cost_greedy and the heuristics on the tiny grid (giant tasks included), predicted by the
    analytical model (with and without an all-to-all of some latency): every plan is at or above
    the task's bound; the summary and the report read the rows, skipped planners and all."""
    context = PlannerContext(AnalyticalTestCostModel())
    rows = evaluate_grid(grid_tasks(TINY), context, communication, ["cost_greedy", *HEURISTICS])
    assert [r.giant for r in rows] == [False, True, False, True]
    for row in rows:
        assert row.lower_bound_ms is not None and "cost_greedy" in row.max_ms
        assert min(row.max_ms.values()) >= row.lower_bound_ms * (1 - 1e-9), row.task
        assert set(row.max_ms) | set(row.skipped) == {"cost_greedy", *HEURISTICS}
        assert (row.hosts * row.devices_per_host, row.tables) == (row.devices, int(row.task[4:].split("x")[0]))
    summary = summarise(rows)
    greedy = summary["cost_greedy"]
    assert greedy.tasks == 4 and greedy.geomean_vs_cost_greedy == pytest.approx(1.0)
    open_share = greedy.share_below_cost_greedy_above_bound  # cost_greedy is never below itself
    assert open_share == 0.0 if greedy.tasks_cost_greedy_above_bound else math.isnan(open_share)
    text = markdown(rows, summary, ["rl", "cost_greedy", "size_greedy"])
    assert "2x2" in text and "yes" in text and "size_greedy / cost_greedy" in text


def test_a_task_no_planner_can_plan_is_reported_skipped(tmp_path):
    """Devices too small for any form of "giant": every planner is skipped, the bound is None,
    and the summary, the markdown and the chart still come out."""
    task = Task("grid1x2x2-giant", Workload((GIANT,), batch_size=1000), Topology.cluster(2, 2, 0.1 * HALF_MB))
    names = ["cost_greedy", *HEURISTICS]
    rows = evaluate_grid([task], PlannerContext(AnalyticalTestCostModel()), None, names)
    (row,) = rows
    assert row.giant and not row.max_ms and set(row.skipped) == set(names) and row.lower_bound_ms is None
    assert summarise(rows) == {}
    assert "cost_greedy on grid1x2x2-giant" in markdown(rows, {}, ["cost_greedy"])
    chart(rows, ["cost_greedy"], tmp_path / "grid.png")
    assert (tmp_path / "grid.png").exists()
    assert GridRow(**row.to_dict()).to_dict() == row.to_dict()


@pytest.mark.parametrize("value", ["4", "1x", "x8", "0x4", "1x4,2y8", ",", "1x-2"])
def test_policy_eval_refuses_a_bad_topologies_value(tmp_path, value):
    result = CliRunner().invoke(app, ["policy", "eval", "--profile", str(tmp_path), "--topologies", value])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "--topologies" in said and "1x4,1x8" in said and "Traceback" not in said

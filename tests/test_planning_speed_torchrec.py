"""The work cost_greedy skips under ``--model torchrec`` (issue 62's speed bar): a split-cap group
placed once beside a spread variant's fixed shards, and no kernel but ``fused`` priced where every
table fits fused."""

from __future__ import annotations

import pytest

from autoshard.core.sharding import ShardingType
from autoshard.core.types import FUSED, Table, TableShard, Topology, Workload
from autoshard.planners.device_state import DeviceState
from autoshard.planners.placement_unit import Unit
from autoshard.planners.split_cap_choice import CapGroup, _plan_group


def _unit(name: str, fixed: bool = False) -> Unit:
    return Unit.of(TableShard(Table(name, 1000, 16, 1.0)), 1.0, fixed)


def test_a_group_placed_as_split_beside_fixed_shards_is_planned_once():
    movable = [_unit("a"), _unit("b")]
    fixed = _unit("spread", fixed=True)  # a spread variant's shard, held on its device before placement
    calls: list[int | None] = []

    def plan_at(cap: int | None) -> list[DeviceState]:
        calls.append(cap)
        return [DeviceState(0, 1 << 30, [fixed, movable[0]]), DeviceState(1, 1 << 30, [movable[1]])]

    group = CapGroup(frozenset(movable), (None, 2, 4), 1.0)
    found, error = _plan_group(group, plan_at, None)
    assert calls == [None] and len(found) == 1 and error is None


def test_a_group_whose_units_were_not_all_placed_tries_its_next_cap():
    movable = [_unit("a"), _unit("b")]
    calls: list[int | None] = []

    def plan_at(cap: int | None) -> list[DeviceState]:  # "b" retried as smaller shards: not placed whole
        calls.append(cap)
        return [DeviceState(0, 1 << 30, [movable[0]])]

    found, _ = _plan_group(CapGroup(frozenset(movable), (None, 2), 1.0), plan_at, None)
    assert calls == [None, 2] and len(found) == 2


@pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")
def test_where_every_table_fits_fused_no_other_kernel_is_priced():
    pytest.importorskip("torchrec")
    from autoshard.torchrec.cost_model import TorchRecCostModel

    workload = Workload(tuple(Table(f"t{i}", 10_000, 32, 2.0) for i in range(3)), 512, "small")
    model = TorchRecCostModel().for_task(workload, Topology.cluster(1, 2, 4.0))
    chosen = model.choose_kernels(workload, Topology.cluster(1, 2, 4.0))
    assert chosen is workload
    priced = model.task._by_key  # every estimate TorchRec's estimators were asked for
    assert {key[2] for key in priced} == {FUSED} and len(priced) == 3
    assert {key[1] for key in priced} == {ShardingType.TABLE_WISE}

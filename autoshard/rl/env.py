"""The placement problem as a Gymnasium environment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import gymnasium as gym
import numpy as np

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import Accumulator
from autoshard.core.errors import InputError, PlannerError
from autoshard.core.task import Task
from autoshard.core.types import CostModel, Topology
from autoshard.planners.choosers import cheapest_after
from autoshard.planners.local_search import Round, improve, round_changes
from autoshard.planners.place_loop import place
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_state import SET_SIZE_HEADROOM, PlacementState, unit_cap
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.step_costs import StepCosts
from autoshard.planners.unit_preparation import by_cost, prepare_units
from autoshard.rl.observation import OBS_BOUND, observation_size, observe
from autoshard.rl.repair import make, observe_repair, repair_mask
from autoshard.rl.tasks import TaskDistribution, TaskSource

DEAD_END_PENALTY = 2.0  # in units of the task's lower bound: worse than any finished plan's return


class Reward(str, Enum):
    """The env's reward designs (``ShardingEnv``'s docstring): ``step``, which the shipped policies
    were trained with, and ``refined``, its ablation for the search."""

    STEP = "step"
    REFINED = "refined"


REFINE_ROUNDS = 20  # local-search rounds of the ``refined`` reward's plans (rl+refine runs up to 50)


@dataclass(frozen=True, slots=True)
class EnvConfig:
    """``slots``: device rows in the observation (the largest device count of a training task);
    ``set_size_headroom``: see ``unit_cap``; ``repair_rounds``: repair steps after the last unit
    is placed (``autoshard.rl.repair``; 0: none, the episode ends with the placement)."""

    slots: int = 16
    reward: Reward = Reward.STEP
    set_size_headroom: float = SET_SIZE_HEADROOM
    repair_rounds: int = 0

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise InputError("slots", f"must be >= 1, got {self.slots}")
        if self.set_size_headroom < 1:
            raise InputError("set_size_headroom", f"must be >= 1, got {self.set_size_headroom}")
        if self.repair_rounds < 0:
            raise InputError("repair_rounds", f"must be >= 0, got {self.repair_rounds}")


def guarded_state(
    units: list[Unit],
    topology: Topology,
    cost_model: CostModel,
    batch_size: int,
    headroom: float,
    accumulator: Accumulator | None = None,
    steps: StepCosts | None = None,
    fixed: Sequence[tuple[int, Unit]] = (),
    rules: PlacementRules | None = None,
) -> PlacementState:
    """A fresh placement of ``units`` (in this order) as the agent sees it: running predicted
    costs (on ``accumulator``, default a new one of the model's; with ``steps``, shared with
    placements of the same units), the packing lookahead and the extrapolation guard, around the
    ``fixed`` shards of spread tables. The env and the rl planners share it."""
    devices = topology.num_devices
    if accumulator is None:
        accumulator = cost_model.accumulator(devices, batch_size)
    return PlacementState(
        units,
        topology,
        accumulator,
        lookahead=True,
        max_units_per_device=unit_cap(cost_model, len(units) + len(fixed), devices, headroom),
        steps=steps,
        fixed=fixed,
        rules=rules,
    )


def priced(task: Task, cost_model: CostModel, communication: CommunicationModel | None) -> CostModel:
    """Device costs as the env scores them: the cost model plus, if given, the all-to-all for the
    task's device count."""
    return cost_model if communication is None else WithCommunication(cost_model, communication, task.topology)


def refined_max(
    state: PlacementState,
    task: Task,
    cost_model: CostModel,
    communication: CommunicationModel | None,
    rounds: int = REFINE_ROUNDS,
) -> float:
    """The max of a finished placement's plan after ``rounds`` of local search, on copies of its
    devices (the placement itself stays as it was), within the placement's extrapolation guard
    (as the agent's repair steps are)."""
    devices = [d.copy() for d in state.devices]
    improve(
        devices,
        priced(task, cost_model, communication),
        task.workload.batch_size,
        rounds,
        max_units=state.max_units_per_device,
    )
    return max(d.load for d in devices)


def start(
    task: Task,
    cost_model: CostModel,
    communication: CommunicationModel | None,
    config: EnvConfig,
    units: list[Unit] | None = None,
) -> PlacementState:
    """A fresh placement of the task's tables (largest predicted cost first, or ``units`` if
    given), scored by the cost model plus, if given, the all-to-all for the task's device count."""
    model = priced(task, cost_model, communication)
    batch = task.workload.batch_size
    if units is None:
        units = by_cost(prepare_units(task.workload, task.topology, model_costs(model, batch), False))
    return guarded_state(units, task.topology, model, batch, config.set_size_headroom)


class ShardingEnv(gym.Env):
    """Place a task's tables on devices, one per step, scored by a cost model.

    **Task.** Each ``reset`` draws a workload and a topology with binding memory from ``tasks``
    (``self.np_random``), or takes ``options["task"]`` (an ``autoshard.core.task.Task``); a
    task of more devices than ``config.slots`` is an ``InputError``.

    **Order.** Units go largest predicted cost first (as cost_greedy places them): the big
    decisions come while every device is still open.

    **Observation.** ``Box(G + U + slots x F)`` (``autoshard.rl.observation``): global context
    (progress, remaining cost and memory, current max and mean cost, log device count), the unit
    (its cost alone, memory, log rows, dim, pooling, skew), and per device: cost now and with the
    unit, the increase, the excess over the current max, memory used and free after, unit count,
    cost rank, and whether it is greedy's choice. Costs are relative to the task's lower bound.
    Device rows beyond the task's count are zero.

    **Action.** ``Discrete(slots)``: the device for the unit. ``action_masks()`` allows devices
    with room and no shard of the same table, that hold fewer units than the extrapolation guard
    allows (``unit_cap``), and that leave the remaining units packable (first-fit decreasing
    lookahead); padding slots are never allowed.

    **Reward** (``config.reward``), in units of the task's lower bound:
    ``step`` (default): minus the increase of the max device cost at each step (the return is
    minus the final max: dense, and exactly the objective). ``refined``: the same dense steps, and
    at the last step the return becomes (greedy's max - the agent's max) / lower bound with *both
    plans after local search* (``REFINE_ROUNDS`` rounds of moves and swaps, as
    cost_greedy's): the objective of ``rl+refine``, which deploys the policy as the seed of that
    search, so the agent learns placements that the search finishes best rather than greedy's
    own. A dead end (no device allowed), or an action the mask forbids (possible only when the
    mask is ignored), ends the episode with -2.

    **Repair** (``config.repair_rounds`` > 0). Once every unit is placed, the agent revisits
    its placement (``autoshard.rl.repair``): each step offers, per device, the best change
    between it and the max-cost device that lowers the max (a move, or a swap where no move
    lowers it), in the same observation layout (``progress`` 1, no unit; a row's "with the
    unit" is its cost after its change, "over max" the change's new max over the current one,
    greedy's choice the change local search makes). The action picks a device: a target makes
    its change, the max-cost device stops. Rewards as while placing: minus the increase of the
    max (``refined`` then measures against greedy placement after as many rounds of local
    search). The mask allows the targets of a change and the max-cost device.

    **Episode end.** Terminated when every unit is placed and, with repair, when the agent stops,
    no change lowers the max, or after ``repair_rounds`` repair steps; or at a dead end. Never
    truncated.

    **Arguments.** ``cost_model`` (the simulator), ``tasks``, ``config``, ``communication``
    (the profile's all-to-all, added to device costs).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        cost_model: CostModel,
        tasks: TaskSource = TaskDistribution(),
        config: EnvConfig = EnvConfig(),
        communication: CommunicationModel | None = None,
    ) -> None:
        super().__init__()
        self.cost_model, self.tasks, self.config, self.communication = cost_model, tasks, config, communication
        self.observation_space = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, (observation_size(config.slots),), np.float32)
        self.action_space = gym.spaces.Discrete(config.slots)
        self.state: PlacementState | None = None
        self.actions: list[int] = []
        self.repair: Round | None = None  # the repair step offered, once every unit is placed
        self.repairs = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            task = self.tasks.sample(self.np_random)
        if task.topology.num_devices > self.config.slots:
            raise InputError(
                "task",
                f"{task.topology.num_devices} devices exceed the env's {self.config.slots} slots",
                "plan larger topologies with the rl planner, which scores any device count",
            )
        self.task = task
        self.state = start(task, self.cost_model, self.communication, self.config)
        self.scale = self.state.cost_bound
        self.greedy_max = self._greedy_max() if self.config.reward is not Reward.STEP else 0.0
        self.actions, self.repair, self.repairs = [], None, 0
        self._allowed = self.state.mask()
        return self._get_obs(), self._get_info()

    def _greedy_max(self) -> float:
        assert self.state is not None
        greedy = start(self.task, self.cost_model, self.communication, self.config, self.state.units)
        try:
            placed = place(greedy, cheapest_after)
        except PlannerError:
            return 0.0
        if self.config.repair_rounds:  # greedy placement after as many rounds of local search
            return refined_max(placed, self.task, self.cost_model, self.communication, self.config.repair_rounds)
        return self._refined_max(placed) if self.config.reward is Reward.REFINED else float(placed.loads.max())

    def _refined_max(self, state: PlacementState) -> float:
        return refined_max(state, self.task, self.cost_model, self.communication)

    def _get_obs(self) -> np.ndarray:
        assert self.state is not None
        state = self.state
        rows = np.arange(len(state.devices))
        if self.repair is not None:
            return observe_repair(state.devices, self.repair, self.scale, rows).padded(self.config.slots)
        return observe(state, rows, state.costs_if_added(), self._allowed).padded(self.config.slots)

    def _max(self) -> float:
        assert self.state is not None
        return max(d.load for d in self.state.devices)

    def _get_info(self) -> dict[str, Any]:
        assert self.state is not None
        return {
            "max_cost": self._max(),
            "greedy_max": self.greedy_max,
            "placed": self.state.position,
            "units": len(self.state.units),
            "repairs": self.repairs,
        }

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.config.slots, dtype=bool)
        if self.state is not None and (not self.state.done or self.repair is not None):
            mask[: len(self._allowed)] = self._allowed
        return mask

    def _next_repair(self) -> Round | None:
        """The next repair step, or None: repair off, its rounds spent, or nothing lowers the max."""
        assert self.state is not None
        if self.repairs >= self.config.repair_rounds:
            return None
        model = priced(self.task, self.cost_model, self.communication)
        return round_changes(
            self.state.devices, model, self.task.workload.batch_size, self.state.max_units_per_device
        )  # none past the extrapolation guard

    def step(self, action: int):
        assert self.state is not None, "call reset() first"
        action = int(action)
        if not (0 <= action < len(self._allowed) and self._allowed[action]):  # only without the mask
            info = {**self._get_info(), "invalid_action": True}
            return self._get_obs(), -DEAD_END_PENALTY, True, False, info
        before = self._max()
        self.actions.append(action)
        if self.repair is not None:  # a repair step: a change, or stop
            changed = make(self.state.devices, self.repair, action)
            self.repairs += 1
            self.repair = self._next_repair() if changed else None
        else:
            self.state.apply(action)
            if self.state.done:
                self.repair = self._next_repair()
        reward = -(self._max() - before) / self.scale
        terminated = self.state.done and self.repair is None
        if not self.state.done:
            self._allowed = self.state.mask()
            if not self._allowed.any():  # a packing dead end the lookahead could not avoid
                terminated, reward = True, reward - DEAD_END_PENALTY
        elif self.repair is not None:
            self._allowed = repair_mask(self.repair, len(self.state.devices))
        if terminated and self.state.done:
            if self.config.reward is Reward.REFINED:  # the return becomes the refined plans' difference
                reward += (self._max() - self._refined_max(self.state)) / self.scale
            reward += self.greedy_max / self.scale
        done = terminated and self.state.done
        obs = np.zeros(self.observation_space.shape or (), np.float32) if done else self._get_obs()
        return obs, float(reward), terminated, False, self._get_info()

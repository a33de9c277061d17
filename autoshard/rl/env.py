"""The sharding problem as a Gymnasium environment."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import gymnasium as gym
import numpy as np

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import bound_to_task
from autoshard.core.errors import InputError, PlannerError
from autoshard.core.task import Task
from autoshard.core.types import CostModel
from autoshard.planners.choosers import CANDIDATES
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_state import SET_SIZE_HEADROOM
from autoshard.rl.options import CONTEXT, FEATURE_GROUPS, OPTION, Candidates, Option, OptionState, kept_columns
from autoshard.rl.tasks import TaskDistribution, TaskSource

DEAD_END_PENALTY = 2.0  # in units of the task's scale: worse than any finished plan's return
OBS_BOUND = 1e3  # features are of order 1; the bound only keeps the space finite
RESAMPLES = 20  # draws of a task the model can plan and whose first table some option fits
FULL_VIEW_DEVICES = 16
"""Up to this many devices every allowed device is a table-wise option; beyond, the ``CANDIDATES``
least loaded (and one empty one), as the planners offer them."""


class Reward(str, Enum):
    """The env's reward designs (``ShardingEnv``'s docstring)."""

    STEP = "step"
    TERMINAL = "terminal"


@dataclass(frozen=True, slots=True)
class EnvConfig:
    """``slots``: option rows in the observation (options past it are not offered);
    ``set_size_headroom``: see ``unit_cap``; ``dropped``: feature groups zeroed (ablations,
    ``options.FEATURE_GROUPS``); ``spread_every_table``: under an exact model (TorchRec's
    estimator) every table is offered its splits and replicas, as cost_greedy tries them."""

    slots: int = 48
    reward: Reward = Reward.STEP
    set_size_headroom: float = SET_SIZE_HEADROOM
    dropped: tuple[str, ...] = ()
    spread_every_table: bool = False

    def __post_init__(self) -> None:
        unknown = [g for g in self.dropped if g not in FEATURE_GROUPS]
        if unknown:
            raise InputError("dropped", f"unknown feature groups {unknown}", f"use some of {', '.join(FEATURE_GROUPS)}")
        if self.slots < 2:
            raise InputError("slots", f"must be >= 2, got {self.slots}")
        if self.set_size_headroom < 1:
            raise InputError("set_size_headroom", f"must be >= 1, got {self.set_size_headroom}")


def planned(task: Task, cost_model: CostModel) -> Task:
    """``task`` as planning hands it to a planner under ``cost_model``: each table's kernel as
    the model chooses it where it prices kernels (TorchRec's estimator on cuda: the fewest tables
    in host memory for the task to fit its memory count, ``planning.kernels``' first fill),
    else as it is."""
    choose = getattr(cost_model, "choose_kernels", None)
    if choose is None:
        return task
    workload = choose(task.workload, task.topology, 1.0)
    return task if workload is task.workload else Task(task.name, workload, task.topology)


def priced(task: Task, cost_model: CostModel, communication: CommunicationModel | None) -> CostModel:
    """Device costs as the env scores them: the cost model bound to the task (``bound_to_task``:
    each shard at the bags DMP gives it; TorchRec's estimator prices each task's own shards) plus,
    if given, each device's all-to-all and all-reduce on the task's topology."""
    bound = bound_to_task(cost_model, task.workload, task.topology)
    assert bound is not None  # a model bound stays a model
    return bound if communication is None else WithCommunication(bound, communication, task.topology)


def start(
    task: Task, cost_model: CostModel, headroom: float = SET_SIZE_HEADROOM, spread_every_table: bool = False
) -> OptionState:
    """A fresh placement of ``task`` over options, priced by ``cost_model`` (already ``priced``),
    under the workload's constraints, every sharding type allowed, column splits included, on the
    memory the model leaves for tables where it counts more than the planners do (TorchRec's
    ``planning_topology``, as ``planning.memory_fit`` plans first), else the task's own."""
    workload, topology = task.workload, task.topology
    leaves = getattr(cost_model, "planning_topology", None)
    planning = topology if leaves is None else leaves(topology)
    limit = None if topology.num_devices <= FULL_VIEW_DEVICES else CANDIDATES
    return OptionState(
        workload,
        planning,
        cost_model,
        rules=PlacementRules(workload.constraints, planning),
        limit=limit,
        headroom=headroom,
        spread_every_table=spread_every_table,
    )


def begin(
    task: Task,
    cost_model: CostModel,
    communication: CommunicationModel | None,
    headroom: float = SET_SIZE_HEADROOM,
    spread_every_table: bool = False,
) -> OptionState:
    """``task``'s fresh placement as a planner starts it under ``cost_model`` (the env's episodes,
    the training's evaluation): ``planned``, ``priced`` and ``start``ed."""
    task = planned(task, cost_model)
    return start(task, priced(task, cost_model, communication), headroom, spread_every_table)


def observation(state: OptionState, found: Candidates, slots: int, dropped: tuple[str, ...] = ()) -> np.ndarray:
    """The flat vector: the context, then ``slots`` option rows (rows past the options are zero,
    ``real`` 0; options past ``slots`` are left out); the ``dropped`` groups' features zero."""
    rows = np.zeros((slots, OPTION), dtype=np.float32)
    rows[: min(len(found), slots)] = found.rows[:slots]
    context = state.context()
    if dropped:
        keep_context, keep_option = kept_columns(dropped)
        context, rows = context * keep_context, rows * keep_option
    return np.clip(np.concatenate([context, rows.ravel()]), -OBS_BOUND, OBS_BOUND).astype(np.float32)


class ShardingEnv(gym.Env):
    """Shard a task's tables, one decision per step: each table's sharding option and placement.

    **Task.** Each ``reset`` draws a workload and a topology (hosts x devices, binding memory,
    sometimes tables larger than a device) from ``tasks`` (``self.np_random``), or takes
    ``options["task"]`` (an ``autoshard.core.task.Task``). A drawn task where no option fits the
    first table is drawn again; a given one is an ``InputError``.
    The episode is the task as planning hands it to a planner under ``cost_model`` (``planned``,
    ``priced``, ``start``: its kernels, each shard at DMP's bags, TorchRec's planning topology).

    **Order.** Tables that fit no device go first, then the largest predicted cost first; a table
    taken column-wise puts its column shards next, each then placed table-wise.

    **Observation.** ``Box(CONTEXT + slots x OPTION)`` (``autoshard.rl.options``): the context
    (progress; remaining cost and memory; current max and mean device cost; log device and host
    counts; the unit: its cost alone, memory, log rows, dim and pooling, skew, whether it fits a
    device, whether it is a column shard), then one row per option: whether it is real, its
    sharding type (one-hot), the share of devices it touches, the highest cost on them before and
    after, its new max over the current max, the cost it adds, its memory, the least free memory
    it leaves on them, their unit counts, load ranks and hosts' mean cost, their mean cost after.
    Costs are relative to the task's scale (max(even share of the costs alone, the costliest
    table that fits a device)). No feature holds another planner's choice.

    **Action.** ``Discrete(slots)``: an option row. ``action_masks()`` allows exactly the real
    rows: the options ``OptionState.candidates`` offers (memory, as the cost model counts it where
    it counts its own: TorchRec's storage estimate with each shard's buffers, so that every plan
    fits it; TorchRec's constraints; the packing lookahead: the rest still pack by first-fit
    decreasing, where any option leaves it; the extrapolation guard on units per device, where it
    leaves a choice). Row splits and replicas are offered for tables worth them, and with
    ``config.spread_every_table`` under an exact model (TorchRec's estimator, which prices a table
    at its full output all-to-all) for every table. Under an exact model a table that fits no
    device is offered only the options with a shard on every device, where one is offered.

    **Reward** (``config.reward``), in units of the task's scale. ``step``: minus the increase of
    the max device cost at each step (the return is minus the final max: dense, and exactly the
    objective). ``terminal``: 0 until the last step, then minus the final max (the same return,
    no credit per step). A dead end (no option left for a unit) or an action the mask forbids
    (possible only when the mask is ignored) ends the episode with -2 more.

    **Episode end.** Terminated when every unit is placed, or at a dead end. Never truncated.

    **Arguments.** ``cost_model`` (the simulator), ``tasks``, ``config``, ``communication``
    (the profile's link model, added to device costs).
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
        size = CONTEXT + config.slots * OPTION
        self.observation_space = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(config.slots)
        self.state: OptionState | None = None
        self.found: Candidates | None = None
        self.taken: list[Option] = []  # the options taken this episode, in order

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        given = (options or {}).get("task")
        why = "give the devices more memory"
        for _ in range(RESAMPLES):
            task = self.tasks.sample(self.np_random) if given is None else given
            self.task = planned(task, self.cost_model)
            try:
                self.state = start(
                    self.task,
                    priced(self.task, self.cost_model, self.communication),
                    self.config.set_size_headroom,
                    self.config.spread_every_table,
                )
            except PlannerError as error:  # the model leaves a device no memory (TorchRec's reservation)
                if given is not None:
                    raise
                why = f"{error}; draw tasks with more memory per device"
                continue  # a drawn task this model cannot plan at all: draw another
            self.taken = []
            self.found = self.state.candidates().first(self.config.slots)
            if len(self.found):
                return self._obs(), self._info()
            if given is not None:
                break
        if self.state is None or self.state.workload is not self.task.workload:
            raise InputError("task", f"none of {RESAMPLES} drawn tasks can be planned under this model", why)
        raise InputError(
            "task",
            f"no sharding option fits {self.state.current.name!r}, the first table of {self.task.name!r}",
            "give the devices more memory",
        )

    def _obs(self) -> np.ndarray:
        assert self.state is not None and self.found is not None
        return observation(self.state, self.found, self.config.slots, self.config.dropped)

    def _max(self) -> float:
        assert self.state is not None
        return float(self.state.loads.max())

    def _info(self) -> dict[str, Any]:
        assert self.state is not None
        return {"max_cost": self._max(), "placed": self.state.placed_steps, "taken": len(self.taken)}

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.config.slots, dtype=bool)
        if self.state is not None and not self.state.done and self.found is not None:
            mask[: min(len(self.found), self.config.slots)] = True
        return mask

    def step(self, action: int):
        assert self.state is not None and self.found is not None, "call reset() first"
        action = int(action)
        if not (0 <= action < self.config.slots and self.action_masks()[action]):
            return self._obs(), -DEAD_END_PENALTY, True, False, {**self._info(), "invalid_action": True}
        state, scale = self.state, self.state.scale
        before = self._max()
        option = self.found.options[action]
        self.taken.append(option)
        state.apply(option)
        terminated = state.done
        reward = 0.0 if self.config.reward is Reward.TERMINAL else -(self._max() - before) / scale
        if terminated and self.config.reward is Reward.TERMINAL:
            reward = -self._max() / scale
        info = self._info()
        if not terminated:
            self.found = state.candidates().first(self.config.slots)
            if not len(self.found):  # a packing dead end the lookahead could not avoid
                terminated, reward = True, reward - DEAD_END_PENALTY
                info["dead_end"] = True
        obs = np.zeros(self.observation_space.shape or (), np.float32) if state.done else self._obs()
        return obs, float(reward), terminated, False, info

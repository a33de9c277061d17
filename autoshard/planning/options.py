"""What planning takes besides the task: the models it plans with (``Models``) and the caller's
choices (``PlanOptions``), both frozen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoshard.core.communication import CommunicationModel
from autoshard.core.model_error import DeviceErrors
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel
from autoshard.planners.sharding_options import ALL_TYPES

PROXY_UNIT = "proxy: dim x pooling summed per device (no cost model)"
"""The cost unit of plans made without a cost model (``ProxyCostModel``'s sums)."""


@dataclass(frozen=True, slots=True)
class Models:
    """A profile's artifacts as planning uses them (``autoshard.profiles.LoadedModel`` holds them
    for the CLI and the service; ``of`` takes one). Every field may be missing: without a
    ``cost_model`` the heuristics plan alone and plans are priced by a proxy.

    ``cost_model`` prices every plan (compute; a planning thread's own copy where threads share a
    profile); ``communication`` adds each device's all-to-all to its cost (None: compute only);
    ``policy`` is the rl planners' (an ``autoshard.rl.policy.OptionPolicy``); ``device_errors``
    give each plan's expected max; ``profile`` names the profile in reports; ``missing`` says why
    there is no cost model, added to the reasons of the planners skipped for want of one."""

    cost_model: CostModel | None = None
    communication: CommunicationModel | None = None
    policy: Any = None
    device_errors: DeviceErrors | None = None
    profile: str | None = None
    missing: str | None = None

    @classmethod
    def of(cls, loaded: Any, cost_model: CostModel | None = None, communication: bool = True) -> Models:
        """The models of a loaded profile (an ``autoshard.profiles.LoadedModel``; None: no
        models): with ``cost_model`` in place of its own (a thread's copy), without its all-to-all
        unless ``communication``."""
        if loaded is None:
            return cls()
        return cls(
            cost_model if cost_model is not None else loaded.model,
            loaded.communication if communication else None,
            loaded.policy,
            loaded.device_errors,
            loaded.profile,
        )

    @property
    def cost_unit(self) -> str:
        """What plans' costs are in: ``ms`` with a cost model, else ``PROXY_UNIT``."""
        return "ms" if self.cost_model is not None else PROXY_UNIT


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How to plan. ``planners``: the planners to run, in order (None: every registered one that
    can run with the models, TorchRec's included; those that cannot are reported skipped).
    ``seed``: the random planner's and rl+refine's sampling. ``allow_column_split``: which
    planners may split tables column-wise (``PlannerContext.splits``; None: those with a cost
    model). ``time_budget_s``: how long each searching planner may search (None: no limit);
    ``deadline``: a ``time.monotonic()`` time past which no planner starts or searches (None:
    none); searching planners get the lesser of the two. ``departure_margin``: rl+refine's and
    column splits' margin (None: ``DEPARTURE_MARGIN``). ``sharding_types``: the types planners
    may choose. ``stats``: the best plan's stats in the report. ``torchrec_export``: each plan as
    TorchRec sharding in the report (needs torchrec)."""

    planners: tuple[str, ...] | None = None
    seed: int = 0
    allow_column_split: bool | None = None
    time_budget_s: float | None = None
    deadline: float | None = None
    departure_margin: float | None = None
    sharding_types: frozenset[ShardingType] = ALL_TYPES
    stats: bool = False
    torchrec_export: bool = False

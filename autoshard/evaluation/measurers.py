"""Plans measured on this machine, as the commands that measure wire it: ``plan --verify``,
``replan --measure``, ``evaluate --measure`` and the benchmarks.

``plans_measurer`` runs a task's plans with the microbenchmark (``measure_plan.measure_plans``) on
the profile's kind of device and execution mode; ``plans_verifier`` hands it to ``verify`` with
each device's all-to-all as the profile models it (one device cannot measure an all-to-all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from autoshard.core.errors import InputError

if TYPE_CHECKING:
    from autoshard.core.communication import CommunicationModel
    from autoshard.core.types import ShardingPlan
    from autoshard.evaluation.verification import Verification


class MeasuredProfile(Protocol):
    """What measuring needs of a profile (``autoshard.profiles.LoadedModel`` has it): its name and
    its device's recorded settings (``device_type``, ``mode``)."""

    @property
    def profile(self) -> str: ...

    @property
    def device(self) -> Mapping[str, Any]: ...


def plans_measurer(
    rounds: int,
    row_cap_mb: int,
    profile: MeasuredProfile | None = None,
    on_round: Callable[[int], None] | None = None,
) -> Callable[..., Any]:
    """``(plans, batch_size, reference=0, world_size=None) -> measured plans``: one task's plans
    run on this machine with the microbenchmark, interleaved over ``rounds``
    (``measure_plan.measure_plans``; tables capped at ``row_cap_mb`` MiB of rows, as the traces
    are; each device as DMP runs a rank of ``world_size``, by default the plans' devices: its
    sharded shards at B x W bags, its replicas at B, as the cost model prices it), on the ``profile``'s
    kind of device and execution mode (without one: this machine's default). ``InputError`` if
    this machine cannot run them (a GPU profile here without a GPU, FBGEMM missing)."""
    from autoshard.evaluation.measure_plan import MeasuredPlan, measure_plans
    from cost_model.profile import default_device, default_mode
    from cost_model.traces.records import BenchConfig

    device, mode = default_device(), default_mode()
    if profile is not None:
        device, mode = _device_and_mode(profile)
    config = BenchConfig(device=device, mode=mode, row_cap_bytes=row_cap_mb * 1024**2)

    def measured(
        plans: Sequence[ShardingPlan], batch_size: int, reference: int = 0, world_size: int | None = None
    ) -> list[MeasuredPlan]:
        ranks = world_size or (len(plans[0].devices) if plans else None)
        return measure_plans(plans, batch_size, config, rounds, reference, on_round=on_round, world_size=ranks)

    return measured


def _device_and_mode(profile: MeasuredProfile) -> tuple[str, Any]:
    """The profile's device and execution mode; ``InputError`` where this machine has neither."""
    from cost_model.profile import ExecutionMode, default_device, default_mode, fbgemm_available

    device = str(profile.device.get("device_type", default_device()))
    mode = ExecutionMode(profile.device.get("mode", default_mode().value))
    if device.startswith("cuda") and not default_device().startswith("cuda"):
        raise InputError(
            "device",
            f"profile {profile.profile} was measured on {device} and this machine has no GPU",
            "measure on a machine of the profile's kind (or pass --model with a profile of this one)",
        )
    if mode is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        raise InputError(
            "mode",
            f"profile {profile.profile} runs FBGEMM TBE and fbgemm-gpu is not installed here",
            "install it (scripts/setup.sh does)",
        )
    return device, mode


def plans_verifier(
    rounds: int,
    row_cap_mb: int,
    profile: MeasuredProfile | None,
    communication: CommunicationModel | None,
    top: int,
    on_round: Callable[[int], None] | None = None,
) -> Callable[[Sequence[ShardingPlan], int], Verification]:
    """``(plans, batch_size) -> verification.verify(...)`` with this machine's microbenchmark
    (``plans_measurer``): a device's cost in a round is its measured compute, plus its modelled
    all-to-all with ``communication`` (one device cannot measure an all-to-all)."""
    from autoshard.evaluation.verification import verify

    measurer = plans_measurer(rounds, row_cap_mb, profile, on_round)

    def verified(plans: Sequence[ShardingPlan], batch_size: int) -> Verification:
        def measure(candidates: Sequence[ShardingPlan]) -> list[list[float]]:
            return [
                round_maxima(plan, measured.round_device_ms, communication, batch_size)
                for plan, measured in zip(candidates, measurer(candidates, batch_size))
            ]

        return verify(plans, measure, top)

    return verified


def round_maxima(
    plan: ShardingPlan,
    round_device_ms: Sequence[Sequence[float]],
    communication: CommunicationModel | None,
    batch_size: int,
) -> list[float]:
    """Each round's max over the plan's devices of its measured compute (``round_device_ms``, a
    ``measure_plans`` result's) plus its all-to-all as ``communication`` models it (one device
    cannot measure an all-to-all)."""
    comm = [
        communication.cost_ms([s.as_table for s in d.shards], batch_size, len(plan.devices)) if communication else 0.0
        for d in plan.devices
    ]
    return [max(m + c for m, c in zip(devices, comm)) for devices in round_device_ms]


def verification_measures(communication: CommunicationModel | None) -> str:
    """What ``plans_verifier`` measures, for reports."""
    return "each device's compute, measured" + (
        ", plus its all-to-all as the profile's communication.json models it" if communication else ""
    )

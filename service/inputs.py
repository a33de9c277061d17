"""What every planning route does with a request body first: our frozen types from it (every rule
``autoshard.core.workload_file``'s, located by its path in the body), the service's limits, the
profile it names, and what that profile's cost model says of its tables."""

from __future__ import annotations

from autoshard.core.errors import InputError
from autoshard.core.types import Topology, Workload
from autoshard.core.workload_file import topology_from_dict, workload_from_dict
from autoshard.profiles import LoadedModel
from service.deps import StateDep
from service.errors import FieldError, input_error_at
from service.schemas.requests import PlanRequest, ReplanRequest
from service.settings import Settings


def parse_body(body: PlanRequest | ReplanRequest, settings: Settings) -> tuple[Workload, Topology]:
    """Our frozen types from the body; every rule is ``autoshard.core.workload_file``'s, located by
    its path in the body. Then the service's limits."""
    count = len(body.workload.tables)
    if count > settings.max_tables:
        raise FieldError(
            ("body", "workload", "tables"),
            f"{count} tables, more than this service's limit of {settings.max_tables} "
            "(AUTOSHARD_MAX_TABLES); plan fewer tables per request",
            "limit.max_tables",
            {"limit": settings.max_tables, "given": count},
        )
    try:
        workload, file_topology = workload_from_dict(body.workload.to_file_dict())
    except InputError as error:
        raise input_error_at(error, ("body", "workload")) from None
    if body.topology is not None:
        try:
            topology = topology_from_dict(body.topology.model_dump(exclude_none=True))
        except InputError as error:
            raise input_error_at(error, ("body", "topology")) from None
    elif file_topology is not None:
        topology = file_topology
    else:
        raise FieldError(
            ("body", "topology"),
            "a topology is required: give 'topology' {num_devices, device_memory_gb} (or put one in the workload)",
            "missing",
        )
    if topology.num_devices > settings.max_devices:
        loc = (
            ("body", "topology", "num_devices")
            if body.topology is not None
            else ("body", "workload", "topology", "num_devices")
        )
        raise FieldError(
            loc,
            f"{topology.num_devices} devices, more than this service's limit of "
            f"{settings.max_devices} (AUTOSHARD_MAX_DEVICES)",
            "limit.max_devices",
            {"limit": settings.max_devices, "given": topology.num_devices},
        )
    return workload, topology


def resolve_profile(
    state: StateDep, profile: str | None, compute_device: str | None = None, ddr_cap_gb: float | None = None
) -> LoadedModel | None:
    """The profile a request names (``torchrec`` with its ``compute_device`` and ``ddr_cap_gb``);
    a 422 if unknown, or given a device or cap it does not take."""
    try:
        return state.store.resolve(profile, compute_device, ddr_cap_gb)
    except InputError as error:
        raise input_error_at(error, ("body",)) from None


def check_inputs(model: LoadedModel | None, workload: Workload) -> list[str]:
    """The profile's cost model scores every plan: inputs it cannot answer (a precision or an
    optimizer it never saw) are a 422 at the table's field; mild extrapolation comes back as
    warnings in the answer."""
    if model is None:
        return []
    try:
        return list(model.model.check_workload(workload))
    except InputError as error:
        raise input_error_at(error, ("body", "workload")) from None

"""GET /v1/profiles: the loaded cost models, RL policies and measured device errors per device
profile, with their training metrics (or summary) and file hashes."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from autoshard.core.model_error import DEVICE_ERRORS_FILE
from autoshard.profiles import CHECKPOINT, POLICY_FILE
from service.deps import StateDep
from service.schemas.responses import (
    ArtifactOut,
    ErrorResponse,
    ProfileOut,
    ProfilesResponse,
)

router = APIRouter(tags=["profiles"])


@router.get(
    "/profiles",
    response_model=ProfilesResponse,
    responses={401: {"model": ErrorResponse, "description": "Missing or wrong bearer token."}},
)
async def list_profiles(state: StateDep) -> ProfilesResponse:
    """One entry per profile folder whose model loaded; `problems` says which did not, and why."""
    store = state.store
    return ProfilesResponse(
        profiles=[
            ProfileOut(
                profile=m.profile,
                default=m.profile == store.default_profile,
                device=m.device,
                artifacts=[
                    ArtifactOut(
                        kind="cost_model", file=f"{m.profile}/{CHECKPOINT}", sha256=m.sha256, metrics=m.metrics
                    ),
                    *(
                        [
                            ArtifactOut(
                                kind="policy",
                                file=f"{m.profile}/{POLICY_FILE}",
                                sha256=m.policy_sha256,
                                metrics=asdict(m.policy.info),
                            )
                        ]
                        if m.policy is not None and m.policy_sha256
                        else []
                    ),
                    *(
                        [
                            ArtifactOut(
                                kind="device_errors",
                                file=f"{m.profile}/{DEVICE_ERRORS_FILE}",
                                sha256=m.device_errors_sha256,
                                metrics={**m.device_errors.summary(), "reports": list(m.device_errors.reports)},
                            )
                        ]
                        if m.device_errors is not None and m.device_errors_sha256
                        else []
                    ),
                ],
            )
            for m in store.models.values()
        ],
        problems=list(store.problems),
    )

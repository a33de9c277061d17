"""GET /v1/profiles: the loaded cost models (later also RL policies) per device profile, with
their training metrics and file hashes."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import StateDep
from service.models import CHECKPOINT
from service.schemas.responses import ArtifactOut, ErrorResponse, ProfileOut, ProfilesResponse

router = APIRouter(tags=["profiles"])


@router.get("/profiles", response_model=ProfilesResponse,
            responses={401: {"model": ErrorResponse, "description": "Missing or wrong bearer token."}})
async def list_profiles(state: StateDep) -> ProfilesResponse:
    """One entry per profile folder whose model loaded; `problems` says which did not, and why."""
    store = state.store
    return ProfilesResponse(
        profiles=[ProfileOut(profile=m.profile, default=m.profile == store.default_profile, device=m.device,
                             artifacts=[ArtifactOut(kind="cost_model", file=f"{m.profile}/{CHECKPOINT}",
                                                    sha256=m.sha256, metrics=m.metrics)])
                  for m in store.models.values()],
        problems=list(store.problems))

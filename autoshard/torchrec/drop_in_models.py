"""The models the drop-in planner plans with: the ``model=`` it was given, or the profile that
``autoshard.profile_choice.default_profile_for`` picks for the topology's compute device (the
rule the CLI and the service follow too), loaded once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autoshard.core.errors import InputError
from autoshard.core.types import CostModel
from autoshard.planning.options import Models
from autoshard.profile_choice import TORCHREC_MODEL, default_profile_for, model_dir
from autoshard.profiles import load_profile, torchrec_profile

NO_MODEL_NAME = "none"
"""``model="none"``: plan without a cost model (the CLI's ``--model none``)."""


@dataclass(frozen=True, slots=True)
class ChosenModels:
    """The models, and which profile they are with why (for the plan's log line)."""

    models: Models
    profile: str | None
    reason: str


def choose_models(model: CostModel | str | Path | None, compute_device: str) -> ChosenModels:
    """``model``: a cost model object (used as given), a profile name of the model directory or
    a profile folder, ``"torchrec"`` (TorchRec's estimators, for the topology's ``cpu`` or GPU:
    ``autoshard.profiles.torchrec_profile``), ``"none"`` (no cost model: the
    heuristics), or ``None``: the default profile of ``compute_device`` (``default_profile_for``).
    ``InputError`` naming ``model`` for a profile that is not there or does not load."""
    if model is not None and not isinstance(model, (str, Path)):
        given = type(model).__name__
        return ChosenModels(Models(cost_model=model, profile=given), given, "given as model=")
    name: str | None
    folder: Path | None
    if model is None:
        choice = default_profile_for(compute_device)
        name, folder, reason = choice.profile, choice.folder, choice.reason
    else:
        name, folder, reason = str(model), None, "given as model="
        if name not in (TORCHREC_MODEL, NO_MODEL_NAME):
            folder = Path(model) if Path(model).is_dir() else model_dir() / name
    if name is None or name == NO_MODEL_NAME:
        return ChosenModels(Models(missing=reason), None, reason)
    if name == TORCHREC_MODEL:  # TorchRec's estimators, on the topology's kind of device (a GPU's: cuda)
        # the drop-in's topology is what TorchRec's storage reservation left: reserve no more
        estimator = torchrec_profile("cpu" if compute_device == "cpu" else "cuda", reserve=False)
        return ChosenModels(Models.of(estimator), estimator.profile, reason)
    assert folder is not None
    problems: list[str] = []
    loaded = load_profile(folder, problems) if (folder / "cost_model.pt").is_file() else None
    if loaded is None:
        raise InputError(
            "model",
            f"no loadable profile {name!r} ({'; '.join(problems) or f'no cost_model.pt in {folder}'})",
            f"name a profile folder of {model_dir()}, {TORCHREC_MODEL!r} or {NO_MODEL_NAME!r}, or leave model out",
        )
    return ChosenModels(Models.of(loaded), loaded.profile, reason)


__all__ = ["ChosenModels", "choose_models"]

"""Each shipped profile ships a policy trained against its own model (issue 62, part 4): ``rl``
plans every profile's tasks with the costs its policy learned, and warns of no mismatch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autoshard.rl.policy import OptionPolicy
from cost_model.checkpoint import load_cost_model

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
PROFILES = sorted(p.name for p in MODELS.iterdir() if not p.is_symlink() and (p / "cost_model.pt").is_file())


def test_every_shipped_profile_folder_is_checked():
    assert len(PROFILES) >= 6 and (MODELS / "default").resolve().name in PROFILES


@pytest.mark.parametrize("profile", PROFILES)
def test_a_shipped_profiles_policy_was_trained_against_its_own_model(profile):
    torch.set_num_threads(1)
    policy = OptionPolicy.load(MODELS / profile / "policy.pt")
    assert policy.info.cost_model == profile
    assert policy.model_mismatch(load_cost_model(MODELS / profile)) is None

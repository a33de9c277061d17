"""One rule picks the profile that prices a plan when the caller names none
(``default_profile_for``): the profile traced on this host's processor, else on cpu the default
profile, on cuda TorchRec's estimators, else the first of the device; and it says why."""

import json
import shutil
from pathlib import Path

import pytest

from autoshard.profile_choice import TORCHREC_MODEL, default_profile_for

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models"


def test_a_profile_traced_on_this_hosts_processor_is_the_default():
    """The issue's host: an AMD EPYC family 26 model 2 gets the profile traced on it, not the
    default AMD profile."""
    choice = default_profile_for("cpu", SHIPPED, host_cpu="AuthenticAMD family 26 model 2")
    assert choice.profile == "cpu-amd-epyc-f26m2-fbgemm_tbe-t1"
    assert "this host's processor (AuthenticAMD family 26 model 2)" in choice.reason
    intel = default_profile_for("cpu", SHIPPED, host_cpu="GenuineIntel family 6 model 207")
    assert intel.profile == "cpu-intel-r-xeon-r-processor-f6m207-fbgemm_tbe-t1"


def test_another_processor_gets_the_default_profile_and_says_why():
    choice = default_profile_for("cpu", SHIPPED, host_cpu="AuthenticAMD family 25 model 1")
    assert choice.profile == (SHIPPED / "default").resolve().name
    assert "the default profile" in choice.reason and "AuthenticAMD family 25 model 1" in choice.reason


def test_cuda_gets_its_gpus_profile_else_torchrecs_estimators():
    h200 = default_profile_for("cuda", SHIPPED, host_gpu="NVIDIA H200")
    assert h200.profile == "cuda-nvidia-h200-embedding_bag-t1" and "NVIDIA H200" in h200.reason
    other = default_profile_for("cuda", SHIPPED, host_gpu="NVIDIA A100-SXM4-80GB")
    assert other.profile in (TORCHREC_MODEL, "cuda-nvidia-h200-embedding_bag-t1")
    assert "NVIDIA A100-SXM4-80GB" in other.reason


def test_without_a_profile_of_the_device(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copytree(SHIPPED / "cpu-amd-epyc-fbgemm_tbe-t1", folder / "only-cpu", dirs_exist_ok=True)
    choice = default_profile_for("cpu", folder, host_cpu="x")
    assert choice.profile == "only-cpu" and "first shipped cpu profile" in choice.reason
    (folder / "only-cpu" / "metrics.json").write_text(json.dumps({"profile": {"device_type": "mtia"}}))
    none = default_profile_for("cpu", folder, host_cpu="x")
    assert none.profile is None and "no profile" in none.reason


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_host_is_read_when_not_given(device):
    choice = default_profile_for(device)
    assert choice.reason


def test_the_cli_and_the_service_default_to_the_same_rule(monkeypatch):
    """A command that names no profile, and the service, take ``default_profile_for("cpu")``'s
    choice; ``AUTOSHARD_MODEL`` still overrides the CLI's."""
    from autoshard.profile_choice import default_profile_for, model_dir
    from autoshard.profiles import DEFAULT_MODEL, default_profile_path, load_models

    monkeypatch.delenv("AUTOSHARD_MODEL", raising=False)
    choice = default_profile_for("cpu")
    path, why = default_profile_path()
    assert path == choice.folder and why == choice.reason
    assert load_models(model_dir()).default_profile == choice.profile
    monkeypatch.setenv("AUTOSHARD_MODEL", str(path))
    assert default_profile_path() == (DEFAULT_MODEL, "AUTOSHARD_MODEL")

"""Which shipped profile prices a plan when the caller names none: one rule for the CLI, the
service and the drop-in planner.

``default_profile_for(compute_device)`` picks, among the profile folders of the model directory
(``AUTOSHARD_MODEL_DIR``, default the checkout's ``data/models``):

1. a profile traced on this host's processor (``cpu``: the vendor, family and model of
   ``/proc/cpuinfo``, as ``cost_model.profile.cpu_model`` records them in each profile), or on
   this host's GPU (``cuda``: the device name), when one ships;
2. on ``cuda`` (and any device but ``cpu``), else TorchRec's estimators (the ``torchrec`` cost
   model), when installed: a GPU profile traced on another GPU model (or another kernel mode)
   does not transfer, while TorchRec's analytical model knows the GPU classes;
3. else the directory's ``default`` profile, when it was traced on that kind of device (on
   ``cpu``: the shipped default CPU profile, the product's choice for a CPU it has no trace of);
4. else the first profile (by name) traced on that kind of device;
5. else no cost model (the heuristics' proxies).

It reads each profile's ``metrics.json`` (what ``autoshard cost train`` writes: the device it was
traced on), not its checkpoint, so choosing costs no model load. ``ProfileChoice.reason`` says
which rule chose and why, for the log line of a plan.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

MODEL_DIR_ENV = "AUTOSHARD_MODEL_DIR"
SHIPPED_MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
DEFAULT_LINK = "default"
KNOWN_DEVICES = ("cpu", "cuda", "mtia")
TORCHREC_MODEL = "torchrec"
"""The profile name of the cost model built on TorchRec's estimators (no folder: it is code)."""
TORCHREC_COMPUTE_DEVICES = ("cuda", "cpu")
"""``--compute-device``: the devices TorchRec's estimators price (``cuda`` the default)."""


def torchrec_folder(compute_device: str, models: Path | None = None) -> Path:
    """Where the ``torchrec`` model's files for ``compute_device`` live (its ``policy.pt``, and
    ``policy train``'s run): ``<model dir>/torchrec/<compute device>``. Its cost model is code,
    so the folder holds no ``cost_model.pt`` and is no profile of its own."""
    return (model_dir() if models is None else models) / TORCHREC_MODEL / compute_device


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The profile chosen: its name (a folder of the model directory, ``TORCHREC_MODEL``, or
    ``None`` for no cost model), its folder (``None`` unless a folder) and why it was chosen."""

    profile: str | None
    folder: Path | None
    reason: str


@dataclass(frozen=True, slots=True)
class _Shipped:
    name: str
    folder: Path
    device_type: str
    cpu: str | None
    device_name: str


def model_dir() -> Path:
    """The folder of profiles: ``AUTOSHARD_MODEL_DIR``, else the checkout's ``data/models``."""
    return Path(os.environ.get(MODEL_DIR_ENV) or SHIPPED_MODELS)


def default_profile_for(
    compute_device: str,
    models: Path | None = None,
    host_cpu: str | None = None,
    host_gpu: str | None = None,
) -> ProfileChoice:
    """The profile for ``compute_device`` (``cpu``, ``cuda``, ``mtia``: TorchRec's names) by the
    rules of the module docstring. ``host_cpu`` / ``host_gpu``: this host's processor and GPU
    name (default: read from the host)."""
    models = model_dir() if models is None else models
    device = "cuda" if compute_device.startswith("cuda") else compute_device
    shipped = [p for p in _shipped(models) if p.device_type in (device, "")]  # "": it does not say
    here = _host(device, host_cpu, host_gpu)
    if here is not None:
        for profile in shipped:
            if here in (profile.cpu, profile.device_name):
                return ProfileChoice(profile.name, profile.folder, f"traced on this host's processor ({here})")
    unmatched = f"no shipped {device} profile was traced on this host's processor ({here or 'unknown'})"
    if device != "cpu" and _torchrec_model_installed():
        return ProfileChoice(TORCHREC_MODEL, None, f"TorchRec's estimators (the {TORCHREC_MODEL!r} model): {unmatched}")
    default = default_link_name(models)
    for profile in shipped:
        if profile.name == default:
            return ProfileChoice(profile.name, profile.folder, f"the default profile; {unmatched}")
    if shipped:
        first = shipped[0]
        return ProfileChoice(first.name, first.folder, f"the first shipped {device} profile; {unmatched}")
    why = f"no profile in {models} was traced on a {device} device"
    return ProfileChoice(None, None, f"no cost model (the heuristics' proxies): {why}")


def _torchrec_model_installed() -> bool:
    """Whether the cost model built on TorchRec's estimators ships in this checkout."""
    import importlib.util

    try:
        return importlib.util.find_spec("autoshard.torchrec.cost_model") is not None
    except (ImportError, ValueError):
        return False


def _shipped(models: Path) -> list[_Shipped]:
    """Every profile folder of ``models`` with a cost model, by name, with the device of its
    ``metrics.json`` (else of its name: ``cpu-...``, ``cuda-...``; else ``""``, any device)."""
    found: list[_Shipped] = []
    if not models.is_dir():
        return found
    for folder in sorted(models.iterdir()):
        if folder.name == DEFAULT_LINK or not (folder / "cost_model.pt").is_file():
            continue
        try:
            profile = json.loads((folder / "metrics.json").read_text()).get("profile") or {}
        except (OSError, ValueError, AttributeError):
            profile = {}
        prefix = folder.name.split("-", 1)[0]  # a profile without metrics: its name's device, if it names one
        device_type = str(profile.get("device_type") or (prefix if prefix in KNOWN_DEVICES else ""))
        found.append(
            _Shipped(folder.name, folder, device_type, profile.get("cpu"), str(profile.get("device_name") or ""))
        )
    return found


def default_link_name(models: Path) -> str | None:
    """The profile the model directory's ``default`` link (or file) names, if any."""
    link = models / DEFAULT_LINK
    try:
        if link.is_symlink() or link.is_dir():
            return link.resolve().name
        if link.is_file():
            return link.read_text().strip() or None
    except OSError:
        return None
    return None


def _host(device: str, host_cpu: str | None, host_gpu: str | None) -> str | None:
    """This host's processor as profiles record it: the CPU's vendor, family and model on cpu,
    the GPU's name on cuda (``None``: unknown)."""
    if device == "cpu":
        if host_cpu is not None:
            return host_cpu
        from cost_model.profile import cpu_model

        return cpu_model("cpu")
    if device == "cuda":
        if host_gpu is not None:
            return host_gpu
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return None


__all__ = [
    "MODEL_DIR_ENV",
    "ProfileChoice",
    "TORCHREC_COMPUTE_DEVICES",
    "TORCHREC_MODEL",
    "default_profile_for",
    "model_dir",
    "torchrec_folder",
]

"""The device profile a measurement belongs to: traces and models of one profile never mix."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass
from enum import Enum
from importlib import metadata

import torch

# Allocator settings that make CPU timings of embedding steps stable (docs/decisions.md, 3).
MALLOC_SETTINGS = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1000000000000", "MALLOC_TOP_PAD_": "1073741824"}


class ExecutionMode(str, Enum):
    """How a device runs its set of tables."""

    FBGEMM_TBE = "fbgemm_tbe"  # one fused table-batched op (SplitTableBatchedEmbeddingBagsCodegen)
    EMBEDDING_BAG = "embedding_bag"  # one torch EmbeddingBag per table, sparse grads + SGD


def fbgemm_version() -> str | None:
    for dist in ("fbgemm-gpu-cpu", "fbgemm-gpu", "fbgemm_gpu_cpu", "fbgemm_gpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def fbgemm_available() -> bool:
    try:
        import fbgemm_gpu  # noqa: F401
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: F401
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


def default_mode() -> ExecutionMode:
    return ExecutionMode.FBGEMM_TBE if fbgemm_available() else ExecutionMode.EMBEDDING_BAG


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cpu_model(device: str) -> str | None:
    """The CPU's vendor, family and model from /proc/cpuinfo ("AuthenticAMD family 26 model 2"),
    or ``None`` (a GPU, or no /proc): a VM's model name ("AMD EPYC") hides the generation, and
    hosts of one name can measure the same sets far apart (docs/decisions.md, 11)."""
    if device.startswith("cuda"):
        return None
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return None
    if not all(k in fields for k in ("vendor_id", "cpu family", "model")):
        return None
    return f"{fields['vendor_id']} family {fields['cpu family']} model {fields['model']}"


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Where and how costs were measured. ``id`` names a cost model's profile folder.
    ``cpu`` (``cpu_model``) is ``None`` in traces recorded before it was."""

    device_type: str
    device_name: str
    mode: ExecutionMode
    threads: int
    torch_version: str
    fbgemm_version: str | None
    cpu: str | None = None

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.device_name.lower()).strip("-")[:40]
        found = re.search(r"family (\d+) model (\d+)", self.cpu or "")
        generation = f"-f{found[1]}m{found[2]}" if found else ""
        return f"{self.device_type}-{slug}{generation}-{self.mode.value}-t{self.threads}"

    def to_dict(self) -> dict:
        return {**asdict(self), "mode": self.mode.value, "id": self.id}

    @classmethod
    def from_dict(cls, data: dict) -> DeviceProfile:
        return cls(
            data["device_type"],
            data["device_name"],
            ExecutionMode(data["mode"]),
            int(data["threads"]),
            data["torch_version"],
            data.get("fbgemm_version"),
            data.get("cpu"),
        )


def detect_profile(device: str, mode: ExecutionMode, threads: int) -> DeviceProfile:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return DeviceProfile(
        kind,
        device_name(device),
        mode,
        threads,
        str(torch.__version__),
        fbgemm_version() if mode is ExecutionMode.FBGEMM_TBE else None,
        cpu_model(device),
    )


def malloc_settings_active() -> bool:
    return all(os.environ.get(k) == v for k, v in MALLOC_SETTINGS.items())

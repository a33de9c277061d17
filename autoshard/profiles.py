"""The models the service loaded at start-up, and what they make available.

Every ``<model_dir>/<profile>/cost_model.pt`` is loaded (the profile is the folder's name), with
the profile's all-to-all (``communication.json``), RL policy (``policy.pt``) and the model's
measured device errors (``device_errors.json``) when present;
``<model_dir>/default`` names the default profile, as a symlink to a profile folder or a text
file holding its name. A missing or corrupt file does not stop the service: it starts with the
heuristics and says why it is degraded (unless ``fail_fast``). Request fields only ever select
a profile by name in the loaded dict: none becomes a file-system path.

The CLI, the benchmarks and the lab's scripts load one profile folder the same way
(``load_profile_or_none``; ``DEFAULT_MODEL`` is the shipped one).
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoshard.core.communication import COMMUNICATION_FILE, CommunicationModel
from autoshard.core.errors import InputError, ModelError
from autoshard.core.model_error import DEVICE_ERRORS_FILE, DeviceErrors
from autoshard.core.types import GIB, CostModel
from autoshard.profile_choice import (
    TORCHREC_COMPUTE_DEVICES,
    TORCHREC_MODEL,
    default_profile_for,
    model_dir,
    torchrec_folder,
)

CHECKPOINT = "cost_model.pt"
POLICY_FILE = "policy.pt"  # autoshard.rl.policy.POLICY_FILE, named here so that loading it is lazy
METRICS = "metrics.json"
DEFAULT_LINK = "default"
# The shipped cost model: data/models/default points at the folder of the default device profile.
DEFAULT_MODEL = Path(
    os.environ.get("AUTOSHARD_MODEL", Path(__file__).resolve().parents[1] / "data" / "models" / DEFAULT_LINK)
)
NO_MODEL = "none"  # --model none: plan without a cost model (the heuristics, proxy costs)
DEFAULT_COMPUTE_DEVICE = "cuda"
"""What ``--model torchrec`` (a request's ``"model": "torchrec"``) prices unless
``--compute-device`` (``compute_device``) says otherwise."""


MAX_DDR_CAP_GB = float(2**20)
"""The most host memory per rank ``--ddr-cap-gb`` (``ddr_cap_gb``) takes: 1 PiB, past any host."""
MAX_DDR_CAPS = 8
"""How many host-memory caps of TorchRec's estimator a ``ModelStore`` (and each planning thread)
keeps made: a request may name any cap, and each one's model is a cache of its own."""


def torchrec_label(compute_device: str, ddr_cap_gb: float | None = None) -> str:
    """The profile name TorchRec's estimator for ``compute_device`` goes by in reports, the
    service's store and policy files: ``torchrec (cuda)``, ``torchrec (cpu)``; with a host memory
    cap, ``torchrec (cuda, ddr_cap 64.0 GiB)`` (the float's ``repr``: ``torchrec_of_label`` reads
    the very cap back, so that a planning worker given the label makes the same model)."""
    cap = "" if ddr_cap_gb is None else f", ddr_cap {float(ddr_cap_gb)!r} GiB"
    return f"{TORCHREC_MODEL} ({compute_device}{cap})"


TORCHREC_LABELS = {torchrec_label(d): d for d in TORCHREC_COMPUTE_DEVICES}
_LABEL = re.compile(rf"{TORCHREC_MODEL} \(({'|'.join(TORCHREC_COMPUTE_DEVICES)})(?:, ddr_cap (\S+) GiB)?\)")


def torchrec_of_label(label: str) -> tuple[str, float | None] | None:
    """(compute device, host memory cap in GiB or None) of a ``torchrec_label``; None for any other name."""
    found = _LABEL.fullmatch(label)
    if found is None:
        return None
    try:
        return found[1], None if found[2] is None else float(found[2])
    except ValueError:
        return None


def check_ddr_cap(ddr_cap_gb: float | None, compute_device: str, option: str = "--ddr-cap-gb") -> int | None:
    """Each rank's host memory in bytes for ``ddr_cap_gb`` GiB (None: TorchRec's default), or an
    ``InputError`` naming ``option``: the cap must be positive (up to ``MAX_DDR_CAP_GB``), and is
    cuda's: on cpu every table is in host memory, which the topology's device memory gives."""
    if ddr_cap_gb is None:
        return None
    if not 0 < ddr_cap_gb <= MAX_DDR_CAP_GB:  # NaN too
        raise InputError(
            option,
            f"must be a positive number of GiB (at most {MAX_DDR_CAP_GB:,.0f}), got {ddr_cap_gb!r}",
            "give each rank's host memory in GiB, e.g. 128 (TorchRec's default)",
        )
    if compute_device != "cuda":
        raise InputError(
            option,
            f"caps the host memory of cuda's UVM tables; on {compute_device} every table is in host memory, "
            "which the topology's device memory gives",
            "leave it out, and give each rank's host memory as its device memory (--memory-gb, a request's "
            "topology.device_memory_gb)",
        )
    return max(1, round(ddr_cap_gb * GIB))


def ddr_cap_without_torchrec(option: str, model_option: str) -> InputError:
    """The error for a host memory cap given with a model other than TorchRec's estimator."""
    return InputError(
        option,
        f"sets TorchRec's host memory per rank (its Topology ddr_cap), which only the {TORCHREC_MODEL!r} model counts",
        f"leave {option} out, or plan with {model_option} {TORCHREC_MODEL}",
    )


def check_compute_device(compute_device: str, option: str = "--compute-device") -> str:
    """``compute_device`` if TorchRec's estimator prices it, else an ``InputError`` naming ``option``."""
    if compute_device not in TORCHREC_COMPUTE_DEVICES:
        raise InputError(
            option,
            f"TorchRec's estimator prices {' or '.join(TORCHREC_COMPUTE_DEVICES)}, not {compute_device!r}",
            f"use one of: {', '.join(TORCHREC_COMPUTE_DEVICES)}",
        )
    return compute_device


@dataclass(frozen=True)
class LoadedModel:
    """One profile's artifacts (cost model, all-to-all, policy) and what /v1/profiles tells about them."""

    profile: str
    model: Any  # cost_model.predictor.NeuralCostModel (a CostModel)
    device: dict[str, Any]
    sha256: str
    metrics: dict[str, Any]
    communication: CommunicationModel | None = None  # the profile's all-to-all, added to device costs
    policy: Any = None  # autoshard.rl.policy.OptionPolicy: the rl planners' policy, when one loaded
    policy_sha256: str | None = None
    policy_problem: str | None = None  # why the profile has no policy (missing or corrupt policy.pt)
    device_errors: DeviceErrors | None = None  # the model's measured errors: plans' expected max (device_errors.json)
    device_errors_problem: str | None = None  # why device_errors.json, which is there, did not load
    device_errors_sha256: str | None = None


@dataclass
class ModelStore:
    """Cost models by profile. Planning threads use their own copy of each model
    (``for_thread``): the model's per-table caches are plain dicts, not safe to share."""

    models: dict[str, LoadedModel] = field(default_factory=dict)
    default_profile: str | None = None
    problems: list[str] = field(default_factory=list)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    model_dir: Path | None = None  # where the torchrec model's policies are (``torchrec_folder``)
    _builtin: dict[str, LoadedModel] = field(default_factory=dict, repr=False)  # TorchRec's, once asked
    _capped: dict[str, LoadedModel] = field(default_factory=dict, repr=False)  # with a ddr_cap, latest last
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def resolve(
        self, profile: str | None, compute_device: str | None = None, ddr_cap_gb: float | None = None
    ) -> LoadedModel | None:
        """The model of ``profile`` (default: the default profile; ``None`` when none is loaded);
        ``compute_device``: what ``torchrec`` prices (default ``DEFAULT_COMPUTE_DEVICE``), and
        ``ddr_cap_gb``: each rank's host memory on cuda (default TorchRec's), for no other profile.
        An unknown profile name, compute device or a cap out of range is an ``InputError``."""
        if ddr_cap_gb is not None and profile != TORCHREC_MODEL:
            raise ddr_cap_without_torchrec("ddr_cap_gb", "profile")
        if compute_device is not None and profile != TORCHREC_MODEL:
            raise InputError(
                "compute_device",
                f"only the {TORCHREC_MODEL!r} model prices a compute device of choice; "
                f"{profile or 'the default profile'!r} prices the device it was traced on",
                f"leave compute_device out, or plan with model {TORCHREC_MODEL!r}",
            )
        if profile is None:
            return self.models.get(self.default_profile) if self.default_profile else None
        if profile == TORCHREC_MODEL and profile not in self.models:  # TorchRec's estimator, made when asked
            device = check_compute_device(compute_device or DEFAULT_COMPUTE_DEVICE, "compute_device")
            check_ddr_cap(ddr_cap_gb, device, "ddr_cap_gb")
            return self.get(torchrec_label(device, ddr_cap_gb))
        if profile not in self.models:
            known = ", ".join([*sorted(self.models), TORCHREC_MODEL])
            raise InputError("profile", f"no cost model profile {profile!r}", f"use one of: {known} (GET /v1/profiles)")
        return self.models[profile]

    def get(self, profile: str) -> LoadedModel | None:
        """The loaded profile ``profile``, or TorchRec's estimator by its label (``torchrec_label``,
        made when first asked; not listed among the loaded ones); None if neither. The estimator
        with a host memory cap shares its device's policy; the ``MAX_DDR_CAPS`` caps asked last are kept."""
        torchrec = None if profile in self.models else torchrec_of_label(profile)
        if torchrec is None:
            return self.models.get(profile)
        device, cap = torchrec
        base = torchrec_label(device)
        if base not in self._builtin:
            self._builtin[base] = torchrec_profile(device, models=self.model_dir)
        if cap is None:
            return self._builtin[base]
        with self._lock:
            found = self._capped.pop(profile, None) or with_ddr_cap(self._builtin[base], cap)
            self._capped[profile] = found
            _keep_latest(self._capped)
        return found

    def __getitem__(self, profile: str) -> LoadedModel:
        """``get``, for a profile known to be there (``KeyError`` if not)."""
        found = self.get(profile)
        if found is None:
            raise KeyError(profile)
        return found

    def for_thread(self, profile: str) -> CostModel:
        copies: dict[str, CostModel] = self._local.__dict__.setdefault("models", {})
        if profile not in copies:
            copies[profile] = copy.deepcopy(self[profile].model)
            _keep_latest(copies)
        return copies[profile]


def _keep_latest(made: dict[str, Any]) -> None:
    """Drop the oldest models with a host memory cap from ``made`` (by label, oldest first) past
    ``MAX_DDR_CAPS`` of them: the caps requests name are unbounded, memory is not."""
    capped = [label for label in made if (found := torchrec_of_label(label)) is not None and found[1] is not None]
    for label in capped[:-MAX_DDR_CAPS]:
        del made[label]


def _metrics(folder: Path, stored: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    metrics = dict(stored)
    path = folder / METRICS
    if path.is_file():
        try:
            extra = json.loads(path.read_text())
            metrics.update(extra if isinstance(extra, dict) else {"metrics.json": extra})
        except (OSError, ValueError) as error:
            problems.append(f"{path}: unreadable ({error})")
    return metrics


def load_profile(folder: Path, problems: list[str]) -> LoadedModel | None:
    """One profile folder's artifacts: the cost model (``None`` if it cannot load), and its
    all-to-all, policy and measured device errors when present. What cannot load is appended to
    ``problems``; a missing or corrupt policy leaves the rl planners unavailable, and corrupt
    device errors the plans' expected max, not the profile. The CLI and the service both load
    profiles here."""
    from cost_model.checkpoint import file_sha256, load_cost_model

    file = folder / CHECKPOINT
    try:
        model = load_cost_model(file)
        sha = file_sha256(file)
    except (ModelError, OSError) as error:
        problems.append(f"profile {folder.name!r}: {error}")  # the service logs them as it starts
        return None
    communication = None
    if (folder / COMMUNICATION_FILE).is_file():
        try:
            communication = CommunicationModel.load(folder / COMMUNICATION_FILE)
        except InputError as error:
            problems.append(f"profile {folder.name!r}: {error}")
    policy, policy_sha, policy_problem = _policy(folder, folder.name, problems)
    device_errors, errors_problem, errors_sha = None, None, None
    errors_file = folder / DEVICE_ERRORS_FILE
    if errors_file.exists():
        try:
            device_errors, errors_sha = DeviceErrors.load(errors_file), file_sha256(errors_file)
        except (InputError, OSError) as error:
            errors_problem = f"profile {folder.name!r}: {error}; plans carry no expected max"
            problems.append(errors_problem)
    return LoadedModel(
        folder.name,
        model,
        model.profile.to_dict(),
        sha,
        _metrics(folder, model.metrics, problems),
        communication,
        policy,
        policy_sha,
        policy_problem,
        device_errors,
        errors_problem,
        errors_sha,
    )


def load_models(model_dir: Path, default_profile: str | None = None) -> ModelStore:
    """Load every profile's cost model; problems are recorded, not raised."""
    store = ModelStore(model_dir=model_dir)
    try:
        import cost_model.checkpoint  # noqa: F401
    except ImportError as error:  # torch missing or broken: heuristics only
        store.problems.append(f"cost models cannot load here ({error}); cost_greedy is unavailable")
        return store
    if not model_dir.is_dir():
        store.problems.append(
            f"no model directory {model_dir}; cost_greedy is unavailable "
            "(train one with `autoshard cost train`, or set AUTOSHARD_MODEL_DIR)"
        )
        return store
    for folder in sorted(
        p for p in model_dir.iterdir() if p.is_dir() and not (p.name == DEFAULT_LINK and p.is_symlink())
    ):
        if not (folder / CHECKPOINT).exists():
            continue
        loaded = load_profile(folder, store.problems)
        if loaded is not None:
            store.models[folder.name] = loaded
    # AUTOSHARD_DEFAULT_PROFILE, else a profile traced on this host's CPU, else the ``default`` link
    wanted = default_profile or default_profile_for("cpu", model_dir).profile
    if wanted and wanted in store.models:
        store.default_profile = wanted
    elif wanted:
        store.problems.append(
            f"default profile {wanted!r}"
            + (" (AUTOSHARD_DEFAULT_PROFILE)" if default_profile else "")
            + f" has no loadable cost model in {model_dir}; requests that name no profile get "
            + (repr(sorted(store.models)[0]) if store.models else "the heuristics alone")
        )
    if store.default_profile is None and store.models:
        store.default_profile = sorted(store.models)[0]
    if not store.models:
        store.problems.append(
            f"no cost model in {model_dir} (expected <profile>/{CHECKPOINT}); cost_greedy is unavailable"
        )
    return store


def torchrec_profile(
    compute_device: str = DEFAULT_COMPUTE_DEVICE,
    reserve: bool = True,
    models: Path | None = None,
    ddr_cap_gb: float | None = None,
) -> LoadedModel:
    """TorchRec's estimator for ``compute_device`` as a profile (``--model torchrec``): nothing
    trained; its cost includes communication (no all-to-all model); its policy is
    ``torchrec_folder(compute_device, models)/policy.pt`` when one was trained (``models``: the
    model directory, default ``model_dir()``). ``reserve``: apply TorchRec's storage reservation
    to the topology's memory (not where the caller already has, as the drop-in does).
    ``ddr_cap_gb``: each rank's host memory for the UVM tables (``with_ddr_cap``).
    ``InputError`` naming ``--model`` when torchrec does not import, ``--compute-device`` for a
    device it does not price, ``--ddr-cap-gb`` for a cap it cannot take."""
    check_compute_device(compute_device)
    check_ddr_cap(ddr_cap_gb, compute_device)
    try:
        from autoshard.torchrec.cost_model import TorchRecCostModel
    except (ImportError, OSError) as error:
        raise InputError(
            "--model", f"TorchRec's estimator needs torchrec, which does not import ({error})", "install torchrec"
        ) from None
    model = TorchRecCostModel(compute_device) if reserve else TorchRecCostModel(compute_device, None)
    device = {"device_type": compute_device, "estimator": "torchrec.EmbeddingPerfEstimator"}
    label = torchrec_label(compute_device)
    policy, policy_sha, policy_problem = _policy(torchrec_folder(compute_device, models), label)
    loaded = LoadedModel(label, model, device, "", {}, None, policy, policy_sha, policy_problem)
    return loaded if ddr_cap_gb is None else with_ddr_cap(loaded, ddr_cap_gb)


def with_ddr_cap(loaded: LoadedModel, ddr_cap_gb: float) -> LoadedModel:
    """TorchRec's estimator ``loaded`` (``torchrec_profile``, on cuda) with ``ddr_cap_gb`` GiB of
    host memory per rank (TorchRec's ``Topology`` ``ddr_cap``, where the UVM kernels keep their
    weights; plans past it are refused), labelled with the cap, its policy shared."""
    from autoshard.torchrec.cost_model import TorchRecCostModel

    device = loaded.model.compute_device
    cap = check_ddr_cap(ddr_cap_gb, device)
    model = TorchRecCostModel(device, loaded.model.storage_reservation, ddr_cap_bytes=cap)
    return replace(
        loaded, profile=torchrec_label(device, ddr_cap_gb), model=model, device={**loaded.device, "ddr_cap_bytes": cap}
    )


def _policy(folder: Path, profile: str, problems: list[str] | None = None) -> tuple[Any, str | None, str | None]:
    """(policy, its sha256, why there is none) of a profile folder's ``policy.pt``; what does
    not load is appended to ``problems`` too, with the profile's name."""
    from cost_model.checkpoint import file_sha256

    policy_file = folder / POLICY_FILE
    if not policy_file.exists():
        if problems is not None:
            problems.append(
                f"profile {profile!r} has no {POLICY_FILE}: the rl planners are unavailable "
                "(train one with `autoshard policy train`)"
            )
        return None, None, f"{profile}: {policy_file} is missing (train one with `autoshard policy train`)"
    try:
        from autoshard.rl.policy import OptionPolicy

        return OptionPolicy.load(policy_file), file_sha256(policy_file), None
    except (ModelError, ImportError, OSError) as error:
        if problems is not None:
            problems.append(f"profile {profile!r}: {error}; the rl planners are unavailable")
        return None, None, str(error)


def load_profile_or_none(
    path: Path | None, option: str = "--model", compute_device: str | None = None, ddr_cap_gb: float | None = None
) -> tuple[LoadedModel | None, str | None]:
    """(the profile's artifacts, None), or (None, why there are none) when no model is there.
    ``path``: a profile folder (or its cost_model.pt), default the shipped profile, ``none``
    (``NO_MODEL``): no model, on purpose, or ``torchrec``: TorchRec's estimator for
    ``compute_device`` (``--compute-device``, default cuda; an ``InputError`` with any other
    model, which prices the device it was traced on) with ``ddr_cap_gb`` of host memory per rank
    (``--ddr-cap-gb``, default TorchRec's; likewise an ``InputError`` with any other model); a
    path given that does not exist is an ``InputError`` naming ``option``. Artifacts load as the
    service loads them (``load_profile``).

    A model that is there but unreadable raises ``ModelError``: that is an error, not an absence.
    """
    if path is not None and str(path) == TORCHREC_MODEL:
        device = compute_device or DEFAULT_COMPUTE_DEVICE
        return torchrec_profile(device, models=policy_models_dir(), ddr_cap_gb=ddr_cap_gb), None
    if ddr_cap_gb is not None:
        raise ddr_cap_without_torchrec("--ddr-cap-gb", "--model")
    if compute_device is not None:
        raise InputError(
            "--compute-device",
            f"only --model {TORCHREC_MODEL} prices a compute device of choice; "
            "a profile prices the device it was traced on",
            f"leave --compute-device out, or pass --model {TORCHREC_MODEL}",
        )
    if path is not None and str(path) == NO_MODEL:
        return None, f"no cost model (--model {NO_MODEL})"
    if path is not None and not path.exists():
        plain = f", or pass {option} {NO_MODEL} to plan with the heuristics alone (proxy costs)"
        raise InputError(
            option, f"no cost model folder or file at {path}", "check the path" + (plain if option == "--model" else "")
        )
    if path is not None and path.is_file() and path.suffix != ".pt":
        raise InputError(option, f"{path} is a file, not a profile folder", f"pass the folder that holds {CHECKPOINT}")
    path = path if path is not None else default_profile_path()[0]
    if not path.exists():
        return None, f"no cost model at {path}"
    try:
        import cost_model.checkpoint  # noqa: F401
    except ImportError as error:
        return None, f"cannot load cost models ({error})"
    problems: list[str] = []
    loaded = load_profile(path if path.is_dir() else path.parent, problems)
    if loaded is None:
        raise ModelError("; ".join(problems))
    return loaded, None


def policy_models_dir() -> Path:
    """The model directory the CLI's ``torchrec`` policies come from: ``AUTOSHARD_MODEL``'s
    folder's parent where it is set (the shipped ``data/models/default``'s is ``data/models``),
    else ``model_dir()``."""
    shipped = os.environ.get("AUTOSHARD_MODEL")
    return Path(shipped).parent if shipped else model_dir()


def default_profile_path() -> tuple[Path, str]:
    """The profile a command that names none plans with, and why: ``AUTOSHARD_MODEL`` if set, else
    ``profile_choice.default_profile_for("cpu")`` (a profile traced on this host's CPU, else the
    shipped default), the same rule as the service's and the drop-in's."""
    if os.environ.get("AUTOSHARD_MODEL"):
        return DEFAULT_MODEL, "AUTOSHARD_MODEL"
    choice = default_profile_for("cpu")
    return (choice.folder or DEFAULT_MODEL), choice.reason


def load_profile_or_exit(path: Path | None) -> LoadedModel:
    """``load_profile_or_none`` for scripts that cannot run without a profile: exit with why not."""
    profile, why = load_profile_or_none(path)
    if profile is None:
        sys.exit(f"error: {why}")
    return profile


def measuring_profile(path: Path | None) -> LoadedModel:
    """For a script that measures: exit unless the harness's allocator settings are set (they must
    be before the process starts: docs/profiles.md, 'Measurement settings'), plan on one core, and
    load the profile."""
    from cost_model.process import one_thread
    from cost_model.profile import malloc_settings_active

    if not malloc_settings_active():
        sys.exit("error: set the harness's allocator settings first (docs/profiles.md, 'Measurement settings')")
    one_thread()
    return load_profile_or_exit(path)

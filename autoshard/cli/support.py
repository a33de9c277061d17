"""Shared CLI plumbing: clean errors instead of tracebacks, JSON output, allocator settings."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from autoshard.core.errors import AutoShardError, InputError
from autoshard.core.types import Topology

if TYPE_CHECKING:
    from autoshard.core.communication import CommunicationModel
    from autoshard.core.types import ShardingPlan, Workload
    from autoshard.evaluation.verification import Verification
    from autoshard.profiles import LoadedModel

console = Console(stderr=True)
# The shipped cost model: data/models/default points at the folder of the default device profile.
DEFAULT_MODEL = Path(
    os.environ.get("AUTOSHARD_MODEL", Path(__file__).resolve().parents[2] / "data" / "models" / "default")
)
NO_MODEL = "none"  # --model none: plan without a cost model (the heuristics, proxy costs)
F = TypeVar("F", bound=Callable[..., Any])
DEPARTURE_MARGIN_HELP = (
    "How much lower (a fraction) rl+refine's plan must be predicted than cost_greedy's to be "
    "returned instead, and a plan with column splits than the plan without (default 0.1; 0: the "
    "lowest prediction wins). Smaller predicted gains are within the model's error "
    "(docs/decisions.md, 16 and 20)."
)
COLUMN_SPLIT_HELP = (
    "Which planners may split costly or large tables column-wise. Default: the cost-model planners "
    "(cost_greedy, rl, rl+refine: a split plan only where predicted more than the departure margin "
    "lower) and TorchRec's; the heuristics place whole tables, as the classic baselines do. "
    "--column-split: every planner; --no-column-split: none."
)
# Help panels: each command's options in groups, everyday ones first (Typer's rich_help_panel).
WORKLOAD = "Workload and cluster"
PLANNERS = "Planners"
OUTPUT = "Output"
MEASUREMENT = "Measurement"
ADVANCED = "Advanced"


def friendly_errors(fn: F) -> F:
    """Turn the product's own errors (and OS errors) into a red message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (AutoShardError, OSError) as error:
            console.print(f"[red]error:[/red] {escape(_described(error))}", highlight=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/yellow]: progress so far is saved; rerun the same command to resume")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _described(error: Exception) -> str:
    """The error as a user reads it: an OS error names its path, what is wrong and a fix."""
    if not isinstance(error, OSError) or not error.filename:
        return str(error)
    fixes = {
        IsADirectoryError: "is a folder (fix: pass a file inside it, or a file name)",
        FileNotFoundError: "does not exist, or its folder does not (fix: check the path, or create the folder)",
        PermissionError: "is not readable or writable by this user (fix: check its permissions)",
        NotADirectoryError: "has a file where a folder should be (fix: check the path)",
        FileExistsError: "is a file where a folder is needed (fix: pass a folder path, or move the file)",
    }
    what = next((text for kind, text in fixes.items() if isinstance(error, kind)), error.strerror or str(error))
    return f"{error.filename}: {what}"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=1) + "\n")


def ensure_malloc_settings() -> None:
    """Re-exec this command with the allocator settings that make CPU timings stable.

    glibc's default allocator returns freed memory to the OS, so every embedding step pays page
    faults again (costs 2-5x inflated, 20-50% noise); these settings must be set before Python
    starts. AUTOSHARD_NO_REEXEC=1 turns this off. Only the ``autoshard`` command itself is
    re-executed: a process that runs the CLI's app in its own (a test runner, a notebook) is
    warned instead, since re-executing it would start it over (it did: pytest ran the suite
    again from the first test, its output lost to the capture of the test that re-executed it).
    """
    from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active

    if os.environ.get("AUTOSHARD_NO_REEXEC") or malloc_settings_active():
        return
    if not is_autoshard_command(sys.argv):
        console.print(
            "[yellow]warning:[/yellow] the allocator settings are off in this process, so CPU timings "
            "are noisier; start it with " + " ".join(f"{k}={v}" for k, v in MALLOC_SETTINGS.items()),
            highlight=False,
        )
        return
    os.environ.update(MALLOC_SETTINGS)
    os.execv(sys.executable, [sys.executable, *sys.argv])


def is_autoshard_command(argv: Sequence[str]) -> bool:
    """Whether this process is the ``autoshard`` console command or ``python -m autoshard``."""
    if not argv:
        return False
    path = Path(argv[0])
    return path.name == "autoshard" or path.parts[-2:] == ("autoshard", "__main__.py")


def plans_measurer(
    rounds: int, row_cap_mb: int, profile: LoadedModel | None = None, on_round: Callable[[int], None] | None = None
) -> Callable[..., Any]:
    """``(plans, batch_size, reference=0) -> measured plans``: one task's plans run on this machine
    with the microbenchmark, interleaved over ``rounds`` (``autoshard.evaluation.measure_plan.measure_plans``;
    tables capped at ``row_cap_mb`` MiB of rows, as the traces are), on the ``profile``'s kind of
    device and execution mode (without one: this machine's default). ``InputError`` if this
    machine cannot run them (a GPU profile here without a GPU, FBGEMM missing)."""
    from autoshard.evaluation.measure_plan import measure_plans
    from cost_model.profile import (
        ExecutionMode,
        default_device,
        default_mode,
        fbgemm_available,
    )
    from cost_model.traces.records import BenchConfig

    device, mode = default_device(), default_mode()
    if profile is not None:
        device = str(profile.device.get("device_type", device))
        mode = ExecutionMode(profile.device.get("mode", mode.value))
        here = default_device()
        if device.startswith("cuda") and not here.startswith("cuda"):
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
    config = BenchConfig(device=device, mode=mode, row_cap_bytes=row_cap_mb * 1024**2)
    return lambda plans, batch_size, reference=0: measure_plans(
        plans, batch_size, config, rounds, reference, on_round=on_round
    )


def plans_verifier(
    rounds: int,
    row_cap_mb: int,
    profile: LoadedModel | None,
    communication: CommunicationModel | None,
    top: int,
    on_round: Callable[[int], None] | None = None,
) -> Callable[[Sequence[ShardingPlan], int], Verification]:
    """``(plans, batch_size) -> autoshard.evaluation.verification.verify(...)`` with this machine's
    microbenchmark (``plans_measurer``): a device's cost in a round is its measured compute, plus
    its modelled all-to-all with ``communication`` (one device cannot measure an all-to-all)."""
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


def planner_names(text: str, option: str) -> list[str] | None:
    """``--planner(s)``: None for 'all', else the comma-separated names (``InputError`` naming
    ``option`` when it names none; unknown names are the registry's to refuse)."""
    if text.strip() == "all":
        return None
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise InputError(option, f"names no planner: {text!r}", "pass 'all' or planner names, e.g. cost_greedy,rl")
    return names


def load_profile_or_none(path: Path | None, option: str = "--model") -> tuple[LoadedModel | None, str | None]:
    """(the profile's artifacts, None), or (None, why there are none) when no model is there.
    ``path``: a profile folder (or its cost_model.pt), default the shipped profile, or ``none``
    (``NO_MODEL``): no model, on purpose; a path given that does not exist is an error. Artifacts
    load through the store the service uses (``autoshard.profiles.load_profile``).

    A model that is there but unreadable raises ``ModelError``: that is an error, not an absence.
    """
    from autoshard.core.errors import ModelError

    if path is not None and str(path) == NO_MODEL:
        return None, f"no cost model (--model {NO_MODEL})"
    if path is not None and not path.exists():
        raise InputError(
            option,
            f"no cost model folder or file at {path}",
            "check the path"
            + (
                f", or pass {option} {NO_MODEL} to plan with the heuristics alone (proxy costs)"
                if option == "--model"
                else ""
            ),
        )
    if path is not None and path.is_file() and path.suffix != ".pt":
        raise InputError(option, f"{path} is a file, not a profile folder", "pass the folder that holds cost_model.pt")
    path = path if path is not None else DEFAULT_MODEL
    if not path.exists():
        return None, f"no cost model at {path}"
    try:
        from autoshard.profiles import load_profile
    except ImportError as error:
        return None, f"cannot load cost models ({error})"
    problems: list[str] = []
    loaded = load_profile(path if path.is_dir() else path.parent, problems)
    if loaded is None:
        raise ModelError("; ".join(problems))
    return loaded, None


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
    from cost_model.profile import malloc_settings_active

    if not malloc_settings_active():
        sys.exit("error: set the harness's allocator settings first (docs/profiles.md, 'Measurement settings')")
    one_thread()
    return load_profile_or_exit(path)


def one_thread() -> None:
    """Plan on one core: torch's and BLAS's thread pools would otherwise spin a thread per core
    on tiny matrices (planning is many small calls), several times slower on a shared machine."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


HostsOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Number of hosts, with --devices-per-host (--devices alone: one host; default: the file's).",
        rich_help_panel=WORKLOAD,
    ),
]
ShardingTypesOption = Annotated[
    str | None,
    typer.Option(
        help="Sharding types planners may choose, comma-separated TorchRec names (default: all of data_parallel, "
        "table_wise, column_wise, row_wise, table_row_wise, table_column_wise, grid_shard). Column-wise also "
        "follows --column-split.",
        rich_help_panel=PLANNERS,
    ),
]


def sharding_types_of(option: str | None) -> frozenset:
    """``--sharding-types`` as a set (every type without it); ``InputError`` naming the option."""
    from autoshard.core.sharding import ShardingType, parse_sharding_types

    return frozenset(ShardingType) if option is None else parse_sharding_types(option, "--sharding-types")


DevicesPerHostOption = Annotated[
    int | None,
    typer.Option(min=1, help="Devices in each host, with --hosts (ranks fill host 0 first).", rich_help_panel=WORKLOAD),
]


def topology_label(topology: Topology) -> str:
    """``8 x 16 GiB`` for one host; ``2 hosts x 4 x 16 GiB`` for a cluster (``8-16 GiB`` when devices differ)."""
    hosts = f"{topology.num_hosts} hosts x {topology.devices_per_host}" if topology.num_hosts > 1 else ""
    return f"{hosts or topology.num_devices} x {topology.memory_label} GiB"


OPTION_OF_FIELD = {
    "num_devices": "--devices",
    "device_memory_gb": "--memory-gb",
    "num_hosts": "--hosts",
    "devices_per_host": "--devices-per-host",
}
"""The command-line option that gives a topology field."""


def as_option(error: InputError) -> InputError:
    """``error`` about a topology field, named by the option that gives it (in its message and fix too:
    ``num_hosts * devices_per_host`` reads ``--hosts * --devices-per-host``)."""

    def options(text: str) -> str:
        return re.sub(
            r"\b(num_devices|device_memory_gb|num_hosts|devices_per_host)\b", lambda m: OPTION_OF_FIELD[m[1]], text
        )

    field = OPTION_OF_FIELD.get(error.field, error.field)
    if field == error.field:
        return error
    return InputError(field, options(error.message), options(error.fix), error.where)


def topology_of(
    devices: int | None,
    memory_gb: float | None,
    from_file: Topology | None,
    hosts: int | None = None,
    devices_per_host: int | None = None,
) -> Topology:
    """The topology of the options, where given, else of the workload file; ``InputError`` naming
    the option. ``--devices`` alone is one host; ``--hosts`` / ``--devices-per-host`` a cluster
    (with ``--devices`` too, they must agree); the file's hosts, per-device memory and bandwidths
    hold where no option replaces them."""
    if devices is None and hosts is None and devices_per_host is None and memory_gb is None and from_file:
        return from_file
    if hosts is None and devices_per_host is None:
        num_devices = devices if devices is not None else (from_file.num_devices if from_file else None)
        num_hosts = 1 if devices is not None or from_file is None else from_file.num_hosts
        per_host = 0 if devices is not None or from_file is None else from_file.devices_per_host
    else:
        num_hosts = hosts if hosts is not None else (from_file.num_hosts if from_file and devices is None else 1)
        per_host = devices_per_host if devices_per_host is not None else 0
        if devices is not None:
            num_devices = devices
        elif per_host:
            num_devices = num_hosts * per_host
        else:  # --hosts alone: the file's devices, over that many hosts
            num_devices = from_file.num_devices if from_file else None
    memory: float | tuple[float, ...] | None = memory_gb
    if memory is None and from_file is not None:
        memory = from_file.device_memory_caps_gb or from_file.device_memory_gb
    if num_devices is None or memory is None:
        raise InputError(
            "topology",
            "the workload names no topology",
            "pass --devices (or --hosts and --devices-per-host) and --memory-gb (or add a topology to the file)",
        )
    bandwidths = (from_file.intra_host_bw_gbps, from_file.inter_host_bw_gbps) if from_file else ()
    try:
        return Topology(num_devices, memory, num_hosts, per_host, *bandwidths)  # type: ignore[arg-type]
    except InputError as error:  # name the option that gave the value, not the file's field
        raise as_option(error) from None


def write_torchrec(workload: Workload, topology: Topology, best: ShardingPlan, out: Path | None) -> None:
    """A plan as TorchRec sharding: each table's sharding type and shard metadata (ranks, row
    and column offsets and sizes, as TorchRec lays out the type on the topology's hosts);
    ``autoshard.torchrec.bridge.plan_from_export`` and ``to_torchrec_plan`` turn it into
    the ``ShardingPlan`` DistributedModelParallel applies."""
    try:
        from autoshard.torchrec.bridge import export_torchrec
    except ImportError as error:
        raise InputError(
            "format", f"torchrec is not installed ({error})", "install the torchrec extra (scripts/setup.sh does)"
        ) from None
    data = {
        "planner": best.planner,
        "world_size": topology.num_devices,
        **({"local_world_size": topology.local_world_size} if topology.num_hosts > 1 else {}),
        "workload": workload.name,
        "max_cost_ms": best.max_cost_ms,
        "tables": export_torchrec(best, workload, topology.local_world_size),
    }
    if out is None:
        print_json(data)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
        console.print(f"wrote the {best.planner} plan as TorchRec sharding to {out}")

"""Shared CLI plumbing: clean errors instead of tracebacks, console and JSON output, the options
several commands share and the topology they give.

Library work lives below the CLI: profiles in ``autoshard.profiles``, process settings in
``cost_model.process``, measuring plans in ``autoshard.evaluation.measurers``, the TorchRec
export in ``autoshard.torchrec.bridge``."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from autoshard.core.errors import AutoShardError, InputError
from autoshard.core.types import Topology

if TYPE_CHECKING:
    from autoshard.core.types import ShardingPlan, Workload

console = Console(stderr=True)
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
ComputeDeviceOption = Annotated[
    str | None,
    typer.Option(
        help="With --model torchrec: the device TorchRec's estimator prices, cuda (the default) or cpu "
        "(its CPU perf model, memory as DDR). A profile prices the device it was traced on.",
        rich_help_panel=PLANNERS,
    ),
]
DdrCapOption = Annotated[
    float | None,
    typer.Option(
        "--ddr-cap-gb",
        help="With --model torchrec: each rank's host memory (DDR) in GiB, TorchRec's Topology ddr_cap, which "
        "holds UVM tables' weights (default: TorchRec's 128 GiB).",
        rich_help_panel=PLANNERS,
    ),
]
"""Checked where the model is made (``autoshard.profiles.check_ddr_cap``), as the service's field is."""


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


@contextmanager
def progress_bar(name: str) -> Iterator[tuple[Progress, TaskID]]:
    """A progress bar named ``name`` on the console (done of total, time left) and its task."""
    with Progress(
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as progress:
        yield progress, progress.add_task(name, total=None)


def ensure_malloc_settings() -> None:
    """Re-exec this command with the allocator settings CPU timings need
    (``cost_model.process.ensure_malloc_settings``), warning in yellow where it cannot."""
    from cost_model.process import ensure_malloc_settings as ensure

    ensure(lambda message: console.print(f"[yellow]warning:[/yellow] {message}", highlight=False))


def planner_names(text: str, option: str) -> list[str] | None:
    """``--planner(s)``: None for 'all', else the comma-separated names (``InputError`` naming
    ``option`` when it names none; unknown names are the registry's to refuse)."""
    if text.strip() == "all":
        return None
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise InputError(option, f"names no planner: {text!r}", "pass 'all' or planner names, e.g. cost_greedy,rl")
    return names


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
    """A plan as TorchRec sharding (``autoshard.torchrec.bridge.export_document``), printed, or
    written to ``out``; ``InputError`` where TorchRec is not installed."""
    try:
        from autoshard.torchrec.bridge import export_document
    except ImportError as error:
        raise InputError(
            "format", f"torchrec is not installed ({error})", "install the torchrec extra (scripts/setup.sh does)"
        ) from None
    data = export_document(workload, topology, best)
    if out is None:
        print_json(data)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
        console.print(f"wrote the {best.planner} plan as TorchRec sharding to {out}")

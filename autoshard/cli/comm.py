"""`autoshard bench comm`: measure the collectives of a sharded DMP step per link tier and write the
profile's communication model (``cost_model.bench.communication``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autoshard.cli.collect import require_cuda_if_asked
from autoshard.cli.support import MEASUREMENT, OUTPUT, console, friendly_errors, print_json
from autoshard.core.errors import InputError

if TYPE_CHECKING:
    from autoshard.core.communication import CommunicationModel


@friendly_errors
def comm_cmd(
    out: Annotated[
        Path,
        typer.Option(
            help="Where to write the model: a file, or a profile folder (then its communication.json).",
            rich_help_panel=OUTPUT,
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
    tiers: Annotated[
        str | None,
        typer.Option(
            help="Tiers to measure: intra (2 ranks here), inter (2 emulated hosts; needs root); "
            "a tier left out takes TorchRec's constant, declared (default: both as root, else intra).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = None,
    link_gbit: Annotated[
        float, typer.Option(help="The emulated inter-host link's rate, Gbit/s.", rich_help_panel=MEASUREMENT)
    ] = 10.0,
    link_delay_us: Annotated[
        float,
        typer.Option(help="Its one-way delay, us (needs the kernel's sch_netem).", rich_help_panel=MEASUREMENT),
    ] = 0.0,
    device: Annotated[
        str, typer.Option(help="cpu (gloo) or cuda (nccl, one GPU per rank).", rich_help_panel=MEASUREMENT)
    ] = "cpu",
    rounds: Annotated[
        int,
        typer.Option(
            min=1, help="Sweeps per tier, interleaved; each point keeps its fastest.", rich_help_panel=MEASUREMENT
        ),
    ] = 3,
) -> None:
    """Measure every collective of a sharded step within a host and between hosts, and fit each.

    It times TorchRec's dist modules as DMP runs them (KJTAllToAll, PooledEmbeddingsAllToAll,
    PooledEmbeddingsReduceScatter, DDP's all-reduce), their CPU work included."""
    from autoshard.core.collectives import Tier
    from autoshard.core.communication import COMMUNICATION_FILE
    from cost_model.bench.communication import measure_communication
    from cost_model.bench.netns import LinkShape

    _check_device(device)
    names = _tiers(tiers)
    link = LinkShape(link_gbit, link_delay_us)
    model = measure_communication([Tier(t) for t in names], device=device, link=link, rounds=rounds)
    out = out / COMMUNICATION_FILE if out.is_dir() else out
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    if json_out:
        print_json(model.to_dict())
    else:
        _print_fits(model, out)


def _check_device(device: str) -> None:
    """``InputError`` naming ``--device`` unless it is cpu, or cuda with a GPU for each of 2 ranks."""
    if device not in ("cpu", "cuda"):
        raise InputError("--device", f"unknown device {device!r}", "use cpu or cuda")
    require_cuda_if_asked(device, nccl=True)
    if device == "cuda":
        import torch

        if torch.cuda.device_count() < 2:
            raise InputError("--device", "cuda asked, but fewer than 2 GPUs (one a rank)", "use --device cpu")


def _tiers(tiers: str | None) -> list[str]:
    """The tiers ``--tiers`` names; by default both as root, else the host alone (warned)."""
    from cost_model.bench.netns import missing_privilege

    if tiers is None:
        why = missing_privilege()
        if why:
            console.print(f"[yellow]warning:[/yellow] {why}: the inter-host tier is declared", highlight=False)
        tiers = "intra" if why else "intra,inter"
    names = [t.strip() for t in tiers.split(",") if t.strip()]
    unknown = [t for t in names if t not in ("intra", "inter")]
    if unknown or not names:
        raise InputError("--tiers", f"unknown tiers {unknown or tiers!r}", "pass intra, inter or intra,inter")
    return names


def _print_fits(model: CommunicationModel, out: Path) -> None:
    """Each (collective, tier)'s fit, one line each, and where the model went."""
    header = "  collective          tier   latency ms   GB/s  points   source"
    console.print(f"{model.describe()}\n{header}", highlight=False)
    for f in model.fits:
        row = f"  {f.collective.value:<19} {f.tier.value:<6} {f.latency_ms:>10.3f} {f.bandwidth_gbps:>6.3g}"
        console.print(f"{row} {len(f.points):>7}   {f.source}", highlight=False)
    console.print(f"-> {out}", highlight=False)

"""`autoshard plan --stats`: a plan's stats (``autoshard.planners.stats.PlanStats``) as rich tables,
laid out like TorchRec's ``EmbeddingStats`` log: per rank, per table, then the balance and what
makes the max."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from autoshard.planners.report import TIE
from autoshard.planners.stats import PlanStats, abbreviation

MAX_TABLE_ROWS = 30
"""Tables listed (the costliest alone); the JSON (--json) holds every one."""
MIB = 1024**2
GIB = 1024**3


def ranks_label(ranks: tuple[int, ...] | list[int]) -> str:
    """``0-3,6``: ascending ranks with consecutive runs collapsed (TorchRec's
    ``_collapse_consecutive_ranks``)."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def print_stats(stats: PlanStats, out: Console | None = None) -> None:
    """The stats of one plan: a table per rank, a table per table, then the balance, the max
    against the mean, the critical path, the ranks nearest their memory cap and the shards of the
    max rank."""
    out = out or Console()
    unit = "ms" if stats.cost_unit == "ms" else "proxy"
    _print_ranks(stats, unit, out)
    _print_tables(stats, unit, out)
    _print_balance(stats, unit, out)


def _print_ranks(stats: PlanStats, unit: str, out: Console) -> None:
    table = RichTable(
        title=f"{stats.planner}'s plan: per rank (batch {stats.batch_size}; costs in {unit})",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
    )
    for column in ("rank", "host", "GiB", "of cap", "cost", "compute", "comms", "ids MiB", "out MiB"):
        table.add_column(column, justify="right")
    table.add_column("shards")
    for rank in stats.ranks:
        mark = "*" if rank.rank == stats.max_rank else ""
        table.add_row(
            f"{rank.rank}{mark}",
            str(rank.host),
            f"{rank.memory_bytes / GIB:.3g}",
            f"{rank.memory_share:.0%}",
            f"{rank.cost_ms:.4g}",
            f"{rank.compute_ms:.4g}",
            f"{rank.communication_ms:.4g}",
            f"{rank.input_bytes / MIB:.3g}",
            f"{rank.output_bytes / MIB:.3g}",
            " ".join(f"{abbreviation(kind)}:{count}" for kind, count in rank.shards),
        )
    out.print(table)
    out.print(
        "* the max rank. GiB: weights + optimizer state, and the share of the device's cap. cost = compute "
        "(the cost model's prediction of the rank's whole set) + comms (its all-to-all); forward, backward "
        "and the update together: the model is trained on whole iterations, so there is no forward/backward "
        "split. ids: B x pooling x lookup share x 8 B per shard; out (pooled): B x width x 4 B per shard "
        "(a replica: its B / W samples). Shards: TW table-, CW column-, RW row-, TWRW table-row-, TWCW "
        "table-column-wise, GS grid, DP data parallel.",
        highlight=False,
    )


def _print_tables(stats: PlanStats, unit: str, out: Console) -> None:
    shown = sorted(stats.tables, key=lambda t: (-t.cost_alone_ms, t.table))[:MAX_TABLE_ROWS]
    more = len(stats.tables) - len(shown)
    title = "per table, costliest alone first" + (f" ({len(shown)} of {len(stats.tables)})" if more else "")
    table = RichTable(title=title)
    for column in ("table", "sharding", "ranks", f"cost alone ({unit})", "memory (GiB)", "pooling"):
        table.add_column(column, justify="left" if column in ("table", "ranks") else "right")
    for row in shown:
        table.add_row(
            escape(row.table),
            "+".join(abbreviation(kind) for kind in row.sharding_type.split(",")),
            ranks_label(row.ranks),
            f"{row.cost_alone_ms:.4g}",
            f"{row.memory_bytes / GIB:.3g}",
            f"{row.pooling_factor:.3g}",
        )
    out.print(table)
    out.print(
        "cost alone: the table's shards each priced as the only table on a device, summed (plus what "
        "they add to their ranks' all-to-alls): it ranks tables, it does not split a rank's cost (costs "
        "do not add)" + (f"; {more} more tables in --json" if more else ""),
        highlight=False,
    )


def _print_balance(stats: PlanStats, unit: str, out: Console) -> None:
    table = RichTable(title="balance over ranks")
    for column in ("", "max / mean - 1", "total variation", "KL divergence"):
        table.add_column(column, justify="left" if not column else "right")
    for name, imbalance in (("cost", stats.cost_imbalance), ("memory", stats.memory_imbalance)):
        table.add_row(
            name,
            f"{imbalance.max_over_mean:.1%}",
            f"{imbalance.total_variation:.3f}",
            f"{imbalance.kl_divergence:.3f}",
        )
    out.print(table)
    top = stats.ranks[stats.max_rank]
    path = stats.critical_path
    expected = (
        f"; expected max under the model's error {stats.expected_max_ms:.4g} ms"
        if stats.expected_max_ms is not None
        else ""
    )
    tied = [r.rank for r in stats.ranks if r.rank != top.rank and r.cost_ms >= top.cost_ms * (1 - TIE)]
    ties = (
        f"; {'ranks' if len(tied) > 1 else 'rank'} {ranks_label(tied)} {'tie' if len(tied) > 1 else 'ties'} it"
        if tied
        else ""
    )
    lines = [
        "total variation and KL divergence: TorchRec's measures, 0 balanced to 1 all on one rank",
        f"max: rank {top.rank} (host {top.host}{ties}) at {top.cost_ms:.4g} {unit}, "
        f"{stats.cost_imbalance.max_over_mean:.1%} above the mean {stats.mean_cost_ms:.4g} {unit}{expected}",
        f"critical path: rank {path.rank}'s compute {path.compute_ms:.4g} + its comms {path.communication_ms:.4g} "
        f"= {path.total_ms:.4g} {unit} (each rank computes, then its all-to-all; ranks wait for the slowest). "
        f"Sum of maxima (max compute + max comms, were every phase synchronised as TorchRec's critical path "
        f"assumes): {path.sum_of_maxima_ms:.4g} {unit}",
        "nearest their memory cap: "
        + ", ".join(
            f"rank {m.rank}: {m.memory_bytes / GIB:.3g} of {m.memory_cap_bytes / GIB:.3g} GiB ({m.memory_share:.0%})"
            for m in stats.nearest_memory_cap
        ),
    ]
    for line in lines:
        out.print(line, highlight=False)
    shards = RichTable(title=f"what makes rank {top.rank} the max: its shards, costliest alone first")
    for column in ("shard", "sharding", f"cost alone ({unit})", "share of the rank"):
        shards.add_column(column, justify="left" if column == "shard" else "right")
    for shard in stats.max_rank_shards[:MAX_TABLE_ROWS]:
        shards.add_row(
            escape(shard.shard),
            abbreviation(shard.sharding_type),
            f"{shard.cost_alone_ms:.4g}",
            f"{shard.share_of_rank:.1%}",
        )
    out.print(shards)
    if len(stats.max_rank_shards) > MAX_TABLE_ROWS:
        out.print(f"{len(stats.max_rank_shards) - MAX_TABLE_ROWS} more shards in --json", highlight=False)

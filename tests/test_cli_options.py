"""The CLI declares the options a user sets, and no more (docs/decisions.md, 43)."""

from __future__ import annotations

import typer

from autoshard.cli import app

MAX_OPTIONS = 156  # 150, issue 62's --compute-device on plan, replan, evaluate and policy train, and
# --ddr-cap-gb (TorchRec's host memory per rank) on plan, replan and evaluate


def options_by_command() -> dict[str, int]:
    """Each command's options (``--help`` aside), by its path, the root's included."""
    counts: dict[str, int] = {}

    def walk(command, path: str) -> None:
        counts[path] = sum(1 for p in command.params if type(p).__name__.endswith("Option") and p.name != "help")
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "autoshard")
    return counts


def test_the_cli_declares_at_most_156_options():
    counts = options_by_command()
    assert sum(counts.values()) <= MAX_OPTIONS, sorted(counts.items(), key=lambda kv: -kv[1])
    assert counts["autoshard bench collect"] >= 20 and "autoshard bench refine" not in counts  # counted, not empty


def test_no_option_removed_in_issue_60_is_declared():
    """Experiment knobs went to lab/ or to the library's defaults: the CLI refuses them by name."""
    removed = {
        "autoshard bench collect": {"threads", "batch_size", "row_shard_ways", "replica_world_sizes"},
        "autoshard policy train": {"reward", "slots", "pool_size", "dagger_rounds", "ent_coef", "work_dir"},
        "autoshard evaluate": {"verify_top", "verify_rounds", "distributed_steps", "departure_margin"},
        "autoshard cost adapt": {"learning_rate", "patience"},
    }
    root = typer.main.get_command(app)
    for path, names in removed.items():
        command = root
        for word in path.split()[1:]:
            command = command.commands[word]  # type: ignore[attr-defined]
        assert not names & {p.name for p in command.params}, path

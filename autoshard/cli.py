"""The `autoshard` command. It is the composition root: it hands cost models to planners."""

from __future__ import annotations

import typer

from autoshard import cli_bench, cli_cost, cli_evaluate, cli_plan, cli_serve

app = typer.Typer(help="AutoShard: learned sharding of embedding tables across devices.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(cli_bench.app, name="bench")
app.command("plan")(cli_plan.plan_cmd)
app.add_typer(cli_cost.app, name="cost")
app.command("evaluate")(cli_evaluate.evaluate_cmd)
app.command("serve")(cli_serve.serve)


def main() -> None:
    app()

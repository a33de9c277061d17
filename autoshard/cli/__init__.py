"""The `autoshard` command. It is the composition root: it loads a profile's artifacts (cost
model, all-to-all, policy) and hands them to planners, the trainer and the service."""

from __future__ import annotations

import warnings

import typer

from autoshard.cli import bench, cost, evaluate, plan, policy, replan, serve
from autoshard.cli.dmp import VerifyMethodCommand

app = typer.Typer(
    help="AutoShard: learned sharding of embedding tables across devices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"autoshard {version('autoshard')}")
        except PackageNotFoundError:  # run from a checkout that pip did not install
            typer.echo("autoshard (not installed: run from a checkout)")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """AutoShard: learned sharding of embedding tables across devices."""
    # the plan's report says it among its warnings (``planning.registry.policy_warnings``): once is enough
    warnings.filterwarnings("ignore", message="the rl policy was trained against")


app.add_typer(bench.app, name="bench")
app.command("plan", cls=VerifyMethodCommand)(plan.plan_cmd)  # --verify [bench|dmp]
app.command("replan")(replan.replan_cmd)
app.add_typer(cost.app, name="cost")
app.command("evaluate")(evaluate.evaluate_cmd)
app.command("serve")(serve.serve)
app.add_typer(policy.app, name="policy")


def main() -> None:
    app()

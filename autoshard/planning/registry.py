"""Planners by name, each with its kind and what it needs.

``PLANNERS`` maps a name to a ``PlannerSpec``; ``register_planner`` adds one. ``make_planner``
checks the spec's needs against the ``PlannerContext`` and raises ``PlannerError(UNAVAILABLE)``
with fixes when they are not met; planners with heavy dependencies import them in ``build``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from autoshard.core.costing import is_exact
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import Planner
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.heuristics import (
    GreedyProxyPlanner,
    RandomPlanner,
    RoundRobinPlanner,
)
from autoshard.planners.proxies import PROXIES
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planning.memory_fit import fitted
from autoshard.planning.no_worse import NoWorseThan

REFINE_SAMPLES = 4
"""rl+refine's sampled plans, each finished by local search (docs/decisions.md, 40)."""


@dataclass(frozen=True)
class PlannerSpec:
    """A planner's name, kind and builder. It needs a cost model if its kind is COST_MODEL or
    POLICY, and a policy if POLICY; ``default``: it runs when a caller names no planners."""

    name: str
    kind: PlannerKind
    build: Callable[[PlannerContext], Planner]
    default: bool = True

    @property
    def needs_cost_model(self) -> bool:
        return self.kind in (PlannerKind.COST_MODEL, PlannerKind.POLICY)

    @property
    def needs_policy(self) -> bool:
        return self.kind is PlannerKind.POLICY

    def unmet(self, context: PlannerContext) -> PlannerError | None:
        """Why this planner cannot run with ``context`` (``None``: it can)."""
        heuristics = ", ".join(HEURISTICS)
        if self.needs_cost_model and context.cost_model is None:
            return PlannerError(
                PlannerErrorKind.UNAVAILABLE,
                f"{self.name} needs a trained cost model",
                ("pass a cost model (CLI: --model DIR)", f"or use a heuristic: {heuristics}"),
            )
        if self.needs_policy and context.policy is None:
            return PlannerError(
                PlannerErrorKind.UNAVAILABLE,
                f"{self.name} needs a trained policy",
                (
                    "train one with `autoshard policy train --profile DIR` (it writes DIR/policy.pt; "
                    "--profile torchrec --compute-device DEVICE for TorchRec's estimators)",
                    "or use cost_greedy or a heuristic",
                ),
            )
        return None


def import_planners() -> None:
    """Import now what building a planner imports on its first use: the agent's planners pull in
    the RL environment and SciPy's statistics with it (the first request of a planning worker
    took 1.1 s against ~0.1 s for the next ones), so that a worker does it at start-up and not
    within a request's budget."""
    import autoshard.rl.planners  # noqa: F401


def _rl(samples: int, name: str, raw: bool = False) -> Callable[[PlannerContext], Planner]:
    def build(context: PlannerContext) -> Planner:
        from autoshard.rl.planners import RLPlanner
        from autoshard.rl.policy import OptionPolicy

        assert context.cost_model is not None and isinstance(context.policy, OptionPolicy)
        return RLPlanner(
            context.cost_model,
            context.policy,
            context.splits(PlannerKind.POLICY),
            samples,
            seed=context.seed,
            departure_margin=context.margin,
            time_budget_s=context.time_budget_s,
            name=name,
            cache=context.cache,
            sharding_types=context.sharding_types,
            raw=raw,
        )

    return build


def _torchrec(name: str, compute_device: str | None) -> Callable[[PlannerContext], Planner]:
    """TorchRec's planner as ``name``, planning for ``compute_device`` (None: the device the
    context's cost model prices where that is TorchRec's estimator, ``--model torchrec
    --compute-device``, so that both judge one objective; else cuda)."""

    def build(context: PlannerContext) -> Planner:
        try:
            from autoshard.torchrec.planner import TorchRecPlanner
        except ImportError as error:
            raise PlannerError(
                PlannerErrorKind.UNAVAILABLE,
                f"TorchRec's planner cannot load ({error})",
                ("install the torchrec extra",),
            ) from None
        every = context.sharding_types == ALL_TYPES  # TorchRec's own default search space ("auto")
        priced = getattr(context.cost_model, "compute_device", "cuda") if is_exact(context.cost_model) else "cuda"
        return TorchRecPlanner(
            allow_column_split=context.splits(PlannerKind.REFERENCE),
            cost_model=context.cost_model,
            compute_device=compute_device or priced,
            time_budget_s=context.time_budget_s,
            sharding_types="auto" if every else sorted(t.value for t in context.sharding_types),
            name=name,
        )

    return build


def _greedy(name: str) -> Callable[[PlannerContext], Planner]:
    return lambda c: GreedyProxyPlanner(
        name, PROXIES[name], c.cost_model, c.splits(PlannerKind.HEURISTIC), c.spread_rule
    )


_SPECS = (
    PlannerSpec(
        "random",
        PlannerKind.HEURISTIC,
        lambda c: RandomPlanner(c.cost_model, c.seed, c.splits(PlannerKind.HEURISTIC), rule=c.spread_rule),
    ),
    PlannerSpec(
        "round_robin",
        PlannerKind.HEURISTIC,
        lambda c: RoundRobinPlanner(c.cost_model, c.splits(PlannerKind.HEURISTIC), rule=c.spread_rule),
    ),
    *(PlannerSpec(name, PlannerKind.HEURISTIC, _greedy(name)) for name in PROXIES),
    PlannerSpec(
        "cost_greedy",
        PlannerKind.COST_MODEL,
        lambda c: CostGreedyPlanner(
            c.cost_model,  # type: ignore[arg-type]  # needs_cost_model: built only with one
            c.splits(PlannerKind.COST_MODEL),
            time_budget_s=c.time_budget_s,
            cache=c.cache,
            departure_margin=c.margin,
            sharding_types=c.sharding_types,
        ),
    ),
    PlannerSpec("rl", PlannerKind.POLICY, _rl(0, "rl")),
    PlannerSpec("rl+refine", PlannerKind.POLICY, _rl(REFINE_SAMPLES, "rl+refine")),
    PlannerSpec("rl+refine_raw", PlannerKind.POLICY, _rl(REFINE_SAMPLES, "rl+refine_raw", raw=True)),
    PlannerSpec("torchrec", PlannerKind.REFERENCE, _torchrec("torchrec", None), default=False),
    # the benchmarks' CPU reference, by this name in their settings and reports: kept
    PlannerSpec("torchrec_cpu", PlannerKind.REFERENCE, _torchrec("torchrec_cpu", "cpu"), default=False),
)
PLANNERS: dict[str, PlannerSpec] = {spec.name: spec for spec in _SPECS}
HEURISTICS = tuple(n for n, s in PLANNERS.items() if s.kind is PlannerKind.HEURISTIC)


def policy_warnings(policy: object, cost_model: object, planned: Iterable[str]) -> tuple[str, ...]:
    """Why the plans of the rl planners among ``planned`` may suffer: their ``policy`` (an
    ``autoshard.rl.policy.OptionPolicy``) was trained against another cost model than
    ``cost_model``, which they plan with (``model_mismatch``); () where none of them planned."""
    uses_policy = any(PLANNERS[name].needs_policy for name in planned if name in PLANNERS)
    mismatch = getattr(policy, "model_mismatch", None)
    found = mismatch(cost_model) if uses_policy and mismatch is not None else None
    return () if found is None else (found,)


def register_planner(spec: PlannerSpec) -> None:
    PLANNERS[spec.name] = spec


def planner_names() -> tuple[str, ...]:
    """Every planner name, whether or not it can run here."""
    return tuple(PLANNERS)


def planner_spec(name: str) -> PlannerSpec:
    """The spec of ``name``; ``InputError`` if unknown."""
    if name not in PLANNERS:
        raise InputError("planner", f"unknown planner {name!r}", f"use one of {', '.join(planner_names())}")
    return PLANNERS[name]


def make_planner(name: str, context: PlannerContext = PlannerContext()) -> Planner:
    """A planner by name; ``PlannerError(UNAVAILABLE)`` if its needs are not met here (no cost
    model, no policy, torchrec not installed), ``InputError`` if unknown."""
    spec = planner_spec(name)
    unmet = spec.unmet(context)
    if unmet is not None:
        raise unmet
    planner = spec.build(context)
    if spec.kind is PlannerKind.REFERENCE:
        return planner
    planned = fitted(planner, context.cost_model)
    if name == "rl+refine" and planned is not planner:  # fitted apart, the two plans compare only as fitted:
        search = fitted(_rl(REFINE_SAMPLES, name, raw=True)(context), context.cost_model)  # so its own search's alone
        greedy = fitted(PLANNERS["cost_greedy"].build(context), context.cost_model)
        return NoWorseThan(search, greedy, context.margin)
    return planned


def available_planners(context: PlannerContext, defaults_only: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """(planners that can run, [(planner, reason) for the others]); with ``defaults_only``,
    planners that run only when asked (torchrec) are left out of both."""
    names, skipped = [], []
    for spec in PLANNERS.values():
        if defaults_only and not spec.default:
            continue
        try:
            make_planner(spec.name, context)
            names.append(spec.name)
        except PlannerError as error:
            skipped.append((spec.name, error.message))
    return names, skipped

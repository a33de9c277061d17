"""What the service holds between requests: settings, the loaded models, which planners can run,
the planning pool and the metrics. Built once in the app's lifespan; nothing else is kept between
requests, so several workers can run behind a load balancer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from autoshard.core.errors import InputError, ModelError, PlannerError, PlannerErrorKind
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planning.registry import PLANNERS, PlannerSpec
from autoshard.profiles import LoadedModel, ModelStore, load_models
from service.metrics import Metrics
from service.plan_cache import PlanCache
from service.planning import PlanningPool, make_pool
from service.settings import Settings

log = logging.getLogger("autoshard.service")


@dataclass(frozen=True, slots=True)
class PlannerInfo:
    name: str
    kind: PlannerKind
    available: bool
    default: bool
    reason: str | None = None
    policy: str | None = None  # the policy it plans with (policy planners)


def _context(model: LoadedModel | None) -> PlannerContext:
    return PlannerContext(model.model if model else None, model.policy if model else None)


def _unmet_reason(spec: PlannerSpec, model: LoadedModel | None) -> str | None:
    """Why ``spec`` cannot run with ``model``'s artifacts (``None``: it can); for a policy
    planner, also why the profile has no policy (missing or corrupt file)."""
    unmet = spec.unmet(_context(model))
    if unmet is None:
        return None
    if spec.needs_policy and model is not None and model.policy is None and model.policy_problem:
        return f"{unmet.message} ({model.policy_problem})"
    return unmet.message


def planner_catalog(store: ModelStore) -> dict[str, PlannerInfo]:
    """Every registered planner, and whether it can run with the default profile's artifacts.
    Planners registered later appear here without any change to the service."""
    default = store.resolve(None)
    context = _context(default)
    catalog = {}
    for name, spec in PLANNERS.items():
        reason = _unmet_reason(spec, default)
        if reason is None:
            try:
                spec.build(context)  # TorchRec's planner: raises when torchrec is not installed
            except PlannerError as error:
                reason = error.message
        available = reason is None
        policy = getattr(context.policy, "name", None) if spec.needs_policy else None
        catalog[name] = PlannerInfo(name, spec.kind, available, available and spec.default, reason, policy)
    # cheap ones first: a request whose budget runs out still gets the heuristics
    order = list(PlannerKind)
    return dict(sorted(catalog.items(), key=lambda item: order.index(item[1].kind)))


def _fix(kind: PlannerKind, settings: Settings, profile: str | None) -> str:
    folder = f"{settings.model_dir}/{profile or '<profile>'}"
    if kind is PlannerKind.REFERENCE:
        return "install the torchrec extra in the image"
    if kind is PlannerKind.POLICY and profile is not None:  # without a profile, the cost model comes first
        return f"train a policy with `autoshard policy train` (it writes {folder}/policy.pt), then restart the service"
    return f"ship a cost model in {folder}/cost_model.pt (`autoshard cost train`), then restart the service"


@dataclass
class ServiceState:
    settings: Settings
    store: ModelStore
    planners: dict[str, PlannerInfo]
    pool: PlanningPool
    metrics: Metrics
    cache: PlanCache

    @property
    def default_planners(self) -> list[str]:
        return [p.name for p in self.planners.values() if p.default]

    @property
    def degraded_reasons(self) -> list[str]:
        return self.reasons_for(self.store, self.planners)

    @staticmethod
    def reasons_for(store: ModelStore, planners: dict[str, PlannerInfo]) -> list[str]:
        """Why the service runs without some model (torchrec is optional: not a reason)."""
        reasons = list(store.problems)
        reasons += [
            f"planner {p.name!r} is unavailable: {p.reason}"
            for p in planners.values()
            if not p.available and p.kind is not PlannerKind.REFERENCE
        ]
        return reasons

    def unavailable_reason(self, name: str, model: LoadedModel | None) -> str | None:
        """Why planner ``name`` cannot run with the request's profile (``None``: it can). The
        catalog speaks for the default profile; a request may have chosen another, with or
        without the cost model and policy the planner needs."""
        reason = _unmet_reason(PLANNERS[name], model)
        if reason is not None or self.planners[name].available:
            return reason
        if _unmet_reason(PLANNERS[name], self.store.resolve(None)) is not None:
            return None  # the default profile lacks what it needs, the request's profile has it
        return self.planners[name].reason  # not the profile's doing (e.g. torchrec not installed)

    def planners_for(self, requested: Sequence[str] | None, model: LoadedModel | None) -> list[str]:
        """The planners to run, in catalog order (cheap first), given the request's profile
        (``model``; ``None``: no cost model). Unknown names are an ``InputError`` (422); a planner
        that cannot run here a ``PlannerError(UNAVAILABLE)`` (503)."""
        if requested is None:
            return [n for n in self.planners if PLANNERS[n].default and self.unavailable_reason(n, model) is None]
        if not requested:
            raise InputError(
                "planners", "is an empty list", "name at least one planner, or leave planners out for the defaults"
            )
        for i, name in enumerate(requested):
            if name not in self.planners:
                raise InputError(
                    "planners",
                    f"unknown planner {name!r}",
                    f"use one of {', '.join(self.planners)} (GET /v1/planners)",
                    where=f"planners[{i}]",
                )
        wanted = set(requested)
        for name in (n for n in self.planners if n in wanted):
            info = self.planners[name]
            reason = self.unavailable_reason(name, model)
            if reason is not None:
                others = self.planners_for(None, model)
                raise PlannerError(
                    PlannerErrorKind.UNAVAILABLE,
                    f"planner {name!r} is unavailable on this service: {reason}",
                    (
                        _fix(info.kind, self.settings, model.profile if model else None),
                        f"or ask for other planners: {', '.join(others) or 'none can run'}",
                    ),
                )
        return [n for n in self.planners if n in wanted]


def build_state(settings: Settings, metrics: Metrics) -> ServiceState:
    """Load the models and work out what can run; with ``fail_fast``, raise ``ModelError``
    instead of starting degraded."""
    store = load_models(settings.model_dir, settings.default_profile)
    catalog = planner_catalog(store)
    reasons = ServiceState.reasons_for(store, catalog)
    if reasons and settings.fail_fast:
        raise ModelError("refusing to start (AUTOSHARD_FAIL_FAST): " + "; ".join(reasons))
    pool = make_pool(settings.pool, settings.planning_workers, store, settings.planner_niceness)
    state = ServiceState(settings, store, catalog, pool, metrics, PlanCache(settings.plan_cache_shards))
    metrics.degraded.set(1 if reasons else 0)
    metrics.models.set(len(store.models))
    if reasons:
        log.warning("starting degraded: %s", "; ".join(reasons))
    log.info(
        "profiles: %s (default %s); default planners: %s",
        ", ".join(store.models) or "none",
        store.default_profile,
        ", ".join(state.default_planners),
    )
    return state

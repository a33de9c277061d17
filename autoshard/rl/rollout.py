"""The policy sharding a task: its argmax, or draws from its softmax, over ``OptionState``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.planners.feasibility import FIX_DEVICES, FIX_MEMORY, FIX_SHRINK
from autoshard.rl.options import Candidates, OptionState
from autoshard.rl.policy import OptionPolicy

Choose = Callable[[OptionState, Candidates], int]
"""(the placement in progress, the current unit's options) -> the index of the option to take."""


def rollout(state: OptionState, choose: Choose) -> OptionState:
    """Take ``choose``'s option for every unit of ``state`` (in place); ``PlannerError`` naming
    the unit where no option is left (a dead end the packing lookahead could not avoid)."""
    while not state.done:
        found = state.candidates()
        if not len(found):
            raise PlannerError(
                PlannerErrorKind.TABLE_DOES_NOT_FIT,
                f"no sharding option is left for {state.current.name!r} "
                f"({state.placed_steps} of the units placed before it)",
                (FIX_DEVICES, FIX_MEMORY, FIX_SHRINK),
            )
        state.apply(found.options[choose(state, found)])
    return state


def draw(rng: np.random.Generator, logits: np.ndarray) -> int:
    """An index drawn with probabilities softmax(``logits``)."""
    p = np.exp(logits - logits.max())
    cdf = np.cumsum(p / p.sum())
    return int(min(cdf.searchsorted(rng.random() * cdf[-1], side="right"), len(logits) - 1))


def argmax_choice(policy: OptionPolicy) -> Choose:
    """The policy's best-scored option (the first of equals)."""
    return lambda state, found: int(np.argmax(policy.scores(state.context(), found.rows)))


def sampled_choice(policy: OptionPolicy, rng: np.random.Generator, temperature: float = 1.0) -> Choose:
    """An option drawn from the softmax of the policy's scores at ``temperature``."""
    return lambda state, found: draw(rng, policy.scores(state.context(), found.rows) / temperature)

"""The agent's policy: one shared-weight MLP scores every candidate option, so it plans any device
count and any number of options.

``OptionScorerNet`` is the network (actor: a score per option row, each row the context then the
option's features; critic: mean- and max-pooled option embeddings with the context).
``OptionScoringPolicy`` plugs it into sb3-contrib's ``MaskablePPO`` through SB3's extension point
(the ``mlp_extractor``), without forking PPO. ``OptionPolicy`` is the trained actor on its own,
loaded from ``policy.pt`` for planning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from autoshard.core.errors import ModelError
from autoshard.rl.options import CONTEXT, OPTION, kept_columns

POLICY_FILE = "policy.pt"
FORMAT = "autoshard-policy-v3"  # v3: the option feature `mean_added` (docs/decisions.md, 41)
ROW = CONTEXT + OPTION


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class OptionScorerNet(nn.Module):
    """Input: ``[batch, CONTEXT + slots x OPTION]``. Actor: ``[batch, slots]`` option scores;
    critic: ``[batch, hidden]`` latent for SB3's value head."""

    def __init__(self, slots: int, hidden: int) -> None:
        super().__init__()
        self.slots, self.hidden = slots, hidden
        self.latent_dim_pi, self.latent_dim_vf = slots, hidden
        self.scorer = _mlp([ROW, hidden, hidden, 1])
        self.embed = _mlp([ROW, hidden, hidden])
        self.value = _mlp([2 * hidden + CONTEXT, hidden, hidden])

    def _rows(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        context = features[:, :CONTEXT]
        options = features[:, CONTEXT:].reshape(len(features), self.slots, OPTION)
        rows = torch.cat([context.unsqueeze(1).expand(-1, self.slots, -1), options], dim=2)
        return context, rows

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.scorer(self._rows(features)[1]).squeeze(-1)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        context, rows = self._rows(features)
        real = rows[:, :, CONTEXT : CONTEXT + 1]  # the ``real`` option flag
        h = self.embed(rows)
        mean = (h * real).sum(1) / real.sum(1).clamp(min=1)
        largest = torch.where(real > 0, h, torch.full_like(h, -1e4)).amax(1)
        return self.value(torch.cat([mean, largest, context], dim=1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class OptionScoringPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy with ``OptionScorerNet`` as its ``mlp_extractor``; the option scores
    are the action logits (the action net is the identity)."""

    def __init__(self, *args: Any, hidden: int = 64, **kwargs: Any) -> None:
        self.hidden = hidden
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        assert isinstance(self.action_space, spaces.Discrete)
        self.mlp_extractor = OptionScorerNet(int(self.action_space.n), self.hidden)  # type: ignore[assignment]

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        assert isinstance(self.mlp_extractor, OptionScorerNet)
        last = self.mlp_extractor.scorer[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)  # near-uniform scores at the start
        nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # SB3 passes lr to torch's optimizers
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """What travels with a trained policy: how it was trained, its env, and its evaluations.

    ``eval_ratio``: its argmax plans' predicted max over the warm start's teacher's (the greedy
    rule over options, ``options.expert_choice``) on held-out tasks, geometric mean; ``history``:
    (PPO steps, that ratio) at every evaluation; ``warm_start_ratio``: the clone's, before PPO."""

    profile: str
    hidden: int
    slots: int
    reward: str
    set_size_headroom: float
    steps: int
    command: str = ""
    eval_ratio: float | None = None
    warm_start_ratio: float | None = None
    history: tuple[tuple[int, float], ...] = field(default_factory=tuple)
    dropped: tuple[str, ...] = ()  # feature groups it never saw (ablations)
    cost_model: str = ""  # the cost model it was trained against (``model_identity``); "": its profile's
    compute_device: str = ""  # the device that model prices (``cpu``, ``cuda``); "": not recorded
    spread_every_table: bool = False  # its env's ``EnvConfig.spread_every_table``: rl offers it the same

    @property
    def trained_against(self) -> str:
        """The cost model its rewards came from, as ``model_identity`` writes it: ``cost_model``
        with its compute device, else its profile's trained model (files written before the field
        named only the profile, whose model they were trained on)."""
        return _identity(self.cost_model or self.profile, self.compute_device)


class PolicyModelWarning(UserWarning):
    """A policy plans with another cost model than the one it was trained against."""


def model_identity(cost_model: object) -> tuple[str, str] | None:
    """(name, compute device) of a cost model, as policy files record it: a trained model's
    profile id and its profile's device type; TorchRec's estimator's ``--model`` name
    (``torchrec``) and the ``--compute-device`` it prices; through the all-to-all wrapper
    (``WithCommunication.compute``). None for a model with neither (no check)."""
    model = getattr(cost_model, "compute", cost_model)
    profile = getattr(model, "profile", None)
    if isinstance(getattr(profile, "id", None), str):
        return profile.id, str(getattr(profile, "device_type", ""))  # type: ignore[union-attr]
    device = getattr(model, "compute_device", None)
    if isinstance(device, str) and type(model).__module__ == "autoshard.torchrec.cost_model":
        from autoshard.torchrec.cost_model import MODEL_NAME  # imported already: the model is one of its

        return MODEL_NAME, device
    return None


def model_label(cost_model: object) -> str | None:
    """``model_identity`` as warnings and reports show it (``torchrec (cuda)``, a profile's id)."""
    identity = model_identity(cost_model)
    return None if identity is None else _identity(*identity)


def _identity(name: str, compute_device: str) -> str:
    """A model's name, with the device it prices where the name does not say it (TorchRec's)."""
    return name if not compute_device or name.startswith(f"{compute_device}-") else f"{name} ({compute_device})"


class OptionPolicy:
    """The trained actor in numpy: scores the options of any task, one row each."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], info: PolicyInfo) -> None:
        self.layers, self.info = layers, info
        if info.dropped:  # the features it never saw read as zero: fold that into its first layer
            keep_context, keep_option = kept_columns(info.dropped)
            w, b = layers[0]
            self.layers = [(w * np.concatenate([keep_context, keep_option])[:, None], b), *layers[1:]]

    @property
    def name(self) -> str:
        return f"{self.info.profile}/{POLICY_FILE} ({self.info.steps:,} PPO steps, {self.info.reward} reward)"

    def model_mismatch(self, cost_model: object) -> str | None:
        """Why planning with ``cost_model`` departs from this policy's training (None: it does
        not, or the model has no name to compare): its scores learned one model's costs, and
        another model's may rank the options otherwise."""
        name = model_label(cost_model)
        if name is None or name == self.info.trained_against:
            return None
        return (
            f"the rl policy was trained against cost model {self.info.trained_against!r} and plans with {name!r}: "
            f"its choices may suit the other model's costs (train one for {name!r} with `autoshard policy train`)"
        )

    @classmethod
    def from_net(cls, net: OptionScorerNet, info: PolicyInfo) -> OptionPolicy:
        layers = [
            (m.weight.detach().float().numpy().T.copy(), m.bias.detach().float().numpy().copy())
            for m in net.scorer
            if isinstance(m, nn.Linear)
        ]
        return cls(layers, info)

    def scores(self, context: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """One score per option row (higher is better) for one step: ``context`` [CONTEXT], ``rows``
        [n, OPTION]. The context enters the first layer once, not once per option."""
        (w, b), rest = self.layers[0], self.layers[1:]
        x = np.tanh(rows @ w[CONTEXT:] + (context @ w[:CONTEXT] + b))
        for i, (w, b) in enumerate(rest):
            x = x @ w + b
            if i < len(rest) - 1:
                x = np.tanh(x)
        return x[:, 0]

    def save(self, path: Path) -> None:
        info = asdict(self.info)
        info["history"] = [list(h) for h in self.info.history]
        torch.save(
            {
                "format": FORMAT,
                "info": info,
                "layers": [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in self.layers],
            },
            path,
        )

    @classmethod
    def load(cls, path: Path) -> OptionPolicy:
        """``ModelError`` naming the file if it is missing, corrupt or of another format."""
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not an {FORMAT} file")
            layers = [(w.numpy(), b.numpy()) for w, b in data["layers"]]
            raw = dict(data["info"])
            raw["history"] = tuple((int(s), float(r)) for s, r in raw.get("history", ()))
            raw["dropped"] = tuple(raw.get("dropped", ()))
            raw["cost_model"] = str(raw.get("cost_model", ""))
            raw["compute_device"] = str(raw.get("compute_device", ""))
            raw["spread_every_table"] = bool(raw.get("spread_every_table", False))
            info = PolicyInfo(**raw)
            if not layers or layers[0][0].shape[0] != ROW or layers[-1][0].shape[1] != 1:
                raise ValueError(f"layer shapes do not fit {ROW} inputs and one score")
        except FileNotFoundError:
            raise ModelError(f"no policy at {path}; train one with `autoshard policy train`") from None
        except Exception as error:  # torch raises many kinds for a corrupt file
            raise ModelError(
                f"policy {path} cannot load ({type(error).__name__}: {error}); retrain it with `autoshard policy train`"
            ) from None
        return cls(layers, info)

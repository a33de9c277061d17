"""The agent's policy: one shared-weight MLP scores every device, so it plans any device count.

``DeviceScorerNet`` is the network (actor: a score per device row; critic: mean- and max-pooled
device embeddings with the context). ``DeviceScoringPolicy`` plugs it into sb3-contrib's
``MaskablePPO`` through SB3's extension point (the ``mlp_extractor``), without forking PPO.
``DevicePolicy`` is the trained actor on its own, loaded from ``policy.pt`` for planning: it
scores the devices of any task, D larger than the training slots included.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from autoshard.core.errors import ModelError
from autoshard.rl.observation import (
    DEVICE_FEATURES,
    GLOBAL_FEATURES,
    UNIT_FEATURES,
    Observations,
)

POLICY_FILE = "policy.pt"
FORMAT = "autoshard-policy-v1"
CONTEXT = len(GLOBAL_FEATURES) + len(UNIT_FEATURES)
ROW = CONTEXT + len(DEVICE_FEATURES)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class DeviceScorerNet(nn.Module):
    """Input: ``[batch, CONTEXT + slots x F]``. Actor: ``[batch, slots]`` device scores; critic:
    ``[batch, hidden]`` latent for SB3's value head."""

    def __init__(self, slots: int, hidden: int) -> None:
        super().__init__()
        self.slots, self.hidden = slots, hidden
        self.latent_dim_pi, self.latent_dim_vf = slots, hidden
        self.scorer = _mlp([ROW, hidden, hidden, 1])
        self.embed = _mlp([ROW, hidden, hidden])
        self.value = _mlp([2 * hidden + CONTEXT, hidden, hidden])

    def _rows(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        context = features[:, :CONTEXT]
        devices = features[:, CONTEXT:].reshape(len(features), self.slots, len(DEVICE_FEATURES))
        rows = torch.cat([context.unsqueeze(1).expand(-1, self.slots, -1), devices], dim=2)
        return context, rows

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.scorer(self._rows(features)[1]).squeeze(-1)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        context, rows = self._rows(features)
        real = rows[:, :, CONTEXT : CONTEXT + 1]  # the ``real`` device flag
        h = self.embed(rows)
        mean = (h * real).sum(1) / real.sum(1).clamp(min=1)
        largest = torch.where(real > 0, h, torch.full_like(h, -1e4)).amax(1)
        return self.value(torch.cat([mean, largest, context], dim=1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class DeviceScoringPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy with ``DeviceScorerNet`` as its ``mlp_extractor``; the per-device
    scores are the action logits (the action net is the identity)."""

    def __init__(self, *args: Any, hidden: int = 64, **kwargs: Any) -> None:
        self.hidden = hidden
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        assert isinstance(self.action_space, spaces.Discrete)
        self.mlp_extractor = DeviceScorerNet(int(self.action_space.n), self.hidden)  # type: ignore[assignment]

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        assert isinstance(self.mlp_extractor, DeviceScorerNet)
        last = self.mlp_extractor.scorer[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)  # near-uniform scores at the start
        nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # SB3 passes lr to torch's optimizers
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """What travels with a trained policy: how it was trained, and what its env looked like."""

    profile: str
    hidden: int
    slots: int
    reward: str
    set_size_headroom: float
    steps: int
    command: str = ""
    eval_ratio_to_greedy: float | None = None
    repair_rounds: int = 0  # the env's: 0, a policy that only places (``autoshard.rl.repair``)


class DevicePolicy:
    """The trained actor in numpy: scores the devices of any task, one row each."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], info: PolicyInfo) -> None:
        self.layers, self.info = layers, info

    @property
    def name(self) -> str:
        repair = f", {self.info.repair_rounds} repair rounds" if self.info.repair_rounds else ""
        return f"{self.info.profile}/{POLICY_FILE} ({self.info.steps:,} steps, {self.info.reward} reward{repair})"

    @classmethod
    def from_net(cls, net: DeviceScorerNet, info: PolicyInfo) -> DevicePolicy:
        layers = [
            (m.weight.detach().float().numpy().T.copy(), m.bias.detach().float().numpy().copy())
            for m in net.scorer
            if isinstance(m, nn.Linear)
        ]
        return cls(layers, info)

    def scores(self, observations: Observations) -> np.ndarray:
        """One score per device row of every placement observed (higher is better); mask before
        taking the argmax. A placement's shared context enters the first layer once, not once
        per device."""
        (w, b), rest = self.layers[0], self.layers[1:]
        context = observations.contexts @ w[:CONTEXT] + b
        if len(context) > 1:
            context = context[observations.placement_of_row]
        x = np.tanh(observations.devices @ w[CONTEXT:] + context)
        for i, (w, b) in enumerate(rest):
            x = x @ w + b
            if i < len(rest) - 1:
                x = np.tanh(x)
        return x[:, 0]

    def save(self, path: Path) -> None:
        torch.save(
            {
                "format": FORMAT,
                "info": asdict(self.info),
                "layers": [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in self.layers],
            },
            path,
        )

    @classmethod
    def load(cls, path: Path) -> DevicePolicy:
        """``ModelError`` naming the file if it is missing, corrupt or of another format."""
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not an {FORMAT} file")
            layers = [(w.numpy(), b.numpy()) for w, b in data["layers"]]
            info = PolicyInfo(**data["info"])
            width = CONTEXT + len(DEVICE_FEATURES)
            if not layers or layers[0][0].shape[0] != width or layers[-1][0].shape[1] != 1:
                raise ValueError(f"layer shapes do not fit {width} inputs and one score")
        except FileNotFoundError:
            raise ModelError(f"no policy at {path}; train one with `autoshard policy train`") from None
        except Exception as error:  # torch raises many kinds for a corrupt file
            raise ModelError(
                f"policy {path} cannot load ({type(error).__name__}: {error}); retrain it with `autoshard policy train`"
            ) from None
        return cls(layers, info)

"""Weight averaging: what validation, the result and export see is an exponential moving average
of the trained weights (Polyak averaging), masks included.

On the small sets one validation round's weights carry the noise of the last few batches; the
average over the last ~horizon steps does not. torch.optim.swa_utils keeps the average; the
buffers (input statistics, BatchNorm calibration) are copied, not averaged.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class WeightAverage:
    """The average of ``model``'s parameters over about ``horizon`` steps (decay 1 - 1/horizon)."""

    def __init__(self, model: nn.Module, horizon: float):
        self.decay = 1.0 - 1.0 / max(horizon, 1.0)
        self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay))

    @property
    def module(self) -> nn.Module:
        return self.averaged.module

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.averaged.update_parameters(model)
        for mine, theirs in zip(self.module.buffers(), model.buffers()):
            mine.copy_(theirs)

    def state_dict(self) -> dict:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.averaged.load_state_dict(state)

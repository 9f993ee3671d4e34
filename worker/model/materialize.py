"""materialize: a model built on the meta device gets real, uninitialised storage."""

from __future__ import annotations

import torch
from torch import nn


def materialize(model: nn.Module, device: torch.device) -> None:
    """Each parameter and buffer still on the meta device becomes an empty tensor of its shape
    and dtype on `device`, in place; a parameter shared by two modules stays shared.

    nn.Module.to_empty does this through torch.empty_like, whose meta path imports sympy: a
    second of every worker's start and 34 MiB of its memory, for a handful of norm weights.
    """
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                empty = torch.empty(param.shape, dtype=param.dtype, device=device)
                made[id(param)] = nn.Parameter(empty, requires_grad=param.requires_grad)
            module._parameters[name] = made[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_meta:
                module._buffers[name] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)

"""RowInput: what the sampler reads from one running sequence, whoever keeps it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from common.sampling_params import SamplingParams


class RowInput(Protocol):
    """What the sampler reads from one running sequence."""

    @property
    def params(self) -> SamplingParams: ...

    @property
    def generator(self) -> torch.Generator | None: ...

    @property
    def prompt_token_ids(self) -> Sequence[int]: ...

    @property
    def output_token_ids(self) -> Sequence[int]: ...

"""KVStorage's own operations on its k/v tensors."""

from __future__ import annotations

import torch

from worker.kv.base import KVStorage


def test_clear_slots_zeros_the_pages_holding_those_slots_and_no_others() -> None:
    storage = KVStorage(2, 6, 4, 1, 8, torch.float32, torch.device("cpu"))
    storage.k.fill_(1.0)
    storage.v.fill_(2.0)
    storage.clear_slots(6)  # slots 0-5: pages 0 and 1 of every layer
    for k, v in storage.layers:
        assert not k[:8].any() and not v[:8].any()
        assert bool((k[8:] == 1.0).all()) and bool((v[8:] == 2.0).all())

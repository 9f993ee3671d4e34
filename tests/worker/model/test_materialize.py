"""materialize: meta parameters and buffers get real storage, shared ones stay shared."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn

from bench.server import REPO
from worker.machine.heap import release_freed_heap
from worker.model.materialize import materialize


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.norm = nn.LayerNorm(4)
        self.register_buffer("table", torch.zeros(3))


def test_meta_tensors_get_storage_of_their_shape_and_dtype_and_ties_hold():
    with torch.device("meta"):
        model = _Tied().to(torch.bfloat16)
    loaded = torch.ones(2)
    model.register_buffer("loaded", loaded)  # real already: left as it is
    materialize(model, torch.device("cpu"))
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        assert tensor.device.type == "cpu", name
        assert tensor.dtype == torch.bfloat16 or name == "loaded", name
    assert model.head.weight is model.embed.weight
    assert model.norm.weight.shape == (4,) and model.table.shape == (3,)
    assert model.loaded is loaded
    assert isinstance(model.norm.weight, nn.Parameter) and model.norm.weight.requires_grad


def test_materializing_imports_no_sympy():
    """What it is for: nn.Module.to_empty imports sympy (a second at each start); in a fresh
    interpreter, so that no other test's imports count."""
    code = (
        "import sys, torch\n"
        "from worker.model.materialize import materialize\n"
        "with torch.device('meta'):\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))\n"
        "materialize(model, torch.device('cpu'))\n"
        "assert 'sympy' not in sys.modules, 'sympy imported'\n"
        "assert all(p.device.type == 'cpu' for p in model.parameters())\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_the_heap_is_trimmed_where_the_c_library_can():
    assert release_freed_heap() == sys.platform.startswith("linux")

"""Huge-page host buffers keep tensors' values and shapes; only where the bytes live changes."""

from __future__ import annotations

import torch
from torch import nn

from sprig.runtime.model import host_memory


def test_zeros_is_zeros_of_the_shape_and_dtype():
    t = host_memory.zeros((3, 1 << 20), torch.bfloat16)
    assert t.shape == (3, 1 << 20) and t.dtype == torch.bfloat16 and not t.any()


def test_packing_keeps_every_parameter_and_buffer():
    model = nn.Sequential(nn.Linear(7, 5), nn.LayerNorm(5), nn.Linear(5, 3).to(torch.bfloat16))
    model.register_buffer("table", torch.arange(10.0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moved = host_memory.pack_parameters(model)
    assert moved > 0
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]) and v.is_contiguous() and v.data_ptr() % 64 == 0, k
    x = torch.randn(2, 7)
    assert model[0](x).shape == (2, 5)  # still an ordinary module


def test_packing_an_empty_model_gives_zeros():
    model = nn.Linear(4, 4)
    host_memory.pack_parameters(model, keep_values=False)
    assert not model.weight.any() and not model.bias.any()

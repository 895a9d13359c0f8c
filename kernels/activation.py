"""Gated activations (torch reference)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU: silu(gate) * up for gate_up = [..., 2 * I] holding gate then up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def gelu_tanh_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """GeGLU: gelu(gate) (tanh approximation) * up for gate_up = [..., 2 * I] holding gate then up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up

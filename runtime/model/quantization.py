"""Weight-only int8 linears: per-output-channel symmetric scales, activations stay in the model dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

QUANTIZATION_METHODS = ("int8",)


def quantize_rows_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (int8 weight, float32 scale per row) with w ≈ q * scale[:, None]."""
    w32 = w.float()
    scale = w32.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.clamp(torch.round(w32 / scale[:, None]), -127, 127).to(torch.int8)
    return q, scale


def _int8_kernel_available(dtype: torch.dtype) -> bool:
    # The fused int8-weight matmul exists on CPU for fp32/bf16/fp16 activations in recent torch builds.
    try:
        x = torch.zeros(1, 32, dtype=dtype)
        torch.ops.aten._weight_int8pack_mm(x, torch.zeros(32, 32, dtype=torch.int8), torch.ones(32, dtype=dtype))
        return True
    except (RuntimeError, AttributeError):
        return False


class Int8Linear(nn.Module):
    """Drop-in for `Linear` holding an int8 weight [out, in] and a scale per output row."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8), requires_grad=False)
        self.scales = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dtype = dtype
        self.use_kernel = _int8_kernel_available(dtype)

    def load_rows(self, start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [start, start + len(w)) into this layer."""
        q, scale = quantize_rows_int8(w)
        self.weight.data[start : start + len(w)].copy_(q)
        self.scales.data[start : start + len(w)].copy_(scale.to(self.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_kernel and x.device.type == "cpu":
            y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), self.weight, self.scales)
            y = y.reshape(*x.shape[:-1], -1)
        else:
            y = F.linear(x, self.weight.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias

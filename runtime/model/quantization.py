"""Quantized linears: int8 (per output row) and fp8 e4m3 (per tensor, per row or 128x128 blocks).

int8 linears on the CPU run sprig's W8A8 kernel (`kernels/cpu_int8.py`: activations quantized per row at each call,
exact int32 products) where it takes the model dtype (fp32, bf16), else torch's weight-only `_weight_int8pack_mm`
(activations in the model dtype). fp8 activations stay in the model dtype. fp8 weights come from a checkpoint whose config.json has an fp8
`quantization_config` (`Fp8Format.from_config`: vLLM / SGLang `quant_method: fp8` and compressed-tensors float8),
or from `--quantization fp8`, which quantizes a full-precision checkpoint per output row at load. GGML block
formats (`--quantization q8_0|q4_0|q4_1`, GGUF files) live in `block_quant.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.cpu_int8 import Int8Isa, Int8Packed, int8_isa, int8_linear, int8_pack, int8_supports
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.block_quant import BLOCK_QUANTIZATIONS
from sprig.runtime.model.int4_checkpoints import INT4_METHODS

QUANTIZATION_METHODS = ("int8", "fp8", *BLOCK_QUANTIZATIONS)
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


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

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 out_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8), requires_grad=False)
        self.scales = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dtype = dtype
        self.out_dtype = out_dtype or dtype  # the LM head's: LOGITS_DTYPE, written by the kernel unrounded
        self.use_kernel = _int8_kernel_available(dtype)
        self.isa: Int8Isa | None = None  # the W8A8 kernel's code path, once `pack_for_cpu` chose it
        self.packed: Int8Packed | None = None  # the packed_* buffers below, once `pack_for_cpu` filled them
        for name in Int8Packed._fields:  # the weight in the W8A8 kernel's layout, see pack_for_cpu
            self.register_buffer(f"packed_{name}", None, persistent=False)

    def pack_for_cpu(self) -> Int8Isa | None:
        """Re-lay the loaded weight out for sprig's W8A8 kernel where it takes it (at decode sizes it reads half the
        bytes of the bf16 kernels, see `kernels/csrc/int8_gemm.c`) and drop the plain weight; returns the kernel's
        code path, or None (torch's path stays) for other dtypes, SPRIG_CPU_ISA=none or no C kernels."""
        weight = self.weight.detach()
        if not int8_supports(weight, self.dtype):
            return None
        bias = None if self.bias is None else self.bias.detach()
        # buffers (registered in __init__): the loader moves them onto huge pages
        self.packed_weight, self.packed_corr, self.packed_scale, self.packed_bias = int8_pack(
            weight, self.scales.detach(), bias)
        # The same tensors as one tuple, so a call does no buffer lookups (they keep their objects when moved).
        self.packed = Int8Packed(self.packed_weight, self.packed_corr, self.packed_scale, self.packed_bias)
        self.isa = int8_isa()
        self.weight = nn.Parameter(torch.empty(weight.shape, dtype=torch.int8, device="meta"), requires_grad=False)
        return self.isa

    def load_rows(self, start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [start, start + len(w)) into this layer."""
        q, scale = quantize_rows_int8(w)
        self.weight.data[start : start + len(w)].copy_(q)
        self.scales.data[start : start + len(w)].copy_(scale.to(self.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return int8_linear(x, self.packed, self.weight.shape[0], self.isa, self.out_dtype)
        if self.use_kernel and x.device.type == "cpu":
            y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), self.weight, self.scales)
            y = y.reshape(*x.shape[:-1], -1)
        else:
            y = F.linear(x, self.weight.to(x.dtype)) * self.scales
        return (y if self.bias is None else y + self.bias).to(self.out_dtype)


@dataclass(frozen=True)
class Fp8Format:
    """How an fp8 checkpoint stores its linear weights' scales.

    strategy "tensor": one scale per weight tensor; "channel": one per output row [out, 1]; "block": one per
    block [ceil(out / rows), ceil(in / cols)]. `scale_suffix` names the scale tensor beside `<layer>.weight`;
    `inverse` is historical naming only (`weight_scale_inv` multiplies, as in vLLM and SGLang).
    """

    strategy: str
    block: tuple[int, int] | None
    scale_suffix: str
    ignore: tuple[str, ...] = ()  # module names kept in full precision (compressed-tensors' "ignore")

    @staticmethod
    def from_config(folder: Path) -> Fp8Format | None:
        """The fp8 format of the checkpoint in `folder`; None without a quantization_config; a one-line
        CheckpointError for a quantization sprig cannot load."""
        try:
            raw = json.loads((folder / "config.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None  # load_model_config reports these
        qc = raw.get("quantization_config")
        if qc is None:
            return None
        if not isinstance(qc, dict):
            raise CheckpointError("config.json: quantization_config must be an object")
        method = qc.get("quant_method")
        if method == "fp8":
            return _vllm_format(qc)
        if method == "compressed-tensors":
            return _compressed_tensors_format(qc)
        if method in INT4_METHODS:
            return None  # 4-bit: Int4Format.from_config reads these
        raise CheckpointError(f"config.json: quantization_config.quant_method {method!r} is not supported "
                              "(sprig loads fp8, compressed-tensors float8, awq and gptq checkpoints)")


def _vllm_format(qc: dict[str, Any]) -> Fp8Format:
    if qc.get("fmt", "e4m3") != "e4m3":
        raise CheckpointError(f"config.json: fp8 fmt {qc.get('fmt')!r} is not supported (only e4m3)")
    block = qc.get("weight_block_size")
    if block is None:
        return Fp8Format("tensor", None, "weight_scale", tuple(qc.get("ignored_layers") or ()))
    return Fp8Format("block", _block(block, "weight_block_size"), "weight_scale_inv",
                     tuple(qc.get("ignored_layers") or ()))


def _compressed_tensors_format(qc: dict[str, Any]) -> Fp8Format:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise CheckpointError("config.json: compressed-tensors config_groups must hold exactly one group")
    weights = next(iter(groups.values())).get("weights") or {}
    if weights.get("num_bits") != 8 or weights.get("type") != "float":
        raise CheckpointError("config.json: only compressed-tensors float8 weights (num_bits 8, type float) load")
    strategy = weights.get("strategy")
    if strategy not in ("tensor", "channel", "block"):
        raise CheckpointError(f"config.json: compressed-tensors weight strategy {strategy!r} is not supported")
    block = _block(weights.get("block_structure"), "block_structure") if strategy == "block" else None
    return Fp8Format(strategy, block, "weight_scale", tuple(qc.get("ignore") or ()))


def _block(value: Any, field: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
        raise CheckpointError(f"config.json: {field} must be two positive integers, got {value!r}")
    return value[0], value[1]


def quantize_rows_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (fp8 e4m3 weight, float32 scale [rows, 1]) with w ≈ q * scale."""
    w32 = w.float()
    scale = w32.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    return (w32 / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def expand_scale(scale: torch.Tensor, fmt: Fp8Format, shape: tuple[int, int], name: str) -> torch.Tensor:
    """A checkpoint's scale tensor for a weight of `shape` as float32 [rows, column blocks]: one row per weight
    row, one column per `fmt.block` column block (one column unless block-scaled). Malformed: CheckpointError."""
    out_f, in_f = shape
    scale = scale.float()
    if fmt.strategy == "tensor":
        if scale.numel() != 1:
            raise CheckpointError(f"tensor {name} has shape {tuple(scale.shape)}, expected one per-tensor scale")
        return scale.reshape(1, 1).expand(out_f, 1)
    if fmt.strategy == "channel":
        if scale.numel() != out_f or (scale.dim() == 2 and scale.shape[1] != 1) or scale.dim() > 2:
            raise CheckpointError(f"tensor {name} has shape {tuple(scale.shape)}, expected ({out_f}, 1)")
        return scale.reshape(out_f, 1)
    assert fmt.block is not None  # block strategy
    rows, cols = fmt.block
    want = (math.ceil(out_f / rows), math.ceil(in_f / cols))
    if tuple(scale.shape) != want:
        raise CheckpointError(f"tensor {name} has shape {tuple(scale.shape)}, expected {want} for {rows}x{cols} "
                              f"blocks of a {out_f}x{in_f} weight")
    return scale.repeat_interleave(rows, dim=0)[:out_f]


class Fp8Linear(nn.Module):
    """Drop-in for `Linear` holding an fp8 e4m3 weight [out, in] and float32 scales [out, column blocks]
    (`col_block` input columns share a scale; per-tensor and per-row scales are one column)."""

    TILE_ROWS = 256  # output rows upcast at a time: the full-precision copy of the weight never exists whole

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 col_block: int | None = None) -> None:
        super().__init__()
        self.col_block = col_block or in_features
        blocks = math.ceil(in_features / self.col_block)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=FP8), requires_grad=False)
        self.weight_scale = nn.Parameter(torch.empty(out_features, blocks, dtype=torch.float32), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dtype = dtype

    def load_rows(self, start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [start, start + len(w)) into this layer (one scale per row)."""
        if self.col_block != self.weight.shape[1]:
            raise CheckpointError("a full-precision tensor cannot fill a block-scaled fp8 layer")
        q, scale = quantize_rows_fp8(w)
        self.weight.data[start : start + len(w)].copy_(q)
        self.weight_scale.data[start : start + len(w)].copy_(scale)

    def dequantized(self, rows: slice, dtype: torch.dtype) -> torch.Tensor:
        """Weight rows `rows` in `dtype`: codes times their row / block scale."""
        w = self.weight[rows].float()
        scale = self.weight_scale[rows].repeat_interleave(self.col_block, dim=1)[:, : w.shape[1]]
        return (w * scale).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out_f = self.weight.shape[0]
        y = torch.empty(*x.shape[:-1], out_f, dtype=x.dtype, device=x.device)
        for r0 in range(0, out_f, self.TILE_ROWS):
            rows = slice(r0, min(r0 + self.TILE_ROWS, out_f))
            y[..., rows] = F.linear(x, self.dequantized(rows, x.dtype))
        return y if self.bias is None else y + self.bias

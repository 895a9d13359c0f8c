"""AWQ and GPTQ 4-bit checkpoints (config.json `quantization_config.quant_method` awq / gptq), converted at load
into sprig's Q4_G128 blocks (`kernels/ggml_quants.py`), which the block-quantized kernels read.

Both store, per group of 128 input columns of one output column, an fp16 scale s and a 4-bit zero z, and each weight
is w = s * (q - z). Q4_G128 holds exactly that (the zero as a byte), so the conversion loses nothing: it unpacks the
codes and re-packs them along the input dimension, a block of output columns at a time (no full-precision copy).

- **AWQ GEMM** (AutoAWQ, `version: gemm`): `qweight` int32 [in, out/8], word c of row i holding output columns
  8c..8c+7 in nibbles (bits 4j..4j+3) ordered 0, 2, 4, 6, 1, 3, 5, 7; `qzeros` int32 [in/128, out/8] packed alike;
  `scales` fp16 [in/128, out]; z as stored.
- **GPTQ** (AutoGPTQ / GPTQModel): `qweight` int32 [in/8, out], nibble j of word r holding input 8r + j;
  `qzeros` int32 [groups, out/8], nibble j of word c holding output 8c + j; `scales` fp16 [groups, out]; `g_idx`
  int32 [in], each input column's group. `checkpoint_format: gptq` (v1, the default) stores z - 1, so z = stored
  + 1 (1..16: a zero of 0 is v1's known loss, and 16 fits Q4_G128's byte); `gptq_v2` stores z.
  With `desc_act` (act-order) the groups are scattered over the inputs: the layer's input columns are reordered
  at load so each group is 128 contiguous columns (`BlockQuantLinear.input_order`) and each call gathers the
  activations into that order (one index_select). q/k/v (and gate/up) share their input, so GPTQ gives them the
  same g_idx and sprig's fused projections one order; parts with different orders are a CheckpointError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from sprig.kernels.ggml_quants import GGMLType, pack_q4_g128
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.block_quant import BlockQuantLinear
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.linear import Linear

GROUP = 128  # the group size Q4_G128 holds
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the output column each nibble of an AWQ word holds
AWQ_NIBBLE = tuple(AWQ_ORDER.index(c) for c in range(8))  # the nibble that holds column c
SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)
COLUMN_CHUNK = 256  # output columns converted at a time (bounds the unpacked codes' size)
GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 0}  # checkpoint_format → what is added to a stored zero


class Int4Method(str, Enum):
    AWQ = "awq"
    GPTQ = "gptq"


INT4_METHODS = tuple(m.value for m in Int4Method)


@dataclass(frozen=True)
class Int4Format:
    """How an AWQ / GPTQ checkpoint stores its 4-bit linears (group size 128)."""

    method: Int4Method
    desc_act: bool = False
    zero_offset: int = 0  # added to each stored zero (GPTQ v1: 1)

    @property
    def parts(self) -> tuple[str, ...]:
        """The tensors beside each quantized linear's name (they replace `<layer>.weight`)."""
        common = ("qweight", "qzeros", "scales")
        return common + ("g_idx",) if self.method is Int4Method.GPTQ else common

    @staticmethod
    def from_config(folder: Path) -> Int4Format | None:
        """The format of the checkpoint in `folder`; None unless its quantization_config is awq or gptq; a
        one-line CheckpointError naming the field sprig cannot load."""
        try:
            qc = json.loads((folder / "config.json").read_text()).get("quantization_config")
        except (OSError, json.JSONDecodeError, AttributeError):
            return None  # load_model_config reports these
        if not isinstance(qc, dict) or qc.get("quant_method") not in INT4_METHODS:
            return None
        method = Int4Method(qc["quant_method"])
        _require(qc, ("bits", "w_bit"), 4, "4-bit")
        _require(qc, ("group_size", "q_group_size"), GROUP, "groups of 128")
        if method is Int4Method.AWQ:
            return _awq_format(qc)
        return _gptq_format(qc)


def _field(qc: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        if name in qc:
            return name, qc[name]
    return names[0], None


def _require(qc: dict[str, Any], names: tuple[str, ...], want: Any, what: str) -> None:
    name, value = _field(qc, names)
    if value != want:
        raise CheckpointError(f"config.json: quantization_config.{name} {value!r} is not supported (sprig loads "
                              f"{qc.get('quant_method')} checkpoints with {what})")


def _awq_format(qc: dict[str, Any]) -> Int4Format:
    version = str(qc.get("version", "gemm")).lower()
    if version != "gemm":
        raise CheckpointError(f"config.json: quantization_config.version {qc.get('version')!r} is not supported "
                              "(sprig loads AWQ's GEMM layout)")
    if qc.get("zero_point", True) is not True:
        raise CheckpointError("config.json: quantization_config.zero_point must be true (AWQ GEMM stores zeros)")
    kept = [m for m in qc.get("modules_to_not_convert") or () if m != "lm_head"]
    if kept:
        raise CheckpointError(f"config.json: quantization_config.modules_to_not_convert {kept!r} is not supported "
                              "(sprig quantizes every decoder linear)")
    return Int4Format(Int4Method.AWQ)


def _gptq_format(qc: dict[str, Any]) -> Int4Format:
    name, fmt = _field(qc, ("checkpoint_format", "format"))
    fmt = "gptq" if fmt is None else fmt
    if fmt not in GPTQ_FORMATS:
        raise CheckpointError(f"config.json: quantization_config.{name} {fmt!r} is not supported (sprig loads "
                              f"{', '.join(GPTQ_FORMATS)})")
    desc_act = qc.get("desc_act", False)
    if not isinstance(desc_act, bool):
        raise CheckpointError(f"config.json: quantization_config.desc_act must be true or false, got {desc_act!r}")
    if qc.get("lm_head", False):
        raise CheckpointError("config.json: quantization_config.lm_head true is not supported (a quantized LM head)")
    if qc.get("dynamic"):
        raise CheckpointError("config.json: quantization_config.dynamic (per-module overrides) is not supported")
    return Int4Format(Int4Method.GPTQ, desc_act, GPTQ_FORMATS[fmt])


def use_int4_linears(model: CausalLM, dtype: torch.dtype) -> None:
    """On a model still on the meta device: the decoder layers' linears become Q4_G128 `BlockQuantLinear`s (the
    LM head and embeddings stay in `dtype`, as AWQ / GPTQ checkpoints keep them); a CheckpointError unless every
    linear's inputs are whole groups of 128."""
    for layer in model.layers:
        for parent in layer.modules():
            for name, child in parent.named_children():
                if isinstance(child, Linear):
                    out_f, in_f = child.weight.shape
                    setattr(parent, name, BlockQuantLinear(in_f, out_f, GGMLType.Q4_G128, child.bias is not None,
                                                           dtype))


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """int32 [..., w] → the 8 nibbles of each word, lowest first: uint8 [..., w, 8]."""
    return ((packed.unsqueeze(-1) >> SHIFTS) & 15).to(torch.uint8)


def _columns(packed: torch.Tensor, method: Int4Method) -> torch.Tensor:
    """int32 [rows, cols / 8], 8 columns per word → uint8 [rows, cols] in column order."""
    nib = _nibbles(packed)
    if method is Int4Method.AWQ:
        nib = nib[..., list(AWQ_NIBBLE)]
    return nib.reshape(packed.shape[0], -1)


@dataclass
class Int4Loader:
    """Collects each quantized checkpoint linear's tensors and converts the layer once all have been read (they
    may sit in different safetensors shards)."""

    fmt: Int4Format
    pending: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    orders: dict[int, torch.Tensor | None] = field(default_factory=dict)  # per fused layer: its parts' input order

    def take(self, name: str, part: str, layer: BlockQuantLinear, row_start: int, rows: int,
             tensor: torch.Tensor) -> None:
        """Tensor `name` (`<prefix>.<part>`) of the checkpoint linear at rows [row_start, +rows) of `layer`."""
        prefix = name.removesuffix(part)
        got = self.pending.setdefault(prefix, {})
        got[part] = tensor
        if len(got) == len(self.fmt.parts):
            del self.pending[prefix]
            self._convert(prefix, got, layer, row_start, rows)

    def _convert(self, prefix: str, t: dict[str, torch.Tensor], layer: BlockQuantLinear, row_start: int,
                 rows: int) -> None:
        k, groups, awq = layer.in_features, layer.in_features // GROUP, self.fmt.method is Int4Method.AWQ
        shapes = {"qweight": (k, rows // 8) if awq else (k // 8, rows), "qzeros": (groups, rows // 8),
                  "scales": (groups, rows), "g_idx": (k,)}
        dtypes = {"qweight": torch.int32, "qzeros": torch.int32, "scales": torch.float16, "g_idx": torch.int32}
        for part, tensor in t.items():
            if tuple(tensor.shape) != shapes[part] or rows % 8:
                raise CheckpointError(f"tensor {prefix}{part} has shape {tuple(tensor.shape)}, expected "
                                      f"{shapes[part]} for a {rows}x{k} {self.fmt.method.value} linear")
            if tensor.dtype != dtypes[part]:
                raise CheckpointError(f"tensor {prefix}{part} is {str(tensor.dtype).removeprefix('torch.')}, "
                                      f"expected {str(dtypes[part]).removeprefix('torch.')}")
        order = _input_order(t["g_idx"], prefix) if "g_idx" in t else None
        self._set_order(layer, order, prefix)
        for c0 in range(0, rows, COLUMN_CHUNK):
            c1 = min(c0 + COLUMN_CHUNK, rows)
            if awq:
                codes = _columns(t["qweight"][:, c0 // 8 : c1 // 8], Int4Method.AWQ)
            else:  # GPTQ packs along the inputs: word r's nibble j is input 8r + j
                codes = _nibbles(t["qweight"][:, c0:c1].T).reshape(c1 - c0, k).T
            if order is not None:
                codes = codes[order]
            zeros = _columns(t["qzeros"][:, c0 // 8 : c1 // 8], self.fmt.method) + self.fmt.zero_offset
            raw = pack_q4_g128(codes.T, zeros.T, t["scales"][:, c0:c1].T)
            layer.load_raw(row_start + c0, raw)

    def _set_order(self, layer: BlockQuantLinear, order: torch.Tensor | None, prefix: str) -> None:
        key = id(layer)
        if key in self.orders:
            seen = self.orders[key]
            same = seen is None and order is None or (
                seen is not None and order is not None and torch.equal(seen, order))
            if not same:
                raise CheckpointError(f"tensor {prefix}g_idx orders the inputs unlike the other projections fused "
                                      "with it (sprig fuses q/k/v and gate/up)")
            return
        self.orders[key] = order
        layer.input_order = None if order is None else order.to(layer.weight.device)

    def finish(self) -> None:
        """A CheckpointError naming a quantized linear that lacks some of its tensors."""
        for prefix, got in self.pending.items():
            lacking = [p for p in self.fmt.parts if p not in got]
            raise CheckpointError(f"missing tensors in checkpoint: {', '.join(prefix + p for p in lacking)}")


def _input_order(g_idx: torch.Tensor, prefix: str) -> torch.Tensor | None:
    """The input columns ordered by group (stable), or None when they are already; a CheckpointError unless each
    group holds exactly 128 columns."""
    order = torch.argsort(g_idx, stable=True)
    expected = torch.arange(g_idx.shape[0], dtype=torch.int32) // GROUP
    if not torch.equal(g_idx[order], expected):
        raise CheckpointError(f"tensor {prefix}g_idx does not give each group of inputs {GROUP} columns")
    return None if torch.equal(order, torch.arange(g_idx.shape[0])) else order

"""GGML block-quantized weights kept quantized in memory (`kernels/ggml_quants.py` lists the formats).

`BlockQuantLinear` holds a linear layer's weight as its raw GGML rows (uint8 [out, row_bytes], as a GGUF file
stores them): the C kernel (`kernels/cpu_block_quant.py`) reads those blocks as they are, so the resident weight is
the file's bytes. Where the kernel cannot run (no C kernels, SPRIG_CPU_ISA=none, fp16 activations, another device)
`forward` dequantizes a tile of rows at a time and multiplies with F.linear, so a full-precision copy of the weight
never exists whole. `BlockQuantEmbedding` keeps the token embedding table quantized the same way; a lookup
dequantizes only the rows it reads, and a tied LM head (`tied_head`) is a `BlockQuantLinear` over the same bytes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.cpu_int8 import Int8Isa
from sprig.kernels.ggml_quants import GGMLType, dequantize, ggml_type, quantize
from sprig.runtime.errors import CheckpointError

# --quantization names → the GGML type a full-precision checkpoint is quantized into at load
BLOCK_QUANTIZATIONS = {"q8_0": GGMLType.Q8_0, "q4_0": GGMLType.Q4_0, "q4_1": GGMLType.Q4_1}


def checkpoint_type(type_id: int, tensor: str) -> GGMLType:
    """The GGMLType of a checkpoint tensor's GGML type id; a one-line CheckpointError naming both when sprig
    cannot read that type."""
    try:
        return ggml_type(type_id)
    except ValueError as e:
        raise CheckpointError(f"tensor {tensor}: {e}") from None


def _raw_rows(qtype: GGMLType, rows: int, cols: int) -> nn.Parameter:
    try:
        row_bytes = qtype.row_bytes(cols)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return nn.Parameter(torch.empty(rows, row_bytes, dtype=torch.uint8), requires_grad=False)


def _check_raw(module: nn.Module, row_start: int, raw_rows: torch.Tensor) -> None:
    weight = module.weight
    if raw_rows.dtype != torch.uint8 or raw_rows.dim() != 2 or raw_rows.shape[1] != weight.shape[1]:
        raise CheckpointError(f"{module.qtype.name} rows must be uint8 [rows, {weight.shape[1]}], got "
                              f"{str(raw_rows.dtype).removeprefix('torch.')} {list(raw_rows.shape)}")
    if not 0 <= row_start <= row_start + raw_rows.shape[0] <= weight.shape[0]:
        raise CheckpointError(f"rows [{row_start}, {row_start + raw_rows.shape[0]}) are outside the "
                              f"{weight.shape[0]} rows of a {module.qtype.name} weight")


def _quantize_into(module: nn.Module, row_start: int, w: torch.Tensor) -> None:
    if w.dim() != 2 or w.shape[1] != module.in_features:
        raise CheckpointError(f"a [{module.weight.shape[0]}, {module.in_features}] {module.qtype.name} weight "
                              f"cannot take rows of shape {list(w.shape)}")
    try:
        raw = quantize(w, module.qtype)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    module.load_raw(row_start, raw)


class BlockQuantLinear(nn.Module):
    """Drop-in for the decoder's `Linear` holding the weight [out, in] as raw GGML `qtype` rows."""

    TILE_ROWS = 256  # output rows dequantized at a time on the torch path

    def __init__(self, in_features: int, out_features: int, qtype: GGMLType, bias: bool,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features, self.qtype, self.dtype = in_features, out_features, qtype, dtype
        self.weight = _raw_rows(qtype, out_features, in_features)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.isa: Int8Isa | None = None  # the C kernel's code path, once `pack_for_cpu` chose it

    @classmethod
    def sharing(cls, weight: nn.Parameter, in_features: int, qtype: GGMLType, dtype: torch.dtype) -> BlockQuantLinear:
        """A linear layer over an existing raw weight (the same Parameter: one copy in memory)."""
        with torch.device("meta"):
            linear = cls(in_features, weight.shape[0], qtype, False, dtype)
        linear.weight = weight
        return linear

    def load_raw(self, row_start: int, raw_rows: torch.Tensor) -> None:
        """Copy raw GGML rows (uint8 [rows, row_bytes], as a GGUF file stores them) into rows [row_start, ...)."""
        _check_raw(self, row_start, raw_rows)
        self.weight.data[row_start : row_start + raw_rows.shape[0]].copy_(raw_rows)

    def load_rows(self, row_start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [row_start, row_start + len(w)) into this layer."""
        _quantize_into(self, row_start, w)

    def pack_for_cpu(self) -> Int8Isa | None:
        """Choose the C kernel where it takes this layer (it reads the raw blocks as they are: nothing is re-laid
        out); returns its code path, or None when the torch path stays."""
        return self.isa  # the C kernel comes in the next commit

    def dequantized(self, rows: slice, dtype: torch.dtype) -> torch.Tensor:
        """Weight rows `rows` in `dtype`."""
        return dequantize(self.weight[rows], self.qtype, self.in_features).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=x.dtype, device=x.device)
        for r0 in range(0, self.out_features, self.TILE_ROWS):
            rows = slice(r0, min(r0 + self.TILE_ROWS, self.out_features))
            y[..., rows] = F.linear(x, self.dequantized(rows, x.dtype).to(x.device))
        return y if self.bias is None else y + self.bias


class BlockQuantEmbedding(nn.Module):
    """Drop-in for `nn.Embedding` holding the table [num_embeddings, embedding_dim] as raw GGML `qtype` rows."""

    def __init__(self, num_embeddings: int, embedding_dim: int, qtype: GGMLType, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.qtype, self.dtype = num_embeddings, embedding_dim, qtype, dtype
        self.in_features = embedding_dim  # for the shared loading helpers
        self.weight = _raw_rows(qtype, num_embeddings, embedding_dim)

    def load_raw(self, row_start: int, raw_rows: torch.Tensor) -> None:
        """Copy raw GGML rows (uint8 [rows, row_bytes]) into rows [row_start, ...)."""
        _check_raw(self, row_start, raw_rows)
        self.weight.data[row_start : row_start + raw_rows.shape[0]].copy_(raw_rows)

    def load_rows(self, row_start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [row_start, row_start + len(w)) into this table."""
        _quantize_into(self, row_start, w)

    def tied_head(self) -> BlockQuantLinear:
        """The LM head that shares this table (logits = x @ table^T), over the same bytes."""
        return BlockQuantLinear.sharing(self.weight, self.embedding_dim, self.qtype, self.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = dequantize(self.weight.index_select(0, flat), self.qtype, self.embedding_dim)
        return rows.to(self.dtype).view(*ids.shape, self.embedding_dim)


def resident_bytes(module: nn.Module) -> int:
    """Bytes of the distinct parameters and buffers of `module` (shared tensors counted once)."""
    seen: dict[int, int] = {}
    for t in (*module.parameters(), *module.buffers()):
        if t.device.type != "meta":
            seen[t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()] = t.numel() * t.element_size()
    return sum(seen.values())


def block_quantization(name: str | None) -> GGMLType | None:
    """The GGML type `--quantization name` quantizes into, or None for another method."""
    return BLOCK_QUANTIZATIONS.get(name or "")

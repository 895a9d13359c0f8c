"""GGML block-quantized weights kept quantized in memory (`kernels/ggml_quants.py` lists the formats).

`BlockQuantLinear` holds a linear layer's weight as its raw GGML rows (uint8 [out, row_bytes], as a GGUF file
stores them): the C kernel (`kernels/cpu_block_quant.py`) reads those blocks as they are, so the resident weight is
the file's bytes. On CUDA the Triton twins (`kernels/triton_block_quant.py`) read the same blocks in place. Where
neither runs (no C kernels, SPRIG_CPU_ISA=none, fp16 activations on the CPU, CUDA without triton) `forward`
dequantizes a tile of rows at a time and multiplies with F.linear, so a full-precision copy of the weight never
exists whole. `BlockQuantEmbedding` keeps the token embedding table quantized the same way; a lookup
dequantizes only the rows it reads, and a tied LM head (`tied_head`) is a `BlockQuantLinear` over the same bytes.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.cpu_block_quant import bq_embedding, bq_linear, bq_supports
from sprig.kernels.cpu_int8 import Int8Isa, int8_isa
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


@functools.cache
def _triton_kernels() -> ModuleType | None:
    """`kernels/triton_block_quant`, or None where triton is not installed (imported on first use: a CPU-only
    install never needs triton)."""
    try:
        from sprig.kernels import triton_block_quant
    except ImportError:
        return None
    return triton_block_quant


def _triton_runs(x: torch.Tensor, qtype: GGMLType) -> bool:
    """Whether `x` takes the Triton path: a CUDA tensor, triton installed, a type its kernels read."""
    if not x.is_cuda:
        return False
    kernels = _triton_kernels()
    return kernels is not None and qtype in kernels.SUPPORTED_TYPES


class RawRows(nn.Module):
    """A weight held as raw GGML `qtype` rows (uint8 [rows, row_bytes]) of `in_features` weights each."""

    def __init__(self, rows: int, in_features: int, qtype: GGMLType) -> None:
        super().__init__()
        self.in_features, self.qtype = in_features, qtype
        try:
            row_bytes = qtype.row_bytes(in_features)
        except ValueError as e:
            raise CheckpointError(str(e)) from None
        self.weight = nn.Parameter(torch.empty(rows, row_bytes, dtype=torch.uint8), requires_grad=False)

    def load_raw(self, row_start: int, raw_rows: torch.Tensor) -> None:
        """Copy raw GGML rows (uint8 [rows, row_bytes], as a GGUF file stores them) into rows [row_start, ...)."""
        rows, row_bytes = self.weight.shape
        if raw_rows.dtype != torch.uint8 or raw_rows.dim() != 2 or raw_rows.shape[1] != row_bytes:
            raise CheckpointError(f"{self.qtype.name} rows must be uint8 [rows, {row_bytes}], got "
                                  f"{str(raw_rows.dtype).removeprefix('torch.')} {list(raw_rows.shape)}")
        end = row_start + raw_rows.shape[0]
        if not 0 <= row_start <= end <= rows:
            raise CheckpointError(f"rows [{row_start}, {end}) are outside the {rows} rows of a {self.qtype.name} "
                                  "weight")
        self.weight.data[row_start:end].copy_(raw_rows)

    def load_rows(self, row_start: int, w: torch.Tensor) -> None:
        """Quantize a full-precision block of rows [row_start, row_start + len(w)) into this weight."""
        if w.dim() != 2 or w.shape[1] != self.in_features:
            raise CheckpointError(f"a [{self.weight.shape[0]}, {self.in_features}] {self.qtype.name} weight "
                                  f"cannot take rows of shape {list(w.shape)}")
        try:
            raw = quantize(w, self.qtype)
        except ValueError as e:
            raise CheckpointError(str(e)) from None
        self.load_raw(row_start, raw)


class BlockQuantLinear(RawRows):
    """Drop-in for the decoder's `Linear` holding the weight [out, in] as raw GGML `qtype` rows; the output in
    `out_dtype` (default `dtype`; the LM head's fp32, which the C kernel writes from its fp32 sums)."""

    TILE_ROWS = 256  # output rows dequantized at a time on the torch path
    input_order: torch.Tensor | None  # a buffer, see __init__

    def __init__(self, in_features: int, out_features: int, qtype: GGMLType, bias: bool,
                 dtype: torch.dtype, out_dtype: torch.dtype | None = None) -> None:
        super().__init__(out_features, in_features, qtype)
        self.out_features, self.dtype, self.out_dtype = out_features, dtype, out_dtype or dtype
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.isa: Int8Isa | None = None  # the C kernel's code path, once `pack_for_cpu` chose it
        # GPTQ act-order (desc_act): the input columns in the weight's order, gathered from x once per call
        self.register_buffer("input_order", None, persistent=False)

    @classmethod
    def sharing(cls, weight: nn.Parameter, in_features: int, qtype: GGMLType, dtype: torch.dtype,
                out_dtype: torch.dtype | None = None) -> BlockQuantLinear:
        """A linear layer over an existing raw weight (the same Parameter: one copy in memory)."""
        with torch.device("meta"):
            linear = cls(in_features, weight.shape[0], qtype, False, dtype, out_dtype)
        linear.weight = weight
        return linear

    def pack_for_cpu(self) -> Int8Isa | None:
        """Choose the C kernel where it takes this layer (it reads the raw blocks as they are: nothing is re-laid
        out); returns its code path, or None when the torch path stays."""
        self.isa = int8_isa() if bq_supports(self.qtype, self.in_features, self.dtype, self.weight) else None
        return self.isa

    def dequantized(self, rows: slice, dtype: torch.dtype) -> torch.Tensor:
        """Weight rows `rows` in `dtype` (their columns in `input_order` where one is set)."""
        return dequantize(self.weight[rows], self.qtype, self.in_features).to(dtype)

    def forward_triton(self, x: torch.Tensor) -> torch.Tensor:
        """The product on the Triton kernel, reading the blocks in place: the path of CUDA tensors (on the CPU it
        runs only under TRITON_INTERPRET=1, which is how it is tested)."""
        kernels = _triton_kernels()
        assert kernels is not None  # _triton_runs checked it
        y = kernels.block_quant_matmul(x, self.weight, self.qtype)
        return (y if self.bias is None else y + self.bias).to(self.out_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_order is not None:
            x = x.index_select(-1, self.input_order)
        if self.isa is not None and x.dtype == self.dtype:
            return bq_linear(x, self.weight, self.qtype, self.bias, self.isa, self.out_dtype)
        if _triton_runs(x, self.qtype):
            return self.forward_triton(x)
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=x.dtype, device=x.device)
        for r0 in range(0, self.out_features, self.TILE_ROWS):
            rows = slice(r0, min(r0 + self.TILE_ROWS, self.out_features))
            y[..., rows] = F.linear(x, self.dequantized(rows, x.dtype).to(x.device))
        return (y if self.bias is None else y + self.bias).to(self.out_dtype)


class BlockQuantEmbedding(RawRows):
    """Drop-in for `nn.Embedding` holding the table [num_embeddings, embedding_dim] as raw GGML `qtype` rows."""

    def __init__(self, num_embeddings: int, embedding_dim: int, qtype: GGMLType, dtype: torch.dtype) -> None:
        super().__init__(num_embeddings, embedding_dim, qtype)
        self.num_embeddings, self.embedding_dim, self.dtype = num_embeddings, embedding_dim, dtype
        self.in_c = False  # lookups in C (`pack_for_cpu`), else the torch reference

    def pack_for_cpu(self) -> bool:
        """Look rows up with the C kernel where it takes the table (decided once: a CPU graph replays the lookup);
        returns whether it does."""
        self.in_c = bq_supports(self.qtype, self.embedding_dim, self.dtype, self.weight)
        return self.in_c

    def tied_head(self, out_dtype: torch.dtype | None = None) -> BlockQuantLinear:
        """The LM head that shares this table (logits = x @ table^T, in `out_dtype`), over the same bytes."""
        return BlockQuantLinear.sharing(self.weight, self.embedding_dim, self.qtype, self.dtype, out_dtype)

    def lookup_triton(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` dequantized by the Triton kernel (bit-identical to the reference): the path of CUDA tensors
        (on the CPU only under TRITON_INTERPRET=1). An id out of range reads a zero row: the engine checks ids
        against the vocabulary, and a device-side check would cost a sync per step."""
        kernels = _triton_kernels()
        assert kernels is not None  # _triton_runs checked it
        return kernels.block_quant_rows(self.weight, ids, self.qtype, self.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if _triton_runs(self.weight, self.qtype):
            return self.lookup_triton(ids)
        if self.in_c:
            return bq_embedding(ids, self.weight, self.qtype, self.embedding_dim, self.dtype)
        flat = ids.reshape(-1)
        rows = dequantize(self.weight.index_select(0, flat), self.qtype, self.embedding_dim)
        return rows.to(self.dtype).view(*ids.shape, self.embedding_dim)


def resident_bytes(module: nn.Module) -> int:
    """Bytes of the distinct parameters and buffers of `module` (shared tensors counted once)."""
    seen: dict[int, int] = {}
    for t in (*module.parameters(), *module.buffers()):
        if t.device.type != "meta":
            seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def block_quantization(name: str | None) -> GGMLType | None:
    """The GGML type `--quantization name` quantizes into, or None for another method."""
    return BLOCK_QUANTIZATIONS.get(name or "")

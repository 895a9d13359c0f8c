"""A GGUF file's tensors into sprig's decoder: names mapped onto its modules, llama's Q/K row order restored.

Two modes. **Native** (the default): each linear or embedding stored block-quantized (Q8_0, Q4_*, Q*_K) becomes a
`BlockQuantLinear` / `BlockQuantEmbedding` holding the file's raw rows, never dequantized at load; a tied LM head
shares the embedding's bytes. A fused projection (q/k/v, gate/up) whose parts have different GGML types (Q4_K_M
files mix Q4_K and Q6_K) is held dequantized in the model dtype, and so is every F32 / F16 / BF16 tensor.
The loader ties a block-quantized head to the embedding (`_tie_block_quant_head`) before the tensors are read.
**Dequantized** (`--gguf-dequantize`): every tensor is dequantized into the model dtype, plain `Linear`s.

llama.cpp's converter interleaves the two rotary halves of each head's rows in `attn_q` / `attn_k` of `llama`
files (its rope pairs adjacent dimensions); whole rows move, so undoing it works on quantized rows as they are.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sprig.kernels.ggml_quants import GGMLType, dequantize
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.block_quant import BlockQuantEmbedding, BlockQuantLinear, RawRows, checkpoint_type
from sprig.runtime.model.config import ModelConfig
from sprig.runtime.model.decoder import MLP, CausalLM, DecoderLayer
from sprig.runtime.model.families import NormPlacement
from sprig.runtime.model.gguf_config import gguf_model_config
from sprig.runtime.model.gguf_file import GGUFFile, GGUFTensor, open_gguf
from sprig.runtime.model.gguf_tokenizer import check_tokenizer_metadata
from sprig.runtime.model.linear import Linear

logger = logging.getLogger(__name__)

PERMUTED_ARCHITECTURES = ("llama",)  # llama.cpp permutes q/k rows only for these (qwen2 / qwen3 keep HF's order)
CONFIG_TENSORS = ("rope_freqs.weight",)  # read into the config (gguf_config.py), not into a module
# A layer's norms: llama.cpp's name -> the `DecoderLayer` attribute (see loader.LAYER_NORMS for HF's names)
GGUF_LAYER_NORMS = {
    NormPlacement.PRE: {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"},
    NormPlacement.SANDWICH: {"attn_norm": "input_layernorm", "post_attention_norm": "attn_out_norm",
                             "ffn_norm": "post_attention_layernorm", "post_ffw_norm": "mlp_out_norm"},
    NormPlacement.POST: {"post_attention_norm": "attn_out_norm", "post_ffw_norm": "mlp_out_norm"},
}


@dataclass(frozen=True)
class GGUFTarget:
    """Where one GGUF tensor goes: rows [row_start, row_start + rows) of `module.attr`; `heads` > 0 undoes
    llama.cpp's rotary row interleave over that many heads."""

    module: nn.Module
    attr: str
    row_start: int = 0
    rows: int | None = None  # None: the whole parameter
    heads: int = 0


def gguf_targets(model: CausalLM, arch: str) -> dict[str, GGUFTarget]:
    """GGUF tensor name -> where it goes in `model` (a whole model: GGUF files load without tp / pp)."""
    cfg = model.cfg
    assert model.embed_tokens is not None and model.norm is not None  # a whole model holds both
    targets = {"token_embd.weight": GGUFTarget(model.embed_tokens, "weight"),
               "output_norm.weight": GGUFTarget(model.norm, "weight")}
    if not cfg.tie_word_embeddings:
        assert model.lm_head is not None  # built when untied
        targets["output.weight"] = GGUFTarget(model.lm_head, "weight")
    permuted = arch in PERMUTED_ARCHITECTURES
    q, kv, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    for i, layer in enumerate(model.layers):
        assert isinstance(layer, DecoderLayer)  # a ModuleList yields plain Modules
        p, attn, mlp = f"blk.{i}.", layer.self_attn, layer.mlp
        parts = {"q": (0, q, cfg.num_heads), "k": (q, kv, cfg.num_kv_heads), "v": (q + kv, kv, 0)}
        for name, (start, rows, heads) in parts.items():
            heads = heads if permuted else 0
            targets[f"{p}attn_{name}.weight"] = GGUFTarget(attn.qkv_proj, "weight", start, rows, heads)
            if cfg.attention_bias:
                targets[f"{p}attn_{name}.bias"] = GGUFTarget(attn.qkv_proj, "bias", start, rows, heads)
        targets[f"{p}attn_output.weight"] = GGUFTarget(attn.o_proj, "weight")
        if cfg.qk_norm:
            assert attn.q_norm is not None and attn.k_norm is not None  # built when qk_norm is set
            targets[f"{p}attn_q_norm.weight"] = GGUFTarget(attn.q_norm, "weight")
            targets[f"{p}attn_k_norm.weight"] = GGUFTarget(attn.k_norm, "weight")
        assert isinstance(mlp, MLP)  # GGUF files of MoE architectures are refused at load
        targets[f"{p}ffn_gate.weight"] = GGUFTarget(mlp.gate_up_proj, "weight", 0, inter)
        targets[f"{p}ffn_up.weight"] = GGUFTarget(mlp.gate_up_proj, "weight", inter, inter)
        targets[f"{p}ffn_down.weight"] = GGUFTarget(mlp.down_proj, "weight")
        for gguf_name, attr in GGUF_LAYER_NORMS[cfg.parts.norms].items():
            norm = getattr(layer, attr)
            assert norm is not None  # GGUF's architectures' placements name only the norms their layers build
            targets[f"{p}{gguf_name}.weight"] = GGUFTarget(norm, "weight")
    return targets


def check_gguf(path: str | Path, quantization: str | None = None,
               sharded: bool = False) -> tuple[GGUFFile, ModelConfig]:
    """Open the file and check what can be checked before building anything: the options (no --quantization, no
    tensor / pipeline parallelism), the header and tensor extents, the architecture and config, the tokenizer model
    and its size, every tensor's type. `sprig serve` runs this before it serves the port; each problem is a one-line
    CheckpointError."""
    if quantization is not None:
        raise CheckpointError(f"--quantization {quantization} does not apply to a GGUF file (its weights load as "
                              "stored; --gguf-dequantize loads them in the model dtype)")
    if sharded:
        raise CheckpointError("tensor and pipeline parallelism over a GGUF file are not supported yet; use "
                              "--tp-size 1 --pp-size 1")
    gguf = open_gguf(path)
    cfg = gguf_model_config(gguf)
    check_tokenizer_metadata(gguf, gguf.tensors["token_embd.weight"].shape[0])
    tensor_types(gguf)
    return gguf, cfg


def tensor_types(gguf: GGUFFile) -> dict[str, GGMLType]:
    """Each tensor's GGML type; a one-line CheckpointError naming the first tensor of a type sprig cannot read."""
    return {name: checkpoint_type(int(t.qtype), name) for name, t in gguf.tensors.items()}


def use_block_quant(model: CausalLM, gguf: GGUFFile) -> None:
    """On a model still on the meta device: the linears and embedding whose tensors are block-quantized become
    `BlockQuantLinear` / `BlockQuantEmbedding` of that type (native mode)."""
    types = tensor_types(gguf)
    targets = gguf_targets(model, gguf.arch)
    sources: dict[nn.Module, set[GGMLType]] = {}
    for name, target in targets.items():
        if target.attr == "weight" and name in types:
            sources.setdefault(target.module, set()).add(types[name])
    for parent in list(model.modules()):
        for child_name, child in parent.named_children():
            kinds = sources.get(child)
            qtype = next(iter(kinds)) if kinds is not None and len(kinds) == 1 else None
            if qtype is None or not qtype.quantized or qtype.dequantized_at_load:
                if kinds is not None and len(kinds) > 1:
                    logger.info("%s mixes GGML types %s: held in %s", child_name,
                                "/".join(sorted(k.name for k in kinds)), model.dtype)
                continue
            setattr(parent, child_name, _block_quant_module(child, qtype, model.dtype))


def _block_quant_module(child: nn.Module, qtype: GGMLType, dtype: torch.dtype) -> nn.Module:
    if isinstance(child, nn.Embedding):
        return BlockQuantEmbedding(child.num_embeddings, child.embedding_dim, qtype, dtype)
    assert isinstance(child, Linear)  # every other target of a 2-D tensor is a linear layer
    out_f, in_f = child.weight.shape
    return BlockQuantLinear(in_f, out_f, qtype, child.bias is not None, dtype, child.out_dtype)


def fill_from_gguf(model: CausalLM, gguf: GGUFFile) -> None:
    """Copy every tensor of the file into `model`; unexpected or missing tensors are one-line CheckpointErrors."""
    types = tensor_types(gguf)
    targets = gguf_targets(model, gguf.arch)
    unexpected = [n for n in gguf.tensors if n not in targets and n not in CONFIG_TENSORS]
    if unexpected:
        raise CheckpointError(f"unexpected tensor names in {gguf.path.name}: {_short_list(unexpected)}")
    missing = [n for n in targets if n not in gguf.tensors]
    if missing:
        raise CheckpointError(f"missing tensors in {gguf.path.name}: {_short_list(missing)}")
    for name, target in targets.items():
        _copy(target, name, gguf.tensors[name], types[name])


def _raw_rows(tensor: GGUFTensor) -> torch.Tensor:
    """The tensor's bytes as uint8 [rows, row_bytes] (a 1-D tensor is one row), without a copy."""
    rows = tensor.shape[0] if len(tensor.shape) > 1 else 1
    flat = np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # why: the read-only memory map is only ever read
        return torch.from_numpy(flat).reshape(rows, -1)


def _copy(target: GGUFTarget, name: str, tensor: GGUFTensor, qtype: GGMLType) -> None:
    param = getattr(target.module, target.attr)
    rows = param.shape[0] if target.rows is None else target.rows
    module = target.module
    block = isinstance(module, RawRows) and target.attr == "weight"
    cols = module.in_features if isinstance(module, RawRows) else param.shape[-1]
    expected = (rows,) if param.dim() == 1 else (rows, cols)
    if tensor.shape != expected:
        raise CheckpointError(f"tensor {name} has shape {tensor.shape}, expected {expected}")
    raw = _raw_rows(tensor)  # [rows, row_bytes]; a 1-D tensor is one row
    if block:
        assert isinstance(module, RawRows)  # `block` says so
        if qtype is not module.qtype:
            raise CheckpointError(f"tensor {name} is {qtype.name}, its layer holds {module.qtype.name}")
        module.load_raw(target.row_start, _unpermute_rows(raw, target.heads))
        return
    dest = param.data[target.row_start : target.row_start + rows]
    values = dequantize(raw, qtype, tensor.shape[-1]).reshape(rows, -1)  # a 1-D tensor as a column
    dest.copy_(_unpermute_rows(values, target.heads).reshape(dest.shape).to(dest.dtype))


def _unpermute_rows(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows in Hugging Face's order from llama.cpp's: per head, its rows were stored as (half, pair) -> pair-major
    interleave; the inverse swaps the two axes back."""
    if heads == 0:
        return rows
    n = rows.shape[0]
    return rows.reshape(heads, n // heads // 2, 2, -1).transpose(1, 2).reshape(n, -1)


def _short_list(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")

"""Load a Hugging Face checkpoint folder into a `CausalLM`, tensor by tensor through safetensors' memory map, or a
GGUF file (`gguf_loader.py` maps its tensors).

Longer than 450 lines: every checkpoint tensor's target (dense, MoE experts, the families' names and fused tensors,
fp8 scales, AWQ / GPTQ parts) is decided here, next to the one read loop that fills them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm import tqdm

from sprig.kernels.backend import get_kernels
from sprig.kernels.ggml_quants import GGMLType
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model import host_memory
from sprig.runtime.model.block_quant import (
    BlockQuantEmbedding,
    BlockQuantLinear,
    RawRows,
    block_quantization,
)
from sprig.runtime.model.config import ModelConfig, load_model_config
from sprig.runtime.model.cpu_packing import finish_for_device, packs_linears
from sprig.runtime.model.decoder import LOGITS_DTYPE, CausalLM, DecoderLayer, SparseMoE
from sprig.runtime.model.families import UNSPLIT_ARCHITECTURES, NormPlacement, text_tensor_name
from sprig.runtime.model.family_tensors import checkpoint_layout
from sprig.runtime.model.gguf_file import GGUFFile, is_gguf_path
from sprig.runtime.model.gguf_loader import check_gguf, fill_from_gguf, use_block_quant
from sprig.runtime.model.int4_checkpoints import Int4Format, Int4Loader, use_int4_linears
from sprig.runtime.model.linear import Linear
from sprig.runtime.model.moe import ExpertMLP, unstack_experts
from sprig.runtime.model.parallel import StageRange, TPContext
from sprig.runtime.model.quantization import (
    FP8,
    QUANTIZATION_METHODS,
    Fp8Format,
    Fp8Linear,
    Int8Linear,
    expand_scale,
)

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}
PROGRESS_DELAY_S = 0.5  # a load that finishes sooner never shows its progress bar
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints saved
# A layer's norms: the checkpoint's name -> the `DecoderLayer` attribute (Llama's "post_attention_layernorm" is
# the norm before the MLP; Gemma 2 / 3 and OLMo-2 use that name for the norm after attention).
LAYER_NORMS = {
    NormPlacement.PRE: {"input_layernorm": "input_layernorm", "post_attention_layernorm": "post_attention_layernorm"},
    NormPlacement.SANDWICH: {"input_layernorm": "input_layernorm", "post_attention_layernorm": "attn_out_norm",
                             "pre_feedforward_layernorm": "post_attention_layernorm",
                             "post_feedforward_layernorm": "mlp_out_norm"},
    NormPlacement.POST: {"post_attention_layernorm": "attn_out_norm", "post_feedforward_layernorm": "mlp_out_norm"},
}


@dataclass(frozen=True)
class SourceSlice:
    """The part of a checkpoint tensor one tensor-parallel rank reads: [start, start + length) along `dim`."""

    dim: int
    start: int
    length: int
    full: int  # the tensor's size along `dim` in a well-formed checkpoint


@dataclass(frozen=True)
class Target:
    """Where one checkpoint tensor goes: rows [row_start, row_start + rows) of a parameter."""

    module: nn.Module
    attr: str
    row_start: int = 0
    rows: int | None = None  # None: the whole parameter
    source: SourceSlice | None = None  # None: the whole checkpoint tensor
    reorder: Callable[[torch.Tensor], torch.Tensor] | None = None  # the checkpoint's row order into sprig's


def resolve_dtype(name: str, cfg: ModelConfig) -> torch.dtype:
    """`auto` takes the checkpoint's dtype; others by name."""
    key = cfg.torch_dtype if name == "auto" else name
    if key not in DTYPES:
        raise CheckpointError(f"unsupported dtype {name!r}; supported: auto, float32, bfloat16, float16")
    return DTYPES[key]


def _weight_targets(model: CausalLM, fp8: Fp8Format | None = None, int4: Int4Format | None = None
                    ) -> dict[str, Target]:
    """Where each checkpoint tensor goes; an fp8 checkpoint adds each fp8 linear's scale tensor, an AWQ / GPTQ one
    replaces each quantized linear's weight by its parts (`Int4Format.parts`)."""
    targets = _family_targets(model, _plain_targets(model))
    if int4 is not None:
        for name, target in list(targets.items()):
            if isinstance(target.module, BlockQuantLinear) and target.attr == "weight":
                del targets[name]
                for part in int4.parts:
                    targets[name.removesuffix("weight") + part] = Target(target.module, part, target.row_start,
                                                                         target.rows, target.source)
    if fp8 is not None:
        for name, target in list(targets.items()):
            if isinstance(target.module, Fp8Linear) and target.attr == "weight":
                scale = Target(target.module, "weight_scale", target.row_start, target.rows, target.source)
                targets[name.removesuffix("weight") + fp8.scale_suffix] = scale
    return targets


def _plain_targets(model: CausalLM) -> dict[str, Target]:
    cfg, local, plan = model.cfg, model.layer_cfg, model.plan
    sharded = model.tp.enabled

    def src(dim: int, start: int, length: int, full: int) -> SourceSlice | None:
        return SourceSlice(dim, start, length, full) if sharded else None  # why: size 1 reads whole tensors

    vocab = src(0, plan.vocab_start, plan.vocab_real, cfg.vocab_size)
    targets: dict[str, Target] = {}
    if model.embed_tokens is not None:
        targets["model.embed_tokens.weight"] = Target(model.embed_tokens, "weight", 0, plan.vocab_real, vocab)
    if model.norm is not None:
        targets["model.norm.weight"] = Target(model.norm, "weight")
    if model.lm_head is not None and not cfg.tie_word_embeddings:  # why: a tied head is filled as the embedding
        targets["lm_head.weight"] = Target(model.lm_head, "weight", 0, plan.vocab_real, vocab)
    d = cfg.head_dim
    q_src = src(0, plan.head_start * d, local.q_size, cfg.q_size)
    kv_src = src(0, plan.kv_head_start * d, local.kv_size, cfg.kv_size)
    mlp_src = src(0, plan.intermediate_start, local.intermediate_size, cfg.intermediate_size)
    for i, layer in enumerate(model.layers):
        assert isinstance(layer, DecoderLayer)  # a ModuleList yields plain Modules
        p = f"model.layers.{model.stage.start + i}."  # why: a pipeline stage's layer 0 is a later checkpoint layer
        attn, mlp = layer.self_attn, layer.mlp
        offsets = {"q": (0, local.q_size, q_src), "k": (local.q_size, local.kv_size, kv_src),
                   "v": (local.q_size + local.kv_size, local.kv_size, kv_src)}
        for name, (start, rows, source) in offsets.items():
            targets[f"{p}self_attn.{name}_proj.weight"] = Target(attn.qkv_proj, "weight", start, rows, source)
            if cfg.attention_bias:
                targets[f"{p}self_attn.{name}_proj.bias"] = Target(attn.qkv_proj, "bias", start, rows, source)
        o_src = src(1, plan.head_start * d, local.q_size, cfg.q_size)
        targets[f"{p}self_attn.o_proj.weight"] = Target(attn.o_proj, "weight", source=o_src)
        if cfg.qk_norm:
            assert attn.q_norm is not None and attn.k_norm is not None  # built when qk_norm is set
            targets[f"{p}self_attn.q_norm.weight"] = Target(attn.q_norm, "weight")
            targets[f"{p}self_attn.k_norm.weight"] = Target(attn.k_norm, "weight")
        if isinstance(mlp, SparseMoE):
            targets.update(_moe_targets(model, mlp, p))
        else:
            inter = local.intermediate_size
            targets[f"{p}mlp.gate_proj.weight"] = Target(mlp.gate_up_proj, "weight", 0, inter, mlp_src)
            targets[f"{p}mlp.up_proj.weight"] = Target(mlp.gate_up_proj, "weight", inter, inter, mlp_src)
            down_src = src(1, plan.intermediate_start, inter, cfg.intermediate_size)
            targets[f"{p}mlp.down_proj.weight"] = Target(mlp.down_proj, "weight", source=down_src)
        for hf_name, attr in LAYER_NORMS[cfg.parts.norms].items():
            norm = getattr(layer, attr)
            if norm is not None:  # why: StableLM's parallel layers share input_layernorm
                targets[f"{p}{hf_name}.weight"] = Target(norm, "weight")
    return targets


def _moe_targets(model: CausalLM, block: SparseMoE, prefix: str) -> dict[str, Target]:
    """A MoE block's tensors (`MoEConfig.names`): router, experts (stacked or unstacked), shared expert and gate."""
    moe, local_moe, plan = model.cfg.moe, model.layer_cfg.moe, model.plan
    assert moe is not None and local_moe is not None  # SparseMoE is built for MoE configs only
    sharded, names, experts = model.tp.enabled, moe.names, block.experts
    hidden, inter = model.cfg.hidden_size, experts.intermediate_size

    def src(dim: int, start: int, full: int, length: int) -> SourceSlice | None:
        return SourceSlice(dim, start, length, full) if sharded else None

    up_src = src(0, plan.expert_intermediate_start, moe.intermediate_size, inter)
    down_src = src(1, plan.expert_intermediate_start, moe.intermediate_size, inter)
    p = f"{prefix}{names.block}."
    targets = {f"{p}gate.weight": Target(block.gate, "weight")}
    for e in range(moe.num_experts):
        q = f"{p}experts.{e}."
        pair = None if experts.per_expert is None else experts.per_expert[e]  # quantized: linears of its own
        up: tuple[nn.Module, str] = (experts, "w13")
        down: tuple[nn.Module, str] = (experts, "w2")
        up_at, down_at = 2 * inter * e, hidden * e
        if isinstance(pair, ExpertMLP):
            (up, up_at), (down, down_at) = ((pair.gate_up_proj, "weight"), 0), ((pair.down_proj, "weight"), 0)
        targets[f"{q}{names.gate}.weight"] = Target(*up, up_at, inter, up_src)
        targets[f"{q}{names.up}.weight"] = Target(*up, up_at + inter, inter, up_src)
        targets[f"{q}{names.down}.weight"] = Target(*down, down_at, hidden, down_src)
    if block.shared_expert is not None:
        assert block.shared_expert_gate is not None  # built with the shared expert
        shared, full = block.shared_expert, moe.shared_intermediate_size
        rows = local_moe.shared_intermediate_size
        shared_src = src(0, plan.shared_intermediate_start, full, rows)
        targets[f"{p}shared_expert.gate_proj.weight"] = Target(shared.gate_up_proj, "weight", 0, rows, shared_src)
        targets[f"{p}shared_expert.up_proj.weight"] = Target(shared.gate_up_proj, "weight", rows, rows, shared_src)
        targets[f"{p}shared_expert.down_proj.weight"] = Target(
            shared.down_proj, "weight", source=src(1, plan.shared_intermediate_start, full, rows))
        targets[f"{p}shared_expert_gate.weight"] = Target(block.shared_expert_gate, "weight")
    return targets


def _family_targets(model: CausalLM, targets: dict[str, Target]) -> dict[str, Target]:
    """Llama's targets made the family's: a bias beside every weight whose module has one, a non-gated MLP's up
    projection alone, then the checkpoint's own names (`family_tensors.checkpoint_layout`)."""
    for name, target in list(targets.items()):
        bias = name.removesuffix("weight") + "bias"
        if target.attr == "weight" and getattr(target.module, "bias", None) is not None and bias not in targets:
            targets[bias] = replace(target, attr="bias")
    if not model.cfg.parts.gated:  # why: gate_up_proj holds up alone, from row 0
        for name in [n for n in targets if ".mlp.gate_proj." in n]:
            up = name.replace(".gate_proj.", ".up_proj.")
            targets[up] = replace(targets.pop(name), row_start=0)
    fused, renames = checkpoint_layout(model.cfg, targets)
    for group in fused:
        first = [targets.pop(part) for part in group.parts][0]
        targets[group.name] = Target(first.module, first.attr, reorder=group.reorder)
    return {renames.get(name, name): target for name, target in targets.items()}


def _other_stage(name: str, model: CausalLM) -> bool:
    """Whether checkpoint tensor `name` belongs to a part of the model that another pipeline stage holds."""
    stage = model.stage
    if name.startswith("model.layers."):
        index = name.split(".", 3)[2]
        return index.isdigit() and int(index) < stage.num_layers and not stage.start <= int(index) < stage.end
    head = {"model.embed_tokens.weight": model.embed_tokens, "model.norm.weight": model.norm,
            "lm_head.weight": model.lm_head}
    return name in head and head[name] is None and (stage.count < stage.num_layers)


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"model.safetensors.index.json is malformed: {e}") from None
        files = [folder / f for f in sorted(set(weight_map.values()))]
    elif (folder / "model.safetensors").exists():
        files = [folder / "model.safetensors"]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no safetensors weights in {folder}")
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise CheckpointError(f"safetensors shard(s) listed in the index are missing: {', '.join(missing)}")
    return files


def _quantize_linears(module: nn.Module, dtype: torch.dtype, keep: Linear | None = None) -> None:
    """Every linear as an `Int8Linear` but `keep` (a tied LM head: the embedding, which stays in `dtype`)."""
    for name, child in module.named_children():
        if isinstance(child, Linear) and child is not keep:
            out_f, in_f = child.weight.shape
            setattr(module, name, Int8Linear(in_f, out_f, child.bias is not None, dtype, child.out_dtype))
        else:
            _quantize_linears(child, dtype, keep)


def _fp8_linears(model: CausalLM, dtype: torch.dtype, fp8: Fp8Format | None) -> None:
    """The decoder layers' linears as `Fp8Linear`s (the LM head and embeddings stay in `dtype`, as fp8
    checkpoints keep them); block-scaled checkpoints share a scale over `fp8.block[1]` input columns."""
    col_block = fp8.block[1] if fp8 is not None and fp8.block is not None else None
    for layer in model.layers:
        for parent in layer.modules():
            for name, child in parent.named_children():
                if isinstance(child, Linear):
                    out_f, in_f = child.weight.shape
                    setattr(parent, name, Fp8Linear(in_f, out_f, child.bias is not None, dtype, col_block))


def _block_quant_model(model: CausalLM, dtype: torch.dtype, qtype: GGMLType) -> None:
    """Every linear (the LM head too) as a `BlockQuantLinear` and the embedding as a `BlockQuantEmbedding`, all
    `qtype`; a tied LM head is attached after `to_empty` (`_tie_block_quant_head`), sharing the table's bytes."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, Linear):
                out_f, in_f = child.weight.shape
                setattr(parent, name, BlockQuantLinear(in_f, out_f, qtype, child.bias is not None, dtype,
                                                       child.out_dtype))
    if model.embed_tokens is not None:
        rows, dim = model.embed_tokens.weight.shape
        model.embed_tokens = BlockQuantEmbedding(rows, dim, qtype, dtype)  # type: ignore[assignment]


def _tie_block_quant_head(model: CausalLM) -> None:
    if isinstance(model.embed_tokens, BlockQuantEmbedding) and model.cfg.tie_word_embeddings and model.stage.last:
        model.lm_head = model.embed_tokens.tied_head(LOGITS_DTYPE)  # type: ignore[assignment]


def _read(f: Any, name: str, source: SourceSlice | None) -> torch.Tensor:
    """The whole tensor, or only this rank's slice of it (read through the memory map, never in full)."""
    if source is None:
        return f.get_tensor(name)
    view = f.get_slice(name)
    shape = tuple(view.get_shape())
    if len(shape) <= source.dim or shape[source.dim] != source.full:
        raise CheckpointError(f"tensor {name} has shape {shape}, expected size {source.full} in dimension "
                              f"{source.dim}")
    end = source.start + source.length
    return view[source.start : end] if source.dim == 0 else view[:, source.start : end]


def _copy_into(target: Target, name: str, tensor: torch.Tensor, fp8: Fp8Format | None = None) -> None:
    param = getattr(target.module, target.attr)
    rows = param.shape[0] if target.rows is None else target.rows
    dest = param.data[target.row_start : target.row_start + rows]
    if isinstance(target.module, RawRows) and target.attr == "weight":
        if tuple(tensor.shape) != (rows, target.module.in_features):
            raise CheckpointError(f"tensor {name} has shape {tuple(tensor.shape)}, expected "
                                  f"{(rows, target.module.in_features)}")
        target.module.load_rows(target.row_start, tensor.float() if tensor.dtype == FP8 else tensor)
        return
    if target.attr == "weight_scale":
        assert fp8 is not None and isinstance(target.module, Fp8Linear)  # scale targets: fp8 checkpoints only
        tensor = expand_scale(tensor, fp8, (rows, int(target.module.weight.shape[1])), name)
    if tuple(dest.shape) != tuple(tensor.shape):
        raise CheckpointError(f"tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
    is_weight = target.attr == "weight"
    if isinstance(target.module, Fp8Linear) and is_weight and fp8 is not None:
        if tensor.dtype != FP8:
            raise CheckpointError(f"tensor {name} is {str(tensor.dtype).removeprefix('torch.')}, expected "
                                  "float8_e4m3fn (config.json declares an fp8 checkpoint)")
        dest.copy_(tensor)
    elif isinstance(target.module, (Int8Linear, Fp8Linear)) and is_weight:
        target.module.load_rows(target.row_start, tensor.float() if tensor.dtype == FP8 else tensor)
    else:
        dest.copy_(tensor.to(dest.dtype))


def _build_empty_model(
    cfg: ModelConfig, dtype: torch.dtype, quantization: str | None, device: str, backend: str | None,
    tp: TPContext | None = None, fp8: Fp8Format | None = None, stage: StageRange | None = None,
    int4: Int4Format | None = None, swap: Callable[[CausalLM], None] | None = None, served: int | None = None,
) -> CausalLM:
    """The model on `device` with uninitialized weights; `swap` replaces modules while it is still on meta."""
    ops = get_kernels(backend, device)
    with torch.device("meta"):
        model = CausalLM(cfg, dtype, ops, tp, stage)
        if swap is not None:
            swap(model)
        if quantization is not None or fp8 is not None:  # why: the swaps below replace per-expert linears too
            unstack_experts(model, lambda n_in, n_out: Linear(n_in, n_out, False, dtype))
        if int4 is not None:
            use_int4_linears(model, dtype)
        elif quantization == "int8":
            _quantize_linears(model, dtype, model.lm_head if cfg.tie_word_embeddings else None)
        elif quantization == "fp8" or fp8 is not None:
            _fp8_linears(model, dtype, fp8)
        elif (qtype := block_quantization(quantization)) is not None:
            _block_quant_model(model, dtype, qtype)
        for block in (m for m in model.modules() if isinstance(m, SparseMoE)):
            block.full_precision_gates(dtype)  # why: routing stays unquantized, see SparseMoE.full_precision_gates
    model = model.to_empty(device=device)
    model.tie_lm_head()
    _tie_block_quant_head(model)
    # Weights on huge pages (fewer TLB misses per step), except linears that oneDNN will re-lay out after loading.
    host_memory.pack_parameters(model, keep_values=False, skip=(Linear,) if packs_linears(model, device) else ())
    for m in model.modules():
        if isinstance(m, Int8Linear):
            m.use_kernel = m.use_kernel and device == "cpu"
    model.build_rope_tables(device, served)
    for head in (model.embed_tokens, model.lm_head):  # either may be another pipeline stage's
        if head is not None and model.plan.vocab_real < model.plan.vocab_rows:
            head.weight.data[model.plan.vocab_real :].zero_()  # why: padding rows of a split vocabulary
    return model


def load_model(
    path: str | Path,
    dtype: str = "auto",
    quantization: str | None = None,
    device: str = "cpu",
    attention_backend: str | None = None,
    tp: TPContext | None = None,
    stage: StageRange | None = None,
    gguf_dequantize: bool = False,
    context_length: int | None = None,
) -> CausalLM:
    """Build the model for the checkpoint in `path` (a folder or a GGUF file) and fill it; errors are one-line
    CheckpointErrors.

    With a `tp` context of size > 1 only this rank's shard is built and read (safetensors `get_slice`); with a
    pipeline `stage` only that stage's layers (and the embedding / LM head where it holds them) are built and read.
    A GGUF file's block-quantized tensors stay quantized unless `gguf_dequantize` (see `gguf_loader.py`).
    `context_length` caps the served context below the model's (the engine's `--context-length`): the rotary table
    stops there, and LongRoPE picks its short factors when the cap is within the pretraining length.
    """
    if is_gguf_path(path):
        sharded = (tp is not None and tp.enabled) or (stage is not None and stage.count < stage.num_layers)
        gguf, cfg = check_gguf(path, quantization, sharded)
        return _load_gguf(gguf, cfg, dtype, device, attention_backend, gguf_dequantize)
    folder = Path(path)
    cfg = load_model_config(folder)
    torch_dtype = resolve_dtype(dtype, cfg)
    if quantization is not None and quantization not in QUANTIZATION_METHODS:
        raise CheckpointError(f"unsupported quantization {quantization!r}; supported: {', '.join(QUANTIZATION_METHODS)}")
    fp8 = Fp8Format.from_config(folder)
    int4 = Int4Format.from_config(folder)
    if int4 is not None and quantization is not None:
        raise CheckpointError(f"the checkpoint is {int4.method.value} 4-bit already; --quantization {quantization} "
                              "cannot apply to it")
    if int4 is not None and tp is not None and tp.enabled:
        raise CheckpointError(f"{int4.method.value} weights with tensor parallelism are not supported yet; use "
                              "--tp-size 1")
    if fp8 is not None and quantization not in (None, "fp8"):
        raise CheckpointError(f"the checkpoint is fp8 already; --quantization {quantization} cannot apply to it")
    kept = [name for name in fp8.ignore if name != "lm_head"] if fp8 is not None else []
    if kept:
        raise CheckpointError(f"fp8 checkpoints with full-precision layers other than the LM head are not "
                              f"supported: {_short_list(kept)}")
    if (fp8 is not None or quantization == "fp8") and tp is not None and tp.enabled:
        raise CheckpointError("fp8 weights with tensor parallelism are not supported yet; use --tp-size 1")
    if block_quantization(quantization) is not None and tp is not None and tp.enabled:
        raise CheckpointError(f"--quantization {quantization} with tensor parallelism is not supported yet; use "
                              "--tp-size 1")
    split = (tp is not None and tp.enabled) or (stage is not None and stage.count < stage.num_layers)
    if split and cfg.architecture in UNSPLIT_ARCHITECTURES:  # why: fused checkpoint tensors, biases after all-reduces
        raise CheckpointError(f"{cfg.architecture} with tensor or pipeline parallelism is not supported yet; use "
                              "--tp-size 1 --pp-size 1")
    files = _safetensors_files(folder)
    try:
        model = _build_empty_model(cfg, torch_dtype, quantization, device, attention_backend, tp, fp8, stage, int4,
                                   served=context_length)
    except ValueError as e:  # an unusable kernel backend, or a model that cannot be split over tp ranks
        raise CheckpointError(str(e)) from None
    targets = _weight_targets(model, fp8, int4)
    parts = Int4Loader(int4) if int4 is not None else None
    loaded: set[str] = set()
    unexpected: list[str] = []
    total = sum(f.stat().st_size for f in files)
    # On a terminal only (tqdm's disable=None), from rank 0, and for loads that take a while (`delay`).
    rank0 = (tp is None or tp.rank == 0) and (stage is None or stage.first)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="loading weights", delay=PROGRESS_DELAY_S,
               disable=None if rank0 else True)
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for stored in f.keys():  # noqa: SIM118 - safe_open objects are not iterable
                    name = text_tensor_name(cfg.architecture, stored)
                    if name is None:
                        continue  # Gemma 3's vision tower: sprig serves the text model
                    if name.endswith(IGNORED_SUFFIXES) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
                        continue
                    if fp8 is not None and name.endswith(".input_scale"):
                        continue  # static activation scales: activations stay in the model dtype here
                    if name not in targets and _other_stage(name, model):
                        continue  # another pipeline stage's weights: never read
                    if name not in targets:
                        unexpected.append(name)
                        continue
                    target = targets[name]
                    tensor = _read(f, stored, target.source)
                    if target.reorder is not None:
                        tensor = target.reorder(tensor)
                    if parts is not None and target.attr in parts.fmt.parts:
                        assert isinstance(target.module, BlockQuantLinear)  # _weight_targets made it so
                        rows = target.module.out_features if target.rows is None else target.rows
                        parts.take(name, target.attr, target.module, target.row_start, rows, tensor)
                    else:
                        _copy_into(target, name, tensor, fp8)
                    bar.update(tensor.numel() * tensor.element_size())
                    loaded.add(name)
        except SafetensorError as e:
            raise CheckpointError(f"corrupt safetensors file {file.name}: {e}") from None
        except OSError as e:
            raise CheckpointError(f"cannot read {file.name}: {e}") from None
    bar.close()
    if unexpected:
        raise CheckpointError(f"unexpected tensor names in checkpoint: {_short_list(unexpected)}")
    missing = sorted(set(targets) - loaded)
    if missing:
        raise CheckpointError(f"missing tensors in checkpoint: {_short_list(missing)}")
    if parts is not None:
        parts.finish()
    model.fold_norm_offsets()
    return finish_for_device(model, device)


def _load_gguf(gguf: GGUFFile, cfg: ModelConfig, dtype: str, device: str, attention_backend: str | None,
               dequantized: bool) -> CausalLM:
    swap = None if dequantized else (lambda model: use_block_quant(model, gguf))
    try:
        model = _build_empty_model(cfg, resolve_dtype(dtype, cfg), None, device, attention_backend, swap=swap)
    except ValueError as e:  # an unusable kernel backend
        raise CheckpointError(str(e)) from None
    fill_from_gguf(model, gguf)
    return finish_for_device(model, device)


def _short_list(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")

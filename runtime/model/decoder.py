"""The one decoder behind every supported family (Llama, Mistral, Qwen2/3, Gemma 1-3, OLMo-2, Phi-3, Granite,
GPT-NeoX, StableLM, and the MoE ones: Mixtral, Qwen2-MoE, Qwen3-MoE), configured by the HF config.

Pre-norm decoder layers with GQA attention over the paged KV pool, rotary embeddings and a SwiGLU MLP, or, where
`ModelConfig.moe` says, a sparse mixture-of-experts block (`SparseMoE`). q/k/v and
gate/up projections are fused (one matmul each) and filled slice by slice from the checkpoint's separate tensors.
`ModelConfig.parts` (`families.py`) selects the other families' variants: LayerNorm, norms after attention and MLP,
(1 + w) norms in fp32, GeGLU or a plain GELU MLP, parallel residuals, partial rotary, biases, scaled embeddings,
soft-capped scores and logits, per-layer sliding windows and rope tables, and Granite's multipliers.
Longer than 450 lines: the one decoder of every family, with the batch it reads (sliding region, adapters).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.activation import gelu_tanh_and_mul
from sprig.kernels.attention import AttentionMetadata
from sprig.kernels.backend import KernelSet, get_kernels
from sprig.kernels.kv_quant import rotates_keys
from sprig.kernels.lora import LoraBatch
from sprig.kernels.norm import residual_dtype, rms_norm_fp32_scale
from sprig.runtime.model.config import ModelConfig, RopeConfig
from sprig.runtime.model.families import Activation, NormKind, Residual
from sprig.runtime.model.linear import Linear
from sprig.runtime.model.moe import Experts
from sprig.runtime.model.parallel import StageRange, TPContext, local_config, shard_plan, whole_model
from sprig.runtime.model.rope import rope_cos_sin_cache

# The LM head's output dtype on every path, whatever the model's: a bf16 logit's spacing is 0.25 between 32 and 64,
# coarser than the margin between a real model's two best tokens, so bf16 logits turn near-ties into ties.
LOGITS_DTYPE = torch.float32


@dataclass(frozen=True)
class ForwardBatch:
    """A flat, unpadded batch of tokens from many sequences, with where their K/V go."""

    input_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    out_slots: torch.Tensor  # int64 [T]: pool slot receiving each token's K/V
    attn: AttentionMetadata
    logits_rows: torch.Tensor | None  # int64 [R]: rows whose next-token logits are wanted; None: every row
    sliding: SlidingInputs | None = None  # where sliding layers' K/V go, when they have their own pool region
    lora: LoraBatch | None = None  # each token's adapter slot (None: the base model for every token)

    def kv_inputs(self, sliding_layer: bool) -> tuple[torch.Tensor, AttentionMetadata]:
        """The output slots and attention layout a layer reads: the sliding region's for a sliding layer when
        the pool has one (`kv_pool.py`), else the full pool's."""
        if sliding_layer and self.sliding is not None:
            return self.sliding.out_slots, self.sliding.attn
        return self.out_slots, self.attn


@dataclass(frozen=True)
class SlidingInputs:
    """The same tokens' slots and page tables in the sliding region of the pool (each full page mapped)."""

    out_slots: torch.Tensor  # int64 [T]
    attn: AttentionMetadata


class AdapterPool(Protocol):
    """What a forward tells the LoRA adapter pool (`lora_pool.LoraPool`): which adapter each token uses."""

    def bind(self, batch: LoraBatch | None) -> None: ...


class RMSNorm(nn.Module):
    """RMSNorm through the backend's kernels; for a `cfg.parts.norm_scale_fp32` family the weight is held in fp32
    and scales in fp32 (Gemma's (1 + w) is folded into it by `fold_offset`), in torch. Outputs are in the model
    dtype; `add_and_norm`'s sum is the residual stream, in `residual_dtype` (fp32 under bf16 / fp16)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, ops: KernelSet, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        fp32 = cfg is not None and cfg.parts.norm_scale_fp32
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.float32 if fp32 else dtype), requires_grad=False)
        self.eps = eps
        self.ops = ops
        self.dtype = dtype
        self.fp32_scale = fp32
        self.offset = cfg.parts.norm_offset if cfg is not None else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp32_scale:
            return rms_norm_fp32_scale(x, self.weight, self.eps, self.dtype)
        return self.ops.rms_norm(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual)."""
        if self.fp32_scale:
            summed = x.to(residual_dtype(x.dtype)) + residual
            return rms_norm_fp32_scale(summed, self.weight, self.eps, self.dtype), summed
        return self.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)

    def fold_offset(self) -> None:
        """Gemma's checkpoints store w for a (1 + w) scale: hold 1 + w (in fp32, as transformers computes it)."""
        if self.offset:
            self.weight.data.add_(self.offset)


class LayerNorm(nn.Module):
    """LayerNorm with weight and bias (GPT-NeoX, StableLM), with RMSNorm's interface. torch's kernel on every
    backend, in float32 whatever the dtype (as transformers' nn.LayerNorm computes), out in the model dtype."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(dim, dtype=dtype), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        # The fp32 residual stream under a bf16 / fp16 model: normalize it unrounded
        out = F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps)
        return out.to(self.weight.dtype)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual), the sum in `residual_dtype`."""
        summed = x.to(residual_dtype(x.dtype)) + residual
        return self(summed), summed


def make_norm(cfg: ModelConfig, dim: int, dtype: torch.dtype, ops: KernelSet) -> RMSNorm | LayerNorm:
    """The family's norm over `dim` channels."""
    if cfg.parts.norm is NormKind.LAYER:
        return LayerNorm(dim, cfg.rms_norm_eps, dtype)
    return RMSNorm(dim, cfg.rms_norm_eps, dtype, ops, cfg)


class Attention(nn.Module):
    """GQA attention over this rank's heads (`cfg` is the rank-local config); o_proj's partial sums are reduced."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext, layer: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.ops = ops
        self.tp = tp
        self.qkv_proj = Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, cfg.attention_bias, dtype)
        self.o_proj = Linear(cfg.q_size, cfg.hidden_size, cfg.parts.o_proj_bias, dtype)
        parts = cfg.parts
        self.qk_across_heads = parts.qk_norm_across_heads  # OLMo-2: one norm over all heads' q (and k)
        q_dim, k_dim = (cfg.q_size, cfg.kv_size) if self.qk_across_heads else (cfg.head_dim, cfg.head_dim)
        self.q_norm = RMSNorm(q_dim, cfg.rms_norm_eps, dtype, ops, cfg) if cfg.qk_norm else None
        self.k_norm = RMSNorm(k_dim, cfg.rms_norm_eps, dtype, ops, cfg) if cfg.qk_norm else None
        self.scale = cfg.head_dim**-0.5 if parts.attention_scale is None else parts.attention_scale
        self.rotary_dim = cfg.rotary_dim
        self.softcap = parts.attn_softcap
        self.window = parts.window(layer)
        self.local_rope = parts.local_rope(layer)  # Gemma 3's sliding layers: their own rope table
        # Only what is set is passed: a backend's paged_attention need not know options no layer uses.
        self.options = {k: v for k, v in (("softcap", self.softcap), ("window", self.window)) if v is not None}

    def forward(
        self,
        x: torch.Tensor,
        batch: ForwardBatch,
        cos_sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        cfg = self.cfg
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        if self.qk_across_heads:
            assert self.q_norm is not None and self.k_norm is not None  # built with qk_across_heads
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.reshape(-1, cfg.num_heads, cfg.head_dim)
        k = k.reshape(-1, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(-1, cfg.num_kv_heads, cfg.head_dim)
        if self.q_norm is not None and not self.qk_across_heads:
            assert self.k_norm is not None  # set with q_norm
            q, k = self.q_norm(q), self.k_norm(k)
        # Otherwise q and k stay views of qkv: every backend's rope, KV store and attention take strided rows.
        if self.rotary_dim < cfg.head_dim:  # partial rotary: views of each head's first channels (every rope takes them)
            self.ops.apply_rotary_(q[..., : self.rotary_dim], k[..., : self.rotary_dim], batch.positions, cos_sin)
        else:
            self.ops.apply_rotary_(q, k, batch.positions, cos_sin)
        if rotates_keys(k_cache.dtype):  # fp8 keys are stored in the Hadamard basis; q H · k H = q · k
            self.ops.hadamard_rotate_(q)
            self.ops.hadamard_rotate_(k)
        # A quantized pool (int8 / fp8 codes) comes with its scales; every backend's store and attention take them.
        scales = {} if k_scale is None else {"k_scale": k_scale, "v_scale": v_scale}
        out_slots, attn = batch.kv_inputs(self.window is not None)
        self.ops.store_kv(k_cache, v_cache, out_slots, k, v, **scales)
        out = self.ops.paged_attention(q, k, v, k_cache, v_cache, attn, self.scale, **scales, **self.options)
        return self.tp.all_reduce(self.o_proj(out.reshape(-1, cfg.q_size)))


class MLP(nn.Module):
    """SwiGLU (`gate_up_proj` holds gate then up), or a plain GELU MLP where `gate_up_proj` holds up alone."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext) -> None:
        super().__init__()
        self.ops = ops
        self.tp = tp
        parts = cfg.parts
        self.activation = parts.activation
        self.gated = parts.gated
        rows = 2 * cfg.intermediate_size if parts.gated else cfg.intermediate_size
        self.gate_up_proj = Linear(cfg.hidden_size, rows, parts.mlp_bias, dtype)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, parts.mlp_bias, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce(self.rank_output(x))

    def rank_output(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's partial output, before the all-reduce (a MoE block sums it with its experts' first)."""
        return self.down_proj(self._activate(self.gate_up_proj(x)))

    def _activate(self, h: torch.Tensor) -> torch.Tensor:
        if self.activation is Activation.SILU:
            return self.ops.silu_and_mul(h)
        if self.gated:  # GeGLU has no C or Triton kernel yet: the torch op (on any device)
            return gelu_tanh_and_mul(h)
        return F.gelu(h, approximate="tanh" if self.activation is Activation.GELU_TANH else "none")


class SparseMoE(nn.Module):
    """Mixtral / Qwen-MoE's block in place of the MLP: a router (`gate`) picks each token's experts; Qwen2-MoE adds
    a shared expert every token runs, scaled by sigmoid(shared_expert_gate(x)). One all-reduce sums the ranks' parts
    (each holds a slice of every expert's intermediate channels)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext) -> None:
        super().__init__()
        assert cfg.moe is not None  # DecoderLayer builds this block for MoE configs only
        moe = cfg.moe
        self.tp = tp
        self.gate = Linear(cfg.hidden_size, moe.num_experts, False, dtype)
        self.experts = Experts(moe, cfg.hidden_size, moe.intermediate_size, dtype, ops)
        shared = dataclasses.replace(cfg, intermediate_size=moe.shared_intermediate_size)
        self.shared_expert = MLP(shared, dtype, ops, tp) if moe.has_shared_expert else None
        self.shared_expert_gate = Linear(cfg.hidden_size, 1, False, dtype) if moe.has_shared_expert else None
        self.hidden_size, self.num_experts = cfg.hidden_size, moe.num_experts

    def full_precision_gates(self, dtype: torch.dtype) -> None:
        """The router and the shared expert's gate in the model dtype, also when the model's linears are quantized:
        routing turns on small margins between experts' logits (vLLM and llama.cpp keep them unquantized too)."""
        self.gate = Linear(self.hidden_size, self.num_experts, False, dtype)
        if self.shared_expert_gate is not None:
            self.shared_expert_gate = Linear(self.hidden_size, 1, False, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.experts(x, self.gate(x))
        if self.shared_expert is not None:
            assert self.shared_expert_gate is not None  # built with the shared expert
            shared = self.shared_expert.rank_output(x)  # not its forward: the block all-reduces once
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * shared
        return self.tp.all_reduce(out)


class DecoderLayer(nn.Module):
    """Norms where `cfg.parts.norms` puts them: `input_layernorm` before attention and `post_attention_layernorm`
    before the MLP (pre-norms, Llama's names), `attn_out_norm` / `mlp_out_norm` on their outputs (post-norms)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext, layer: int = 0) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, dtype, ops, tp, layer)
        sparse = cfg.moe is not None and layer in cfg.moe.sparse_layers  # layer: its place in the whole model
        self.mlp: MLP | SparseMoE = SparseMoE(cfg, dtype, ops, tp) if sparse else MLP(cfg, dtype, ops, tp)
        placement = cfg.parts.norms
        self.residual = cfg.parts.residual
        shared = self.residual is Residual.PARALLEL_SHARED_NORM  # why: its MLP reads input_layernorm's output

        def norm(built: bool) -> RMSNorm | LayerNorm | None:
            return make_norm(cfg, cfg.hidden_size, dtype, ops) if built else None

        self.input_layernorm = norm(placement.has_pre)
        self.post_attention_layernorm = norm(placement.has_pre and not shared)
        self.attn_out_norm = norm(placement.has_post)
        self.mlp_out_norm = norm(placement.has_post)
        self.residual_multiplier = cfg.parts.residual_multiplier

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        batch: ForwardBatch,
        cos_sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = _add_and_norm(self.input_layernorm, x, residual)
        attn = self.self_attn(x, batch, cos_sin, k_cache, v_cache, k_scale, v_scale)
        # The layer's output is added to `residual` by the next layer's (or the final) norm.
        if self.residual is not Residual.SEQUENTIAL:
            mlp_in = x if self.post_attention_layernorm is None else self.post_attention_layernorm(residual)
            return attn + self.mlp(mlp_in), residual
        if self.attn_out_norm is not None:
            attn = self.attn_out_norm(attn)
        h, residual = _add_and_norm(self.post_attention_layernorm, self._scaled(attn), residual)
        out = self.mlp(h)
        if self.mlp_out_norm is not None:
            out = self.mlp_out_norm(out)
        return self._scaled(out), residual

    def _scaled(self, x: torch.Tensor) -> torch.Tensor:
        """An attention or MLP output scaled by Granite's residual multiplier (a no-op for the other families)."""
        return x if self.residual_multiplier == 1.0 else x * self.residual_multiplier


def _add_and_norm(norm: RMSNorm | LayerNorm | None, x: torch.Tensor, residual: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual), x + residual), the residual absent before the first layer; no norm: the sum twice."""
    if residual is None:
        return (x if norm is None else norm(x)), x
    if norm is None:  # OLMo-2: the stream itself is the next input, in the model dtype
        summed = x.to(residual_dtype(x.dtype)) + residual
        return summed.to(x.dtype), summed
    return norm.add_and_norm(x, residual)


class CausalLM(nn.Module):
    """Embedding → decoder layers → final norm → LM head, run over a ForwardBatch and the KV pool.

    With a `TPContext` of size > 1 the model holds one rank's shard (`plan`) and `layer_cfg` is the rank-local
    config of its layers and KV pool; `cfg` stays the whole model's. Every rank runs `forward` on the same batch.
    With a `StageRange` (pipeline parallelism) it holds only that stage's layers (`layers[i]` is decoder layer
    `stage.start + i`), the embedding on the first stage and the final norm and LM head on the last (the tied
    embedding too, when it is the LM head); the other parts are not built at all.

    The LM head is a `Linear` writing `LOGITS_DTYPE`; a tied one shares the embedding's weight (until the loader
    packs it for sprig's CPU kernel, see `loader._pack_linear`), so it runs the kernels the other linears run.
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet | None = None,
                 tp: TPContext | None = None, stage: StageRange | None = None) -> None:
        super().__init__()
        ops = ops or get_kernels("torch")
        self.cfg = cfg
        self.dtype = dtype
        self.ops = ops
        self.tp = tp or TPContext()
        self.stage = stage or whole_model(cfg.num_layers)
        self.plan = shard_plan(cfg, self.tp)
        self.layer_cfg = local_config(cfg, self.plan, self.stage)
        first, last = self.stage.first, self.stage.last
        needs_embedding = first or (last and cfg.tie_word_embeddings)  # why: a tied LM head is the embedding
        self.embed_tokens = nn.Embedding(self.plan.vocab_rows, cfg.hidden_size, dtype=dtype) if needs_embedding \
            else None
        if self.embed_tokens is not None:
            self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(DecoderLayer(self.layer_cfg, dtype, ops, self.tp, self.stage.start + i)
                                    for i in range(self.stage.count))
        self.norm = make_norm(cfg, cfg.hidden_size, dtype, ops) if last else None
        self.lm_head = Linear(cfg.hidden_size, self.plan.vocab_rows, False, dtype, LOGITS_DTYPE) if last else None
        self.tie_lm_head()
        self.linear_kernels = "torch"  # which kernels run the linears, for the start-up log (set by the loader)
        self.graph_blocker: str | None = "not loaded"  # why CPU graphs cannot replay it (set by the loader)
        self.lora_pool: AdapterPool | None = None  # LoRA adapters' slots, attached after loading (`lora_pool.py`)
        self.register_buffer("cos_sin_cache", None, persistent=False)
        self.register_buffer("local_cos_sin_cache", None, persistent=False)  # Gemma 3's sliding layers' table
        self.build_rope_tables()

    def build_rope_tables(self, device: torch.device | str | None = None, served: int | None = None) -> None:
        """The rotary cos/sin tables (float32, computed on the CPU, then moved to `device`), for the `served`
        context when it is shorter than the model's (LongRoPE picks its factors by it)."""
        cfg = self.cfg
        context = cfg.context_length if served is None else min(served, cfg.context_length)
        cache = rope_cos_sin_cache(cfg.rope, cfg.rotary_dim, cfg.max_position_embeddings, context)
        self.cos_sin_cache = cache.to(device) if device is not None else cache
        theta = cfg.parts.local_rope_theta
        if theta is not None:
            local = rope_cos_sin_cache(RopeConfig(theta), cfg.rotary_dim, cfg.max_position_embeddings, context)
            self.local_cos_sin_cache = local.to(device) if device is not None else local

    def fold_norm_offsets(self) -> None:
        """Turn a Gemma checkpoint's norm weights w into the 1 + w the norms scale by (once, after loading)."""
        for m in self.modules():
            if isinstance(m, RMSNorm):
                m.fold_offset()

    def tie_lm_head(self) -> None:
        """Make a tied LM head's weight the embedding's (again: `to_empty` gives each module its own copy). A
        block-quantized table is left alone: its tied head (`BlockQuantEmbedding.tied_head`) shares its bytes."""
        if self.lm_head is not None and self.cfg.tie_word_embeddings and isinstance(self.embed_tokens, nn.Embedding):
            weight = self.embed_tokens.weight
            assert isinstance(weight, nn.Parameter)  # nn.Embedding's weight
            self.lm_head.weight = weight

    @property
    def device(self) -> torch.device:
        """Where the model runs (every stage holds the rotary table)."""
        table = self.cos_sin_cache
        assert isinstance(table, torch.Tensor)  # a registered buffer
        return table.device

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor],
                k_scales: list[torch.Tensor] | None = None, v_scales: list[torch.Tensor] | None = None,
                hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Return next-token logits [R, vocab] for `batch.logits_rows` (on rank 0 when sharded), in `LOGITS_DTYPE`
        (float32) whatever the model's dtype. A quantized pool passes its per-layer scales (`KVPool.k_scales` /
        `v_scales`).

        A pipeline stage after the first takes the previous stage's `hidden` [2, T, hidden] (the layers' running
        output and residual, both, so the split is exact; in `residual_dtype`); a stage before the last returns its
        own instead of logits."""
        if self.lora_pool is not None:
            self.lora_pool.bind(batch.lora)
        if hidden is None:
            x, residual = self._embed(batch.input_ids), None
        else:  # both travel in the residual stream's dtype (fp32: the cast of x back is exact)
            x, residual = hidden[0].to(self.dtype), hidden[1]
        no_scales = [None] * len(self.layers)
        for layer, k_cache, v_cache, k_scale, v_scale in zip(
                self.layers, k_caches, v_caches, k_scales or no_scales, v_scales or no_scales, strict=True):
            assert isinstance(layer, DecoderLayer)  # a ModuleList yields plain Modules
            table = self.local_cos_sin_cache if layer.self_attn.local_rope else self.cos_sin_cache
            x, residual = layer(x, residual, batch, table, k_cache, v_cache, k_scale, v_scale)
        assert residual is not None  # every stage has layers
        if not self.stage.last:
            return torch.stack((x.to(residual.dtype), residual))
        if batch.logits_rows is not None:
            x = x.index_select(0, batch.logits_rows)
            residual = residual.index_select(0, batch.logits_rows)
        assert self.norm is not None  # built on the last stage
        x, _ = self.norm.add_and_norm(x, residual)
        assert self.lm_head is not None  # built on the last stage
        logits = self.lm_head(x)
        if logits.dtype != LOGITS_DTYPE:  # an int8 head writes the activation dtype (its kernel's); the rest do not
            logits = logits.to(LOGITS_DTYPE)
        if self.cfg.parts.logits_scaling != 1.0:  # Granite
            logits = logits / self.cfg.parts.logits_scaling
        cap = self.cfg.parts.final_softcap
        if cap is not None:  # Gemma 2
            logits = torch.tanh(logits / cap) * cap
        return self.tp.gather_vocab(logits, self.cfg.vocab_size)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        assert self.embed_tokens is not None  # built on the first stage
        x = self.embed_tokens(ids) if not self.tp.enabled else self._embed_sharded(ids)
        parts = self.cfg.parts
        if parts.embedding_multiplier == 1.0:
            return x
        if parts.round_embedding_multiplier:  # Gemma rounds sqrt(hidden) to the model dtype first, as transformers does
            return x * torch.tensor(parts.embedding_multiplier, dtype=x.dtype)
        return x * parts.embedding_multiplier

    def _embed_sharded(self, ids: torch.Tensor) -> torch.Tensor:
        """Vocab-parallel lookup: each rank embeds the ids in its slice, zeros elsewhere, and the sum is exact."""
        local = ids - self.plan.vocab_start
        outside = (local < 0) | (local >= self.plan.vocab_rows)
        assert self.embed_tokens is not None  # built on the first stage
        x = self.embed_tokens(local.masked_fill(outside, 0))
        x.masked_fill_(outside.unsqueeze(-1), 0)
        return self.tp.all_reduce(x)

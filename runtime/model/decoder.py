"""The decoder family behind Llama, Mistral, Qwen2 and Qwen3, configured by the HF config.

Pre-norm decoder layers with GQA attention over the paged KV pool, rotary embeddings and a SwiGLU MLP. q/k/v and
gate/up projections are fused (one matmul each) and filled slice by slice from the checkpoint's separate tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.attention import AttentionMetadata
from sprig.kernels.backend import KernelSet, get_kernels
from sprig.kernels.cpu_gemm import (
    VecIsa,
    amx_linear,
    amx_supports,
    vec_isa,
    vec_linear_fn,
    vec_supports,
    vnni_pack,
)
from sprig.kernels.kv_quant import rotates_keys
from sprig.runtime.model.config import ModelConfig
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


class LinearKernel(Enum):
    """Which implementation a `Linear` runs: chosen once at load, for the machine (`Linear.pack_for_cpu`)."""

    TORCH = "torch"  # F.linear on the plain weight
    ONEDNN = "onednn"  # oneDNN on its blocked layout
    AMX = "amx"  # sprig's AMX tile kernel
    VEC = "vec"  # sprig's vector kernel (AVX512_BF16 / AVX-512 / AVX2 / portable C)


class Linear(nn.Module):
    """y = x W^T (+ b), weight [out, in] in the model dtype; y in `out_dtype` (default: the model dtype), summed
    in fp32 and rounded once (the LM head: fp32, never rounded)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 out_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.out_dtype = out_dtype or dtype
        self.kernel = LinearKernel.TORCH
        self.isa: VecIsa | None = None  # the vector kernel's code path, with LinearKernel.VEC
        self.packed: torch.Tensor | None = None  # the weight in oneDNN's blocked layout, see pack_for_onednn
        self.register_buffer("vnni", None, persistent=False)  # the weight in VNNI pair order, see pack_for_cpu
        self.fast: Callable[[torch.Tensor], torch.Tensor] | None = None  # the vector kernel, bound to the weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast is not None:
            return self.fast(x)
        if self.kernel is LinearKernel.AMX:
            return amx_linear(x, self.vnni, self.bias, self.out_dtype)
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        if self.out_dtype != x.dtype:
            return widening_linear(x, self.weight, self.bias, self.out_dtype)
        return F.linear(x, self.weight, self.bias)

    def pack_for_cpu(self) -> LinearKernel:
        """Re-lay the weight out for sprig's CPU kernel where one takes it: the AMX kernel on CPUs with AMX
        (oneDNN is slow on this model family's shapes, see `kernels/csrc/amx_gemm.c`), else the vector kernel
        (at decode sizes it streams the weight 1.5-2x faster than oneDNN, see `kernels/csrc/vec_gemm.c`).
        Returns the kernel chosen: TORCH when neither takes the weight (bf16 only, whole 16-column panels)."""
        weight = self.weight.detach()
        if amx_supports(weight):
            self.kernel = LinearKernel.AMX
        elif vec_supports(weight):
            self.kernel, self.isa = LinearKernel.VEC, vec_isa()
        else:
            return self.kernel
        self.vnni = vnni_pack(weight)  # a buffer: the loader moves all of them onto huge pages
        if self.isa is not None:
            self.fast = vec_linear_fn(self.vnni, self.bias, self.isa, weight.shape[0], self.out_dtype)
        self._drop_plain_weight()
        return self.kernel

    def widen_weight(self) -> None:
        """Hold the weight (and bias) in `out_dtype`, for a linear whose output is wider than its weight and that no
        sprig kernel takes: F.linear then sums and writes in that dtype, and widening the weight on every call
        instead costs ~20x the product at decode sizes. Exact (every bf16/fp16 value is a float32)."""
        self.weight = nn.Parameter(self.weight.detach().to(self.out_dtype), requires_grad=False)
        if self.bias is not None:
            self.bias = nn.Parameter(self.bias.detach().to(self.out_dtype), requires_grad=False)

    def pack_for_onednn(self) -> None:
        """Hold the weight only in oneDNN's blocked layout, which its AMX/AVX-512 kernels read as is.

        F.linear re-lays the weight out on every call; measured here on bf16 decode shapes, the packed weight
        runs 1.3-1.4x faster, bit-identical. The plain weight is dropped (to a meta tensor that keeps its shape).
        """
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), batch_size=64)
        self.kernel = LinearKernel.ONEDNN
        self._drop_plain_weight()

    def _drop_plain_weight(self) -> None:
        """Keep only the weight's shape (a meta tensor) once another layout holds its values."""
        self.weight = nn.Parameter(torch.empty(self.weight.shape, dtype=self.weight.dtype, device="meta"),
                                   requires_grad=False)


def widening_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    out_dtype: torch.dtype) -> torch.Tensor:
    """x W^T (+ b) written in `out_dtype`, wider than x: cuBLAS writes its fp32 sums as they are
    (`torch.mm(..., out_dtype=)`); elsewhere the operands are widened (exact; a no-op on a weight `widen_weight`
    widened already) and multiplied in `out_dtype`."""
    if x.is_cuda and weight.dtype == x.dtype:
        y = torch.mm(x.reshape(-1, x.shape[-1]), weight.t(), out_dtype=out_dtype).view(*x.shape[:-1], -1)
        return y if bias is None else y + bias.to(out_dtype)
    return F.linear(x.to(out_dtype), weight.to(out_dtype), None if bias is None else bias.to(out_dtype))


def can_pack_for_onednn(dtype: torch.dtype, device: torch.device | str) -> bool:
    """oneDNN packing helps bf16/fp16 linears on CPUs whose oneDNN build has kernels for that dtype."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return dtype == torch.float16 and torch.ops.mkldnn._is_mkldnn_fp16_supported()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype, ops: KernelSet) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)
        self.eps = eps
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual)."""
        return self.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)


class Attention(nn.Module):
    """GQA attention over this rank's heads (`cfg` is the rank-local config); o_proj's partial sums are reduced."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext) -> None:
        super().__init__()
        self.cfg = cfg
        self.ops = ops
        self.tp = tp
        self.qkv_proj = Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, cfg.attention_bias, dtype)
        self.o_proj = Linear(cfg.q_size, cfg.hidden_size, False, dtype)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype, ops) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype, ops) if cfg.qk_norm else None
        self.scale = cfg.head_dim**-0.5

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
        q = q.reshape(-1, cfg.num_heads, cfg.head_dim)
        k = k.reshape(-1, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(-1, cfg.num_kv_heads, cfg.head_dim)
        if self.q_norm is not None:
            assert self.k_norm is not None  # set with q_norm
            q, k = self.q_norm(q), self.k_norm(k)
        # Otherwise q and k stay views of qkv: every backend's rope, KV store and attention take strided rows.
        self.ops.apply_rotary_(q, k, batch.positions, cos_sin)
        if rotates_keys(k_cache.dtype):  # fp8 keys are stored in the Hadamard basis; q H · k H = q · k
            self.ops.hadamard_rotate_(q)
            self.ops.hadamard_rotate_(k)
        # A quantized pool (int8 / fp8 codes) comes with its scales; every backend's store and attention take them.
        scales = {} if k_scale is None else {"k_scale": k_scale, "v_scale": v_scale}
        self.ops.store_kv(k_cache, v_cache, batch.out_slots, k, v, **scales)
        out = self.ops.paged_attention(q, k, v, k_cache, v_cache, batch.attn, self.scale, **scales)
        return self.tp.all_reduce(self.o_proj(out.reshape(-1, cfg.q_size)))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext) -> None:
        super().__init__()
        self.ops = ops
        self.tp = tp
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * cfg.intermediate_size, False, dtype)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, False, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce(self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(x))))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: KernelSet, tp: TPContext) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, dtype, ops, tp)
        self.mlp = MLP(cfg, dtype, ops, tp)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops)

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
        if residual is None:
            residual, x = x, self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm.add_and_norm(x, residual)
        x = self.self_attn(x, batch, cos_sin, k_cache, v_cache, k_scale, v_scale)
        x, residual = self.post_attention_layernorm.add_and_norm(x, residual)
        return self.mlp(x), residual


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
        self.layers = nn.ModuleList(DecoderLayer(self.layer_cfg, dtype, ops, self.tp) for _ in range(self.stage.count))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops) if last else None
        self.lm_head = Linear(cfg.hidden_size, self.plan.vocab_rows, False, dtype, LOGITS_DTYPE) if last else None
        self.tie_lm_head()
        self.linear_kernels = "torch"  # which kernels run the linears, for the start-up log (set by the loader)
        self.graph_blocker: str | None = "not loaded"  # why CPU graphs cannot replay it (set by the loader)
        cache = rope_cos_sin_cache(cfg.rope, cfg.head_dim, cfg.max_position_embeddings, cfg.context_length)
        self.register_buffer("cos_sin_cache", cache, persistent=False)

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
        if hidden is None:
            x, residual = self._embed(batch.input_ids), None
        else:  # both travel in the residual stream's dtype (fp32: the cast of x back is exact)
            x, residual = hidden[0].to(self.dtype), hidden[1]
        no_scales = [None] * len(self.layers)
        for layer, k_cache, v_cache, k_scale, v_scale in zip(
                self.layers, k_caches, v_caches, k_scales or no_scales, v_scales or no_scales, strict=True):
            x, residual = layer(x, residual, batch, self.cos_sin_cache, k_cache, v_cache, k_scale, v_scale)
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
        return self.tp.gather_vocab(logits, self.cfg.vocab_size)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        assert self.embed_tokens is not None  # built on the first stage
        return self.embed_tokens(ids) if not self.tp.enabled else self._embed_sharded(ids)

    def _embed_sharded(self, ids: torch.Tensor) -> torch.Tensor:
        """Vocab-parallel lookup: each rank embeds the ids in its slice, zeros elsewhere, and the sum is exact."""
        local = ids - self.plan.vocab_start
        outside = (local < 0) | (local >= self.plan.vocab_rows)
        assert self.embed_tokens is not None  # built on the first stage
        x = self.embed_tokens(local.masked_fill(outside, 0))
        x.masked_fill_(outside.unsqueeze(-1), 0)
        return self.tp.all_reduce(x)

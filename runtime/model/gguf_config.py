"""sprig's `ModelConfig` from a GGUF file's metadata (llama.cpp's `{arch}.*` keys) for llama, mistral, qwen2, qwen3
and gemma3 (its family parts: `_parts`).

GGUF files converted from Mistral models usually say `llama`; the decoder is the same. Tied embeddings are a file
without `output.weight`; qwen2's q/k/v biases and qwen3's q/k norms are read from the tensors that carry them.
Llama 3's rope scaling is stored as a tensor of per-frequency divisors (`rope_freqs.weight`), kept as is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.config import ModelConfig, RopeConfig
from sprig.runtime.model.families import Activation, LayerParts, NormPlacement
from sprig.runtime.model.gguf_file import GGUFFile

GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                      "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
# What llama.cpp fixes for Gemma 3 rather than storing: every 6th layer attends fully, the sliding layers' rope base
GEMMA3_SLIDING_PERIOD = 6
GEMMA3_LOCAL_ROPE_THETA = 10_000.0
ROPE_SCALING = {"none": "default", "linear": "linear", "yarn": "yarn"}  # llama.cpp's names -> sprig's rope types


def gguf_model_config(gguf: GGUFFile) -> ModelConfig:
    """Parse the file's metadata; a one-line CheckpointError on anything unsupported or missing."""
    if gguf.arch not in GGUF_ARCHITECTURES:
        raise CheckpointError(f"unsupported GGUF architecture {gguf.arch!r}; supported: "
                              f"{', '.join(GGUF_ARCHITECTURES)}")
    if gguf.arch_get("expert_count"):  # llama.cpp files Mixtral under "llama"
        raise CheckpointError(f"{gguf.path.name}: mixture-of-experts GGUF files are not supported yet; load the "
                              "safetensors checkpoint")
    try:
        return _config(gguf)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{gguf.path.name}: malformed GGUF metadata: {e}") from None


def _config(gguf: GGUFFile) -> ModelConfig:
    def need(suffix: str) -> Any:
        return gguf.require(f"{gguf.arch}.{suffix}")

    hidden, num_heads = int(need("embedding_length")), int(need("attention.head_count"))
    head_dim = int(gguf.arch_get("attention.key_length") or hidden // num_heads)
    value_dim = int(gguf.arch_get("attention.value_length") or head_dim)
    if value_dim != head_dim:
        raise CheckpointError(f"{gguf.path.name}: key length {head_dim} != value length {value_dim} is not supported")
    rotary = int(gguf.arch_get("rope.dimension_count") or head_dim)
    if rotary != head_dim:
        raise CheckpointError(f"{gguf.path.name}: partial rotary embeddings ({rotary} of {head_dim} dims) are not "
                              "supported")
    embedding = gguf.tensors.get("token_embd.weight")
    if embedding is None:
        raise CheckpointError(f"{gguf.path.name}: missing tensor token_embd.weight")
    context = int(gguf.arch_get("context_length") or 4096)
    kv_heads = gguf.arch_get("attention.head_count_kv") or num_heads
    return ModelConfig(
        architecture=GGUF_ARCHITECTURES[gguf.arch],
        vocab_size=int(gguf.arch_get("vocab_size") or embedding.shape[0]),
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        num_layers=int(need("block_count")),
        num_heads=num_heads,
        num_kv_heads=int(kv_heads[0] if isinstance(kv_heads, list) else kv_heads),
        head_dim=head_dim,
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=context,
        rope=_rope(gguf),
        attention_bias="blk.0.attn_q.bias" in gguf.tensors,
        qk_norm="blk.0.attn_q_norm.weight" in gguf.tensors,
        tie_word_embeddings="output.weight" not in gguf.tensors,
        # why: a quantized file has no compute dtype of its own; bf16 is the one sprig's CPU kernels are fastest in
        # (F16 weights would lose mantissa bits in bf16: those compute in fp32, like F32 files)
        torch_dtype="float32" if gguf.file_type in ("F32", "F16") else "bfloat16",
        eos_token_ids=_stop_ids(gguf),
        context_length=context,
        parts=_parts(gguf, hidden, head_dim),
    )


def _parts(gguf: GGUFFile, hidden: int, head_dim: int) -> LayerParts:
    """Gemma 3's parts (the other architectures: Llama's). The file's norm weights hold 1 + w already (llama.cpp's
    converter adds the 1), so no offset is folded in; the query scale is head_dim ** -0.5 as llama.cpp uses for
    every size but 27B, which is refused."""
    if gguf.arch != "gemma3":
        return LayerParts()
    layers = int(gguf.require("gemma3.block_count"))
    if layers == 62:  # why: 27B's query_pre_attn_scalar is hidden / heads, which the metadata does not carry
        raise CheckpointError(f"{gguf.path.name}: Gemma 3 27B GGUF files are not supported yet")
    window = int(gguf.require("gemma3.attention.sliding_window"))
    windows = tuple(window if (i + 1) % GEMMA3_SLIDING_PERIOD else None for i in range(layers))
    return LayerParts(norm_scale_fp32=True, norms=NormPlacement.SANDWICH, activation=Activation.GELU_TANH,
                      embedding_multiplier=hidden**0.5, round_embedding_multiplier=True, attention_scale=head_dim**-0.5,
                      layer_windows=windows, local_rope_theta=GEMMA3_LOCAL_ROPE_THETA)


def _rope(gguf: GGUFFile) -> RopeConfig:
    theta = float(gguf.arch_get("rope.freq_base") or 10000.0)
    freqs = gguf.tensors.get("rope_freqs.weight")
    if freqs is not None:  # why: llama.cpp stores Llama 3 scaling as the divisors it implies
        return RopeConfig(theta, "freq_factors", {"factors": tuple(np.asarray(freqs.data, np.float32).tolist())})
    kind = gguf.arch_get("rope.scaling.type") or ("linear" if gguf.arch_get("rope.scale_linear") else "none")
    if kind not in ROPE_SCALING:
        raise CheckpointError(f"{gguf.path.name}: unsupported rope scaling {kind!r}; supported: "
                              f"{', '.join(ROPE_SCALING)}")
    factor = gguf.arch_get("rope.scaling.factor") or gguf.arch_get("rope.scale_linear")
    if ROPE_SCALING[kind] == "default" or not factor:
        return RopeConfig(theta)
    params: dict[str, Any] = {"factor": float(factor)}
    original = gguf.arch_get("rope.scaling.original_context_length")
    if original:
        params["original_max_position_embeddings"] = int(original)
    if ROPE_SCALING[kind] == "yarn" and "original_max_position_embeddings" not in params:
        raise CheckpointError(f"{gguf.path.name}: yarn rope scaling needs rope.scaling.original_context_length")
    return RopeConfig(theta, ROPE_SCALING[kind], params)


def _stop_ids(gguf: GGUFFile) -> tuple[int, ...]:
    """The end-of-sequence and end-of-turn ids: either ends a generation."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
    return tuple(dict.fromkeys(int(v) for k in keys if (v := gguf.get(k)) is not None))

"""What sets Phi-3, Granite, GPT-NeoX and StableLM apart from Llama, read from config.json into `LayerParts`.

The one decoder (`decoder.py`) reads these fields; their defaults are Llama's, so Llama, Mistral, Qwen2 and Qwen3
never see them. Which checkpoint tensor fills which parameter is `family_tensors.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.runtime.errors import CheckpointError


class NormKind(Enum):
    """The decoder's normalization: RMSNorm (weight only) or LayerNorm (mean removed, weight and bias)."""

    RMS = "rms"
    LAYER = "layer"


class Activation(Enum):
    """The MLP's activation: SILU gates (SwiGLU, gate and up projections); GELU and GELU_TANH act on one up
    projection (GPT-NeoX's non-gated MLP)."""

    SILU = "silu"
    GELU = "gelu"  # the exact erf form
    GELU_TANH = "gelu_tanh"  # the tanh approximation


class Residual(Enum):
    """How a layer adds its attention and MLP outputs to the residual stream."""

    SEQUENTIAL = "sequential"  # x += attn(ln1(x)); x += mlp(ln2(x))
    PARALLEL = "parallel"  # x += attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX)
    PARALLEL_SHARED_NORM = "parallel_shared_norm"  # x += attn(ln1(x)) + mlp(ln1(x)) (StableLM)


@dataclass(frozen=True)
class LayerParts:
    """The family-specific parts of the one decoder; the defaults are Llama's."""

    norm: NormKind = NormKind.RMS
    activation: Activation = Activation.SILU
    residual: Residual = Residual.SEQUENTIAL
    partial_rotary_factor: float = 1.0  # rope turns only the first int(head_dim * factor) channels of each head
    o_proj_bias: bool = False
    mlp_bias: bool = False
    embedding_multiplier: float = 1.0  # Granite: embeddings scaled before the first layer
    residual_multiplier: float = 1.0  # Granite: each attention and MLP output scaled before the residual add
    attention_multiplier: float | None = None  # Granite: the attention scale, instead of head_dim ** -0.5
    logits_scaling: float = 1.0  # Granite: logits divided by it

    @property
    def gated(self) -> bool:
        """Whether the MLP's first projection holds gate and up (SwiGLU) rather than up alone."""
        return self.activation is Activation.SILU


FAMILY_ARCHITECTURES = ("Phi3ForCausalLM", "GraniteForCausalLM", "GPTNeoXForCausalLM", "StableLmForCausalLM")
_ACTIVATIONS = {"silu": Activation.SILU, "gelu": Activation.GELU, "gelu_new": Activation.GELU_TANH,
                "gelu_pytorch_tanh": Activation.GELU_TANH, "gelu_fast": Activation.GELU_TANH}


def layer_parts(arch: str, raw: dict[str, Any]) -> LayerParts:
    """The parts of `arch` as `raw` (config.json) sets them; Llama's for the other architectures."""
    if arch == "GraniteForCausalLM":
        return LayerParts(
            o_proj_bias=bool(raw.get("attention_bias", False)), mlp_bias=bool(raw.get("mlp_bias", False)),
            embedding_multiplier=float(raw.get("embedding_multiplier", 1.0)),
            residual_multiplier=float(raw.get("residual_multiplier", 1.0)),
            attention_multiplier=float(raw.get("attention_multiplier", 1.0)),
            logits_scaling=float(raw.get("logits_scaling", 1.0)),
        )
    if arch == "Phi3ForCausalLM":
        return LayerParts(partial_rotary_factor=partial_rotary_factor(raw, 1.0))
    if arch == "GPTNeoXForCausalLM":
        parallel = Residual.PARALLEL if raw.get("use_parallel_residual", True) else Residual.SEQUENTIAL
        return LayerParts(NormKind.LAYER, _activation(raw, "gelu"), parallel, partial_rotary_factor(raw, 0.25),
                          o_proj_bias=bool(raw.get("attention_bias", True)), mlp_bias=True)
    if arch == "StableLmForCausalLM":
        if raw.get("qk_layernorm"):
            raise CheckpointError("StableLM with qk_layernorm (per-head q/k LayerNorms) is not supported yet")
        shared = Residual.PARALLEL_SHARED_NORM if raw.get("use_parallel_residual") else Residual.SEQUENTIAL
        if _activation(raw, "silu") is not Activation.SILU:
            raise CheckpointError(f"StableLM with hidden_act {raw.get('hidden_act')!r} is not supported; "
                                  "supported: silu")
        return LayerParts(NormKind.LAYER, Activation.SILU, shared, partial_rotary_factor(raw, 0.25))
    return LayerParts()


def qkv_bias(arch: str, raw: dict[str, Any]) -> bool:
    """Whether q/k/v carry biases: Qwen2 and GPT-NeoX by default, StableLM by `use_qkv_bias`."""
    if arch == "StableLmForCausalLM":
        return bool(raw.get("use_qkv_bias", False))
    default = arch in ("Qwen2ForCausalLM", "GPTNeoXForCausalLM")
    return bool(raw.get("attention_bias", default))


def norm_eps(arch: str, raw: dict[str, Any]) -> float:
    """The norm's epsilon: LayerNorm families name it `layer_norm_eps`."""
    if arch in ("GPTNeoXForCausalLM", "StableLmForCausalLM"):
        return float(raw.get("layer_norm_eps", 1e-5))
    return float(raw.get("rms_norm_eps", 1e-6))


def partial_rotary_factor(raw: dict[str, Any], default: float) -> float:
    """The rotated fraction of each head: transformers 5 keeps it in `rope_parameters`, older configs at the top
    (GPT-NeoX as `rotary_pct`)."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    for source, key in ((rope, "partial_rotary_factor"), (raw, "partial_rotary_factor"), (raw, "rotary_pct")):
        if source.get(key) is not None:
            factor = float(source[key])
            if not 0.0 < factor <= 1.0:
                raise CheckpointError(f"config.json field {key} must be in (0, 1], got {factor}")
            return factor
    return default


def _activation(raw: dict[str, Any], default: str) -> Activation:
    name = str(raw.get("hidden_act", default))
    if name not in _ACTIVATIONS:
        raise CheckpointError(f"unsupported hidden_act {name!r}; supported: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]

"""What sets the other families apart from Llama, read from config.json into `LayerParts`.

The one decoder (`decoder.py`) reads these fields; their defaults are Llama's, so Llama, Mistral, Qwen2 and Qwen3
never see them. Gemma scales its embeddings by sqrt(hidden), norms by (1 + w) in fp32 and gates with tanh-GELU;
Gemma 2 and 3 add norms after attention and after the MLP, a query scale from `query_pre_attn_scalar`,
sliding-window layers among full ones (Gemma 3's with their own rope base) and Gemma 2 soft-caps attention and final
logits; OLMo-2 has only the norms after attention and MLP, and q/k norms over all heads at once. Phi-3 fuses its
checkpoint tensors and scales rope by LongRoPE; Granite multiplies embeddings, residual branches, attention scores
and logits; GPT-NeoX and StableLM use LayerNorm with bias, partial rotary and parallel residuals. Which checkpoint
tensor fills which parameter is `family_tensors.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.runtime.errors import CheckpointError

GEMMA_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                       "Gemma3ForConditionalGeneration")
FAMILY_ARCHITECTURES = (*GEMMA_ARCHITECTURES, "Olmo2ForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM",
                        "GPTNeoXForCausalLM", "StableLmForCausalLM")
# why: fused checkpoint tensors and biases after all-reduces are not split across ranks or stages yet
UNSPLIT_ARCHITECTURES = ("Phi3ForCausalLM", "GraniteForCausalLM", "GPTNeoXForCausalLM", "StableLmForCausalLM")
SLIDING = "sliding_attention"
FULL = "full_attention"


class NormKind(Enum):
    """The decoder's normalization: RMSNorm (weight only) or LayerNorm (mean removed, weight and bias)."""

    RMS = "rms"
    LAYER = "layer"


class NormPlacement(Enum):
    """Where a decoder layer normalizes: before attention and MLP (Llama), also after them (Gemma 2 / 3), or only
    after them (OLMo-2)."""

    PRE = "pre"
    SANDWICH = "sandwich"
    POST = "post"

    @property
    def has_pre(self) -> bool:
        return self is not NormPlacement.POST

    @property
    def has_post(self) -> bool:
        return self is not NormPlacement.PRE


class Activation(Enum):
    """The MLP's activation: SiLU or GELU (exact erf or tanh-approximated); `LayerParts.gated` says whether it
    gates an up projection (SwiGLU, GeGLU) or acts on one (GPT-NeoX's MLP)."""

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
    norms: NormPlacement = NormPlacement.PRE
    norm_offset: float = 0.0  # Gemma: RMSNorm scales by (1 + w); the loader adds it to the weight, in fp32
    norm_scale_fp32: bool = False  # Gemma, OLMo-2: the norm's scale is applied in fp32, then cast
    qk_norm_across_heads: bool = False  # OLMo-2: q and k normalized over all heads together, not per head
    activation: Activation = Activation.SILU
    gated: bool = True  # the MLP's first projection holds gate and up (SwiGLU, GeGLU), not up alone
    residual: Residual = Residual.SEQUENTIAL
    partial_rotary_factor: float = 1.0  # rope turns only the first int(head_dim * factor) channels of each head
    o_proj_bias: bool = False
    mlp_bias: bool = False
    embedding_multiplier: float = 1.0  # Gemma (sqrt(hidden)), Granite: embeddings scaled before the first layer
    round_embedding_multiplier: bool = False  # Gemma: the multiplier is rounded to the model dtype first
    residual_multiplier: float = 1.0  # Granite: each attention and MLP output scaled before the residual add
    attention_scale: float | None = None  # Granite, Gemma 2 / 3: the score scale, instead of head_dim ** -0.5
    attn_softcap: float | None = None  # Gemma 2: scores become tanh(s / c) * c before the softmax
    logits_scaling: float = 1.0  # Granite: logits divided by it
    final_softcap: float | None = None  # Gemma 2: tanh(l / c) * c on the logits
    layer_windows: tuple[int | None, ...] = ()  # per layer: the keys a query sees (None: all); () = all layers full
    local_rope_theta: float | None = None  # Gemma 3: sliding layers' rope base (unscaled rope)

    def window(self, layer: int) -> int | None:
        """The sliding window of decoder layer `layer`, or None for full attention."""
        return self.layer_windows[layer] if self.layer_windows else None

    def local_rope(self, layer: int) -> bool:
        """Whether layer `layer` takes the sliding layers' own rope table."""
        return self.local_rope_theta is not None and self.window(layer) is not None


_ACTIVATIONS = {"silu": Activation.SILU, "gelu": Activation.GELU, "gelu_new": Activation.GELU_TANH,
                "gelu_pytorch_tanh": Activation.GELU_TANH, "gelu_fast": Activation.GELU_TANH}


def layer_parts(arch: str, raw: dict[str, Any], hidden: int, num_layers: int) -> LayerParts:
    """The parts of `arch` as `raw` (config.json, the text part of a multimodal one) sets them; Llama's for the other
    architectures."""
    if arch in GEMMA_ARCHITECTURES:
        return _gemma_parts(arch, raw, hidden, num_layers)
    if arch == "Olmo2ForCausalLM":
        return LayerParts(norms=NormPlacement.POST, norm_scale_fp32=True, qk_norm_across_heads=True)
    if arch == "GraniteForCausalLM":
        return LayerParts(
            o_proj_bias=bool(raw.get("attention_bias", False)), mlp_bias=bool(raw.get("mlp_bias", False)),
            embedding_multiplier=float(raw.get("embedding_multiplier", 1.0)),
            residual_multiplier=float(raw.get("residual_multiplier", 1.0)),
            attention_scale=float(raw.get("attention_multiplier", 1.0)),
            logits_scaling=float(raw.get("logits_scaling", 1.0)),
        )
    if arch == "Phi3ForCausalLM":
        return LayerParts(partial_rotary_factor=partial_rotary_factor(raw, 1.0))
    if arch == "GPTNeoXForCausalLM":
        parallel = Residual.PARALLEL if raw.get("use_parallel_residual", True) else Residual.SEQUENTIAL
        return LayerParts(norm=NormKind.LAYER, activation=_activation(raw, "gelu"), gated=False, residual=parallel,
                          partial_rotary_factor=partial_rotary_factor(raw, 0.25),
                          o_proj_bias=bool(raw.get("attention_bias", True)), mlp_bias=True)
    if arch == "StableLmForCausalLM":
        if raw.get("qk_layernorm"):
            raise CheckpointError("StableLM with qk_layernorm (per-head q/k LayerNorms) is not supported yet")
        shared = Residual.PARALLEL_SHARED_NORM if raw.get("use_parallel_residual") else Residual.SEQUENTIAL
        if _activation(raw, "silu") is not Activation.SILU:
            raise CheckpointError(f"StableLM with hidden_act {raw.get('hidden_act')!r} is not supported; "
                                  "supported: silu")
        return LayerParts(norm=NormKind.LAYER, residual=shared,
                          partial_rotary_factor=partial_rotary_factor(raw, 0.25))
    return LayerParts()


def _gemma_parts(arch: str, raw: dict[str, Any], hidden: int, num_layers: int) -> LayerParts:
    act = raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh"
    if act == "gelu":  # why: transformers reads Gemma's legacy "gelu" as the tanh approximation too
        act = "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise CheckpointError(f"hidden_activation {act!r} is not supported for {arch}; supported: gelu_pytorch_tanh")
    gemma1 = arch == "GemmaForCausalLM"
    qpas = raw.get("query_pre_attn_scalar")
    return LayerParts(
        norm_offset=1.0, norm_scale_fp32=True, norms=NormPlacement.PRE if gemma1 else NormPlacement.SANDWICH,
        activation=Activation.GELU_TANH, embedding_multiplier=hidden**0.5, round_embedding_multiplier=True,
        attention_scale=None if gemma1 or qpas is None else float(qpas) ** -0.5,
        attn_softcap=_positive(raw.get("attn_logit_softcapping")),
        final_softcap=_positive(raw.get("final_logit_softcapping")),
        layer_windows=() if gemma1 else _layer_windows(arch, raw, num_layers),
        local_rope_theta=_local_rope_theta(raw) if arch.startswith("Gemma3") else None,
    )


def qkv_bias(arch: str, raw: dict[str, Any]) -> bool:
    """Whether q/k/v carry biases: Qwen2, Qwen2-MoE and GPT-NeoX by default, StableLM by `use_qkv_bias`."""
    if arch == "StableLmForCausalLM":
        return bool(raw.get("use_qkv_bias", False))
    default = arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "GPTNeoXForCausalLM")
    return bool(raw.get("attention_bias", raw.get("qkv_bias", default)))


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


def text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's multimodal config keeps the language model's fields under `text_config`; others are as they are."""
    archs = raw.get("architectures") or []
    if archs[:1] != ["Gemma3ForConditionalGeneration"]:
        return raw
    text = {**(raw.get("text_config") or {}), "architectures": archs}  # why: the loader maps its tensor names
    for key in ("eos_token_id", "dtype", "torch_dtype", "tie_word_embeddings"):
        if key in raw and key not in text:
            text[key] = raw[key]
    text.setdefault("tie_word_embeddings", True)  # Gemma3Config's default
    return text


def global_rope_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's `rope_parameters` hold one entry per layer type; the full layers' is the model's rope."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(FULL), dict):
        return {**raw, "rope_parameters": params[FULL]}
    if raw.get("architectures", [None])[0] in ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"):
        return {**raw, "rope_theta": raw.get("rope_theta", 1_000_000.0)}  # Gemma3TextConfig's default
    return raw


def _positive(value: Any) -> float | None:
    return float(value) if value else None


def _layer_windows(arch: str, raw: dict[str, Any], num_layers: int) -> tuple[int | None, ...]:
    window = raw.get("sliding_window")
    if not window:
        return ()
    types = raw.get("layer_types")
    if types is None:  # older configs: Gemma 2 alternates from a sliding layer 0, Gemma 3 has a period
        period = 2 if arch == "Gemma2ForCausalLM" else int(raw.get("sliding_window_pattern") or 6)
        types = [SLIDING if (i + 1) % period else FULL for i in range(num_layers)]
    if len(types) != num_layers or not set(types) <= {SLIDING, FULL}:
        raise CheckpointError(f"layer_types must list {num_layers} of {SLIDING!r} / {FULL!r}")
    if raw.get("use_bidirectional_attention"):
        raise CheckpointError("use_bidirectional_attention is not supported (sprig's attention is causal)")
    return tuple(int(window) if t == SLIDING else None for t in types)


def _local_rope_theta(raw: dict[str, Any]) -> float:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(SLIDING), dict):
        local = params[SLIDING]
        if local.get("rope_type", "default") != "default":
            raise CheckpointError("sliding layers with a rope scaling are not supported")
        return float(local.get("rope_theta", 10_000.0))
    return float(raw.get("rope_local_base_freq", 10_000.0))


_TEXT_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."),
                  ("language_model.lm_head.", "lm_head."))


def text_tensor_name(arch: str, name: str) -> str | None:
    """A checkpoint tensor's name as the text decoder's (`model.layers.0...`); None for Gemma 3's vision tower and
    projector, which sprig does not load. transformers 5 saves `model.language_model.*`, older files
    `language_model.model.*`."""
    if arch != "Gemma3ForConditionalGeneration":
        return name
    for old, new in _TEXT_PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    return name if name == "lm_head.weight" else None

"""What sets Gemma, Gemma 2, Gemma 3 and OLMo-2 apart from the Llama layout, read from their HF config.

The one decoder (`decoder.py`) reads these traits; Llama, Mistral and Qwen take the defaults. Gemma scales its
embeddings by sqrt(hidden), norms by (1 + w) in fp32 and gates with tanh-GELU; Gemma 2 and 3 add norms after
attention and after the MLP, a query scale from `query_pre_attn_scalar`, sliding-window layers among full ones
(Gemma 3's with their own rope base) and Gemma 2 soft-caps attention and final logits; OLMo-2 has only the norms
after attention and MLP, and q/k norms over all heads at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

GEMMA_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                       "Gemma3ForConditionalGeneration")
FAMILY_ARCHITECTURES = (*GEMMA_ARCHITECTURES, "Olmo2ForCausalLM")
SLIDING = "sliding_attention"
FULL = "full_attention"


class Activation(Enum):
    """The MLP's gate activation: SwiGLU or GeGLU with tanh-approximated GELU."""

    SILU = "silu"
    GELU_TANH = "gelu_pytorch_tanh"


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


@dataclass(frozen=True)
class FamilyTraits:
    """The decoder's family variants; the defaults are Llama's."""

    norm_offset: float = 0.0  # Gemma: RMSNorm scales by (1 + w); the loader adds it to the weight, in fp32
    norm_scale_fp32: bool = False  # Gemma, OLMo-2: the norm's scale is applied in fp32, then cast
    norms: NormPlacement = NormPlacement.PRE
    qk_norm_across_heads: bool = False  # OLMo-2: q and k normalized over all heads together, not per head
    activation: Activation = Activation.SILU
    embed_scale: float | None = None  # Gemma: embeddings times sqrt(hidden), rounded to the model dtype
    attn_scale: float | None = None  # Gemma 2 / 3: query_pre_attn_scalar ** -0.5 instead of head_dim ** -0.5
    attn_softcap: float | None = None  # Gemma 2: scores become tanh(s / c) * c before the softmax
    final_softcap: float | None = None  # Gemma 2: the same on the logits
    layer_windows: tuple[int | None, ...] = ()  # per layer: the keys a query sees (None: all); () = all layers full
    local_rope_theta: float | None = None  # Gemma 3: sliding layers' rope base (unscaled rope)

    def window(self, layer: int) -> int | None:
        """The sliding window of decoder layer `layer`, or None for full attention."""
        return self.layer_windows[layer] if self.layer_windows else None

    def local_rope(self, layer: int) -> bool:
        """Whether layer `layer` takes the sliding layers' own rope table."""
        return self.local_rope_theta is not None and self.window(layer) is not None


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


def family_traits(arch: str, raw: dict[str, Any], hidden: int, num_layers: int) -> FamilyTraits:
    """The traits of architecture `arch` from its (text) config; Llama's defaults for the other families."""
    if arch == "Olmo2ForCausalLM":
        return FamilyTraits(norm_scale_fp32=True, norms=NormPlacement.POST, qk_norm_across_heads=True)
    if arch not in GEMMA_ARCHITECTURES:
        return FamilyTraits()
    act = raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh"
    if act == "gelu":  # why: transformers reads Gemma's legacy "gelu" as the tanh approximation too
        act = "gelu_pytorch_tanh"
    if act != Activation.GELU_TANH.value:
        raise ValueError(f"hidden_activation {act!r} is not supported for {arch}; supported: gelu_pytorch_tanh")
    gemma1 = arch == "GemmaForCausalLM"
    qpas = raw.get("query_pre_attn_scalar")
    return FamilyTraits(
        norm_offset=1.0, norm_scale_fp32=True, norms=NormPlacement.PRE if gemma1 else NormPlacement.SANDWICH,
        activation=Activation.GELU_TANH, embed_scale=hidden**0.5,
        attn_scale=None if gemma1 or qpas is None else float(qpas) ** -0.5,
        attn_softcap=_positive(raw.get("attn_logit_softcapping")),
        final_softcap=_positive(raw.get("final_logit_softcapping")),
        layer_windows=() if gemma1 else _layer_windows(arch, raw, num_layers),
        local_rope_theta=_local_rope_theta(raw) if arch.startswith("Gemma3") else None,
    )


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
        raise ValueError(f"layer_types must list {num_layers} of {SLIDING!r} / {FULL!r}")
    if raw.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention is not supported (sprig's attention is causal)")
    return tuple(int(window) if t == SLIDING else None for t in types)


def _local_rope_theta(raw: dict[str, Any]) -> float:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(SLIDING), dict):
        local = params[SLIDING]
        if local.get("rope_type", "default") != "default":
            raise ValueError("sliding layers with a rope scaling are not supported")
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

"""The model description sprig needs, read from a Hugging Face `config.json`."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.families import (
    FAMILY_ARCHITECTURES,
    LayerParts,
    global_rope_raw,
    layer_parts,
    norm_eps,
    qkv_bias,
    text_config,
)
from sprig.runtime.model.moe_config import MOE_ARCHITECTURES, MoEConfig, moe_from_hf

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           *FAMILY_ARCHITECTURES, *MOE_ARCHITECTURES)
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "freq_factors",  # freq_factors: GGUF's rope_freqs
              "longrope")  # longrope: Phi-3's short and long factors ("su" in older configs)


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters (transformers 4 `rope_theta`/`rope_scaling` or 5 `rope_parameters`)."""

    theta: float = 10000.0
    rope_type: str = "default"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelConfig:
    """One decoder covers every supported family; these fields (and `parts`, `families.py`) select its variants."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope: RopeConfig
    attention_bias: bool  # Qwen2 puts biases on q/k/v
    qk_norm: bool  # Qwen3 RMS-normalizes q and k per head
    tie_word_embeddings: bool
    torch_dtype: str  # the checkpoint's own dtype, what `--dtype auto` picks
    eos_token_ids: tuple[int, ...]
    context_length: int  # the longest sequence sprig serves
    moe: MoEConfig | None = None  # Mixtral, Qwen2-MoE, Qwen3-MoE: experts in place of the MLP in some layers
    parts: LayerParts = LayerParts()  # the family's norms, MLP, residual wiring, rope, windows and multipliers

    @property
    def rotary_dim(self) -> int:
        """The channels of each head that rope turns (the first ones): all of them but with partial rotary."""
        return int(self.head_dim * self.parts.partial_rotary_factor)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def _rope_from_hf(raw: dict[str, Any]) -> RopeConfig:
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", raw.get("rope_theta", raw.get("rotary_emb_base", 10000.0))))  # GPT-NeoX
    rope_type = str(params.pop("rope_type", params.pop("type", "default")))
    params.pop("partial_rotary_factor", None)  # why: a family part (`LayerParts`), not a rope parameter
    if rope_type in ("longrope", "su"):  # Phi-3 keeps the pretraining length at the top of its config
        rope_type = "longrope"
        params.setdefault("original_max_position_embeddings", raw.get("original_max_position_embeddings"))
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"unsupported rope type {rope_type!r}; supported: {', '.join(ROPE_TYPES)}")
    return RopeConfig(theta=theta, rope_type=rope_type, params=params)


def _eos_ids(raw: dict[str, Any], folder: Path) -> tuple[int, ...]:
    ids: list[int] = []
    gen_path = folder / "generation_config.json"
    sources = [raw]
    if gen_path.exists():
        sources.insert(0, json.loads(gen_path.read_text()))
    for src in sources:
        eos = src.get("eos_token_id")
        if eos is not None:
            ids.extend(eos if isinstance(eos, list) else [eos])
    return tuple(dict.fromkeys(int(i) for i in ids))


def _sliding_window(raw: dict[str, Any]) -> int | None:
    window = raw.get("sliding_window")
    if window is None or raw.get("use_sliding_window") is False:
        return None
    return int(window)


def _single_window_layers(raw: dict[str, Any], window: int, num_layers: int) -> tuple[int | None, ...]:
    """Mistral-style configs' one `sliding_window` as per-layer windows: every layer slides, or those `layer_types`
    names (transformers 5 writes it), or Qwen2's layers from `max_window_layers` on."""
    types = raw.get("layer_types")
    if isinstance(types, list) and len(types) == num_layers:
        return tuple(window if t == "sliding_attention" else None for t in types)
    first = int(raw["max_window_layers"]) if "max_window_layers" in raw and "use_sliding_window" in raw else 0
    return tuple(window if i >= first else None for i in range(num_layers))


def load_model_config(folder: str | Path) -> ModelConfig:
    """Parse `folder/config.json`; raise CheckpointError with one clear line on anything unsupported."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"model folder not found: {folder}")
    path = folder / "config.json"
    if not path.exists():
        raise CheckpointError(f"no config.json in {folder}")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"config.json is not valid JSON: {e}") from None
    raw = text_config(raw)
    archs = raw.get("architectures") or []
    arch = archs[0] if archs else None
    if arch not in SUPPORTED_ARCHITECTURES:
        raise CheckpointError(
            f"unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    try:
        num_heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        max_pos = int(raw.get("max_position_embeddings", 4096))
        parts = layer_parts(arch, raw, hidden, int(raw["num_hidden_layers"]))
        window = None if parts.layer_windows else _sliding_window(raw)  # None: the family set per-layer windows
        if window is not None and window < max_pos:  # served over the whole context, attending within the window
            parts = replace(parts, layer_windows=_single_window_layers(raw, window, int(raw["num_hidden_layers"])))
        context = max_pos
        return ModelConfig(
            architecture=arch,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
            head_dim=int(raw.get("head_dim") or hidden // num_heads),
            rms_norm_eps=norm_eps(arch, raw),  # the eps of whichever norm the family uses
            max_position_embeddings=max_pos,
            rope=_rope_from_hf(global_rope_raw(raw)),
            attention_bias=qkv_bias(arch, raw),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Olmo2ForCausalLM", "Gemma3ForCausalLM",
                             "Gemma3ForConditionalGeneration"),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            torch_dtype=str(raw.get("dtype") or raw.get("torch_dtype") or "float32"),
            eos_token_ids=_eos_ids(raw, folder),
            context_length=context,
            parts=parts,
            moe=moe_from_hf(raw, arch),
        )
    except KeyError as e:
        raise CheckpointError(f"config.json lacks required field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"config.json has a malformed field: {e}") from None

"""A LoRA adapter read from PEFT's layout (`adapter_config.json` + `adapter_model.safetensors`; safetensors only, never
a pickle), checked against the base model, with its scaling (`lora_alpha / r`, or `/ sqrt(r)` with rsLoRA) folded
into B. The pool that serves adapters in a batch is `lora_pool.py`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from sprig.runtime.config import LORA_MODULES as MODULES
from sprig.runtime.model.config import ModelConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ATTENTION_MODULES = frozenset(MODULES[:4])
_TENSOR = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


class LoraErrorKind(Enum):
    """What went wrong, which the server turns into its status code."""

    INVALID = 400  # a bad adapter: rank over the limit, shapes that do not fit the base, unsupported options
    FORBIDDEN = 403  # a path outside the configured roots
    NOT_FOUND = 404  # no adapter of that name


class LoraError(ValueError):
    """An adapter that cannot be used; the message names the adapter (and the module, for a bad tensor)."""

    def __init__(self, message: str, kind: LoraErrorKind = LoraErrorKind.INVALID, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.param = param
        self.code = "lora_not_found" if kind is LoraErrorKind.NOT_FOUND else f"lora_{kind.name.lower()}"


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter's weights in fp32: per (layer, module) A [r, in] and B [out, r] with the scaling folded into B."""

    name: str
    path: str
    rank: int
    alpha: float
    rslora: bool
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def modules(self) -> frozenset[str]:
        return frozenset(m for _, m in self.weights)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b in self.weights.values())


def module_shape(cfg: ModelConfig, module: str) -> tuple[int, int]:
    """(in, out) of a target module on the whole model."""
    h, q, kv, inter = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, inter),
            "up_proj": (h, inter), "down_proj": (inter, h)}[module]


def parse_target_modules(value: str | Sequence[str] | None) -> frozenset[str]:
    """`--lora-target-modules`: module names, or `all-linear` / `all` for every one; None: every one."""
    if value is None:
        return frozenset(MODULES)
    names = [value] if isinstance(value, str) else list(value)
    if any(n in ("all", "all-linear") for n in names):
        return frozenset(MODULES)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        raise ValueError(f"lora_target_modules: unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    return frozenset(names)


def _read_config(name: str, folder: Path) -> dict:
    try:
        raw = json.loads((folder / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise LoraError(f"adapter {name}: no {CONFIG_FILE} in its folder") from None
    except (OSError, ValueError) as e:
        raise LoraError(f"adapter {name}: cannot read {CONFIG_FILE}: {e}") from None
    if not isinstance(raw, dict):
        raise LoraError(f"adapter {name}: {CONFIG_FILE} is not a JSON object")
    if raw.get("peft_type", "LORA") != "LORA":
        raise LoraError(f"adapter {name}: peft_type {raw.get('peft_type')!r} is not LORA")
    for option in ("use_dora", "fan_in_fan_out"):
        if raw.get(option):
            raise LoraError(f"adapter {name}: {option} is not supported")
    for option in ("modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"):
        if raw.get(option):
            raise LoraError(f"adapter {name}: {option} is not supported")
    if raw.get("bias", "none") != "none":
        raise LoraError(f"adapter {name}: bias {raw.get('bias')!r} is not supported (only 'none')")
    return raw


def _int_field(name: str, raw: dict, key: str) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LoraError(f"adapter {name}: {CONFIG_FILE} field {key} must be a positive integer")
    return value


def read_adapter(name: str, folder: str | Path, cfg: ModelConfig, max_rank: int,
                 targets: frozenset[str] = frozenset(MODULES)) -> LoraAdapter:
    """Read and check the adapter in `folder` against the base model `cfg` (whole, unsharded); LoraError otherwise."""
    folder = Path(folder)
    raw = _read_config(name, folder)
    rank = _int_field(name, raw, "r")
    alpha = float(raw.get("lora_alpha", rank))
    rslora = bool(raw.get("use_rslora", False))
    scaling = alpha / math.sqrt(rank) if rslora else alpha / rank
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    try:
        with safe_open(str(folder / WEIGHTS_FILE), framework="pt", device="cpu") as f:
            for stored in f.keys():  # noqa: SIM118 - safe_open objects are not iterable
                layer, module, half = _tensor_key(name, stored, cfg)
                pairs.setdefault((layer, module), {})[half] = f.get_tensor(stored)
    except FileNotFoundError:
        raise LoraError(f"adapter {name}: no {WEIGHTS_FILE} in its folder (only safetensors is read)") from None
    except SafetensorError as e:
        raise LoraError(f"adapter {name}: corrupt {WEIGHTS_FILE}: {e}") from None
    if not pairs:
        raise LoraError(f"adapter {name}: {WEIGHTS_FILE} holds no LoRA tensors")
    weights = {key: _checked_pair(name, key, halves, cfg, rank, scaling, targets, max_rank)
               for key, halves in sorted(pairs.items())}
    return LoraAdapter(name, str(folder), rank, alpha, rslora, weights)


def _tensor_key(name: str, stored: str, cfg: ModelConfig) -> tuple[int, str, str]:
    match = _TENSOR.match(stored)
    if match is None:
        raise LoraError(f"adapter {name}: unexpected tensor {stored}")
    layer, module, half = int(match.group(1)), match.group(2), match.group(3)
    if module not in MODULES:
        raise LoraError(f"adapter {name}: module {module} is not supported (supported: {', '.join(MODULES)})",
                        param=module)
    if layer >= cfg.num_layers:
        raise LoraError(f"adapter {name}: module layers.{layer}.{module} is past the base model's "
                        f"{cfg.num_layers} layers", param=module)
    if cfg.moe is not None and module not in ATTENTION_MODULES and layer in cfg.moe.sparse_layers:
        raise LoraError(f"adapter {name}: module layers.{layer}.{module} is in a mixture-of-experts block, "
                        "which adapters cannot target yet", param=module)
    return layer, module, half


def _checked_pair(name: str, key: tuple[int, str], halves: dict[str, torch.Tensor], cfg: ModelConfig, rank: int,
                  scaling: float, targets: frozenset[str], max_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    layer, module = key
    where = f"layers.{layer}.{module}"
    if module not in targets:
        raise LoraError(f"adapter {name}: module {where} is not in --lora-target-modules", param=module)
    if set(halves) != {"A", "B"}:
        raise LoraError(f"adapter {name}: module {where} has lora_{''.join(halves)} without its pair", param=module)
    a, b = halves["A"], halves["B"]
    if max(rank, a.shape[0]) > max_rank:
        raise LoraError(f"adapter {name}: module {where} has rank {max(rank, a.shape[0])}, over --max-lora-rank "
                        f"{max_rank}", param=module)
    fan_in, fan_out = module_shape(cfg, module)
    if tuple(a.shape) != (rank, fan_in) or tuple(b.shape) != (fan_out, rank):
        raise LoraError(f"adapter {name}: module {where} has lora_A {list(a.shape)} and lora_B {list(b.shape)}; "
                        f"the base model and r={rank} need [{rank}, {fan_in}] and [{fan_out}, {rank}]", param=module)
    if not (a.is_floating_point() and b.is_floating_point()):
        raise LoraError(f"adapter {name}: module {where} is not floating point", param=module)
    return a.float().contiguous(), (b.float() * scaling).contiguous()


def write_adapter(folder: str | Path, weights: dict[str, torch.Tensor], rank: int, alpha: float,
                  target_modules: Sequence[str], rslora: bool = False, base: str = "") -> Path:
    """Write an adapter in PEFT's layout (tests and benchmarks make theirs with it): `weights` by PEFT's tensor names."""
    from safetensors.torch import save_file  # why: only writers need it

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": list(target_modules),
              "use_rslora": rslora, "bias": "none", "base_model_name_or_path": base, "task_type": "CAUSAL_LM"}
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / WEIGHTS_FILE))
    return folder


def random_adapter_weights(cfg: ModelConfig, rank: int, modules: Sequence[str], seed: int,
                           std: float = 0.05) -> dict[str, torch.Tensor]:
    """Random A and B (both nonzero, unlike a fresh PEFT adapter) for every layer's `modules`, by PEFT's names."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for layer in range(cfg.num_layers):
        for module in modules:
            fan_in, fan_out = module_shape(cfg, module)
            part = "self_attn" if module in ATTENTION_MODULES else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{part}.{module}"
            out[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, generator=g) * std
            out[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, rank, generator=g) * std
    return out

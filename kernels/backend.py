"""Pick the kernel implementations the model and sampler call: torch references, their Triton twins, or C.

`get_kernels("torch")` gives the reference ops of `kernels/*.py`; `get_kernels("triton")` the `kernels/triton_*.py`
twins with the same signatures and semantics; `get_kernels("cpu")` decode attention, RMSNorm, rotary embedding,
SiLU-and-mul and the KV store from the C kernels in `kernels/csrc` (built on first use by `kernels/cpu_native.py`),
the rest in torch. `get_kernels()` picks Triton on CUDA, and on the CPU "cpu" when the C kernels build here, else
torch. Triton runs on CPU tensors only through its interpreter (`TRITON_INTERPRET=1` set before the Triton
modules are first imported), which is how the twins are tested without a GPU; asking for Triton on CPU otherwise
is an error.
The Triton modules are imported lazily, so importing this module never needs triton.

Sampling stays in torch (`runtime/engine/sampler.py`), on purpose:
- it runs once per step, not once per layer, and its heavy parts (sort for top-p, topk, the argmax of the
  exponential race) are single library calls that are already bandwidth-bound on a GPU;
- seeded rows draw their noise from torch generators so that a request gives the same tokens alone or in any
  batch and after preemption; a Triton sampler would need its own counter-based RNG (a different stream, so
  different tokens for the same seed) and a rejection or pivot scheme for top-k/top-p that is not
  bit-comparable with the torch path it would replace.
A fused Triton top-k/top-p is worth revisiting when a profile shows the sampler above a few percent of a decode
step at large batch and vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from sprig.kernels import lora, moe

BACKENDS = ("torch", "triton", "cpu")


@dataclass(frozen=True)
class KernelSet:
    """The ops one backend provides; every op has the signature of the torch reference of that name."""

    name: str
    store_kv: Callable[..., None]
    paged_attention: Callable[..., torch.Tensor]
    rms_norm: Callable[..., torch.Tensor]
    fused_add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    apply_rotary_: Callable[..., None]
    hadamard_rotate_: Callable[..., None]
    silu_and_mul: Callable[..., torch.Tensor]
    apply_token_bitmask_: Callable[..., None]
    uses_decode_split: bool = False  # paged_attention reads AttentionMetadata.decode_split (shared-prefix groups)
    fused_moe: Callable[..., torch.Tensor] = moe.fused_moe  # routing, experts and combine in one call
    lora_add_: Callable[..., None] = lora.lora_add_  # the segmented LoRA product added to a linear's output


def default_backend(device: torch.device | str | None = None) -> str:
    """ "triton" on CUDA (with no device given: when CUDA is available) if triton imports; on the CPU "cpu" when
    sprig's C kernels build here; else "torch"."""
    on_cuda = torch.device(device).type == "cuda" if device is not None else torch.cuda.is_available()
    if on_cuda:
        return "triton" if _triton_importable() else "torch"
    from sprig.kernels.cpu_native import native_kernels

    return "cpu" if native_kernels() is not None else "torch"


def backend_reason(chosen: str, requested: str | None, device: torch.device | str) -> str:
    """Why `chosen` runs on `device`: the flag, or the rule of `default_backend` that picked it (for start-up logs)."""
    if requested is not None:
        return "as requested"
    if torch.device(device).type == "cuda":
        return "default on CUDA" if chosen == "triton" else "default on CUDA without the triton package"
    if chosen == "cpu":
        return "default on CPU: sprig's C kernels built for this machine"
    if os.environ.get("SPRIG_NATIVE_KERNELS", "1").lower() in ("0", "false", "off", "no"):
        return "SPRIG_NATIVE_KERNELS turns the C kernels off"
    return "the C kernels could not be built here (see the warning above)"


def get_kernels(backend: str | None = None, device: torch.device | str | None = None) -> KernelSet:
    """The kernels of `backend` ("torch" or "triton"; None picks `default_backend(device)`).

    `device` is where the tensors will live (default: CUDA when available, else CPU). Raises ValueError for an
    unknown backend, for Triton without the triton package, and for Triton on CPU without TRITON_INTERPRET=1.
    """
    backend = default_backend(device) if backend is None else backend
    if backend == "torch":
        return _torch_kernels()
    if backend == "triton":
        _check_triton_usable(device)
        return _triton_kernels()
    if backend == "cpu":
        return _cpu_kernels(device)
    raise ValueError(f"unknown kernel backend {backend!r}; expected one of {BACKENDS}")


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _check_triton_usable(device: torch.device | str | None) -> None:
    """Raise a ValueError saying why the Triton kernels cannot run on `device`."""
    if not _triton_importable():
        raise ValueError("kernel backend 'triton' needs the triton package: pip install 'sprig[gpu]'")
    on_cuda = torch.device(device).type == "cuda" if device is not None else torch.cuda.is_available()
    if not on_cuda and not _interpreting():
        raise ValueError(
            "kernel backend 'triton' needs a CUDA device; on CPU it runs only under the Triton interpreter "
            "(set TRITON_INTERPRET=1 before sprig's Triton kernels are imported), or use backend 'torch'"
        )


def _torch_bitmask() -> Callable[..., None]:
    """The torch bitmask apply, or a stand-in that says it is missing (kernels/bitmask.py is written apart)."""
    try:
        from sprig.kernels.bitmask import apply_token_bitmask_
    except ImportError:
        # a stand-in for the optional module: it only raises, so it need not repeat that module's signature
        def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> None:  # type: ignore[misc]
            raise NotImplementedError("sprig.kernels.bitmask is not available in this build")

    return apply_token_bitmask_


def _torch_kernels() -> KernelSet:
    from sprig.kernels.activation import silu_and_mul
    from sprig.kernels.attention import paged_attention, store_kv
    from sprig.kernels.hadamard import hadamard_rotate_
    from sprig.kernels.norm import fused_add_rms_norm, rms_norm
    from sprig.kernels.rope import apply_rotary_

    return KernelSet(
        "torch", store_kv, paged_attention, rms_norm, fused_add_rms_norm, apply_rotary_, hadamard_rotate_,
        silu_and_mul, _torch_bitmask(), uses_decode_split=True,
    )  # fmt: skip


def _triton_kernels() -> KernelSet:
    from sprig.kernels.hadamard import hadamard_rotate_  # torch ops (fp8 KV only): no Triton twin yet
    from sprig.kernels.triton_activation import silu_and_mul
    from sprig.kernels.triton_attention import paged_attention, store_kv
    from sprig.kernels.triton_bitmask import apply_token_bitmask_
    from sprig.kernels.triton_lora import lora_add_
    from sprig.kernels.triton_moe import fused_moe
    from sprig.kernels.triton_norm import fused_add_rms_norm, rms_norm
    from sprig.kernels.triton_rope import apply_rotary_

    return KernelSet(
        "triton", store_kv, paged_attention, rms_norm, fused_add_rms_norm, apply_rotary_, hadamard_rotate_,
        silu_and_mul, apply_token_bitmask_, fused_moe=fused_moe, lora_add_=lora_add_,
    )  # fmt: skip


def _cpu_kernels(device: torch.device | str | None) -> KernelSet:
    """Decode attention and the per-layer elementwise ops from sprig's C kernels (`kernels/csrc`), for CPU tensors;
    each falls back to its torch reference for inputs the C kernels do not take."""
    from sprig.kernels import cpu_elementwise as ew
    from sprig.kernels.cpu_lora import lora_add_
    from sprig.kernels.cpu_native import amx_enabled, native_kernels, paged_attention

    if device is not None and torch.device(device).type != "cpu":
        raise ValueError("kernel backend 'cpu' runs on CPU tensors only; use 'triton' or 'torch' on CUDA")
    if native_kernels() is None:
        raise ValueError("kernel backend 'cpu' needs a C compiler with OpenMP (gcc) to build sprig's CPU kernels; "
                         "see the log for the build error, or use backend 'torch'")
    return replace(
        _torch_kernels(), name="cpu", store_kv=ew.store_kv, paged_attention=paged_attention, rms_norm=ew.rms_norm,
        fused_add_rms_norm=ew.fused_add_rms_norm, apply_rotary_=ew.apply_rotary_,
        hadamard_rotate_=ew.hadamard_rotate_, silu_and_mul=ew.silu_and_mul, lora_add_=lora_add_,
        uses_decode_split=amx_enabled(),  # the C kernel attends shared-prefix groups on AMX tiles (bf16)
    )

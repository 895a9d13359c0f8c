"""The per-layer elementwise ops of the "cpu" backend, through the fused C kernels of `csrc/cpu_elementwise.c`.

Each function has the signature and semantics of its torch reference (`kernels/norm.py`, `rope.py`, `hadamard.py`,
`activation.py`, `attention.store_kv`) and falls back to it when the library is missing, the tensors are not
fp32/bf16/fp16 CPU tensors with a unit-stride last dim, or the C function declines the input. The torch chains
are one op per arithmetic step, each a full pass over the activation plus dispatcher overhead; the C versions are
one pass per op.
"""

from __future__ import annotations

import torch

from sprig.kernels import activation, hadamard, norm, rope
from sprig.kernels import attention as torch_attention
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels
from sprig.kernels.kv_quant import KV_DTYPE_CODES, SCALE_DTYPE


def _rows(x: torch.Tensor) -> tuple[int, int, int, int] | None:
    """x's rows (its last dim, unit stride) as [A, B] outer indices with element strides: (A, B, sa, sb)."""
    st = x.stride()
    if not st or st[-1] != 1:
        return None
    if len(st) == 2:
        return x.shape[0], 1, st[0], 0
    if len(st) == 3:
        return x.shape[0], x.shape[1], st[0], st[1]
    if len(st) == 1:
        return 1, 1, 0, 0
    try:
        flat = x.view(-1, x.shape[-1])  # more dims: only as a view, never a copy
    except RuntimeError:
        return None
    return flat.shape[0], 1, flat.stride(0), 0


def _code(*tensors: torch.Tensor) -> int | None:
    """The kernels' dtype code when all tensors are CPU tensors of one supported dtype, else None."""
    dtype = tensors[0].dtype
    for t in tensors:
        if not t.is_cpu or t.dtype != dtype:
            return None
    return DTYPE_CODES.get(dtype)


def _norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
          eps: float) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(norm(x [+ residual]), x + residual in fp32 or None) from the C kernel; None when it cannot take the input."""
    lib = native_kernels()
    code = _code(x, weight)
    res_code = None if residual is None or not residual.is_cpu else DTYPE_CODES.get(residual.dtype)
    if lib is None or code is None or weight.dim() != 1 or x.dim() == 0 or not weight.is_contiguous():
        return None
    if residual is not None and (res_code not in (code, 0) or residual.shape != x.shape):
        return None
    n = x.shape[-1]
    rows = _rows(x)
    rrows = (0, 0, 0, 0) if residual is None else _rows(residual)
    if rows is None or rrows is None or weight.shape[0] != n:
        return None
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    summed = None if residual is None else torch.empty(x.shape, dtype=torch.float32)
    a, b, sa, sb = rows
    status = lib.rms_norm(
        x.data_ptr(), None if residual is None else residual.data_ptr(), out.data_ptr(),
        None if summed is None else summed.data_ptr(), weight.data_ptr(), a, b, n, sa, sb, rrows[2], rrows[3],
        eps, code, code if res_code is None else res_code, torch.get_num_threads())
    return (out, summed) if status == 0 else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`norm.rms_norm` in one C pass per row (x may be a strided [T, H, D] view)."""
    done = _norm(x, None, weight, eps)
    return done[0] if done is not None else norm.rms_norm(x, weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`norm.fused_add_rms_norm`: (rms_norm(x + residual), x + residual in fp32), both fresh tensors (inputs
    untouched); `residual` is x's dtype or fp32."""
    done = _norm(x, residual, weight, eps)
    if done is None:
        return norm.fused_add_rms_norm(x, residual, weight, eps)
    out, summed = done
    assert summed is not None
    return out, summed


def apply_rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """`rope.apply_rotary_` in place, bitwise equal to it (q/k may be strided [T, H, D] views)."""
    lib, code = native_kernels(), _code(q, k)
    ok = (lib is not None and code is not None and q.dim() == 3 and k.dim() == 3
          and q.stride(-1) == 1 and k.stride(-1) == 1
          and q.shape[-1] == k.shape[-1] == cos_sin_cache.shape[-1] and q.shape[0] == k.shape[0]
          and cos_sin_cache.dtype == torch.float32 and cos_sin_cache.dim() == 2 and cos_sin_cache.is_contiguous()
          and cos_sin_cache.is_cpu and positions.dtype == torch.int64 and positions.shape == (q.shape[0],)
          and positions.is_cpu)
    if ok:
        assert lib is not None  # implied by ok
        positions = positions.contiguous()
        status = lib.rotary_embedding(
            q.data_ptr(), k.data_ptr(), positions.data_ptr(), cos_sin_cache.data_ptr(), q.shape[0], q.shape[1],
            q.stride(0), q.stride(1), k.shape[1], k.stride(0), k.stride(1), q.shape[2], cos_sin_cache.shape[0],
            code, torch.get_num_threads())
        if status == 0:
            return
    rope.apply_rotary_(q, k, positions, cos_sin_cache)


def hadamard_rotate_(x: torch.Tensor) -> None:
    """`hadamard.hadamard_rotate_` in place, bitwise equal to it (x may be a strided [T, H, D] view)."""
    lib, code = native_kernels(), _code(x)
    if (lib is not None and code is not None and x.dim() == 3 and x.stride(-1) == 1
            and lib.hadamard_rotate(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), x.stride(1), x.shape[2], code,
                                    torch.get_num_threads()) == 0):
        return
    hadamard.hadamard_rotate_(x)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`activation.silu_and_mul` in one C pass: silu(gate) * up for gate_up [..., 2 * I]."""
    lib, code = native_kernels(), _code(gate_up)
    if (lib is not None and code is not None and gate_up.dim() >= 1 and gate_up.shape[-1] % 2 == 0
            and gate_up.stride(-1) == 1):
        flat = gate_up if gate_up.dim() == 2 else gate_up.reshape(-1, gate_up.shape[-1])  # a view when it can be
        i = gate_up.shape[-1] // 2
        out = torch.empty(*gate_up.shape[:-1], i, dtype=gate_up.dtype)
        if lib.silu_and_mul(flat.data_ptr(), out.data_ptr(), flat.shape[0], i, flat.stride(0), code,
                            torch.get_num_threads()) == 0:
            return out
    return activation.silu_and_mul(gate_up)


def store_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
) -> None:
    """`attention.store_kv`: k, v [T, Hkv, D] (strided views allowed) into their pool slots [T]; a quantized cache
    (int8 / fp8 codes) with its bf16 scales [slots, Hkv] gets the bytes `kv_quant.quantize_kv` computes."""
    lib, code = native_kernels(), _code(k, v)
    quantized = k_scale is not None and v_scale is not None
    kv_code = KV_DTYPE_CODES.get(k_cache.dtype) if quantized else _code(k_cache, v_cache, k)
    ok = (lib is not None and code is not None and kv_code is not None and k.dim() == 3 and v.shape == k.shape
          and k_cache.shape == v_cache.shape and k_cache.dtype == v_cache.dtype
          and k_cache.dim() == 3 and k_cache.shape[1:] == k.shape[1:] and k_cache.is_contiguous()
          and v_cache.is_contiguous() and k.stride(-1) == 1 and v.stride(-1) == 1 and slots.dtype == torch.int64
          and slots.shape == (k.shape[0],) and slots.is_cpu and k_cache.is_cpu and v_cache.is_cpu
          and (not quantized or _scales_ok(k_cache, k_scale, v_scale)))
    if ok:
        assert lib is not None and kv_code is not None  # implied by ok
        slots = slots.contiguous()
        t, h, d = k.shape
        status = lib.store_kv(
            k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), k.data_ptr(), v.data_ptr(), t, h, d,
            k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_cache.shape[0], code, torch.get_num_threads(),
            kv_code, *(t.data_ptr() if t is not None else None for t in (k_scale, v_scale)))
        if status == 0:
            return
    torch_attention.store_kv(k_cache, v_cache, slots, k, v, k_scale, v_scale)


def _scales_ok(cache: torch.Tensor, *scales: torch.Tensor | None) -> bool:
    """Scale tensors the C kernels can write: contiguous bf16 [slots, Hkv] on the CPU, beside `cache`."""
    return all(s is not None and s.dtype == SCALE_DTYPE and s.is_cpu and s.is_contiguous()
               and s.shape == cache.shape[:2] for s in scales)

"""Host (CPU) buffers backed by transparent huge pages where the kernel allows it.

Decode reads the KV pool at scattered pages and every weight once per step. With 4 KiB pages each of those reads
is a TLB miss, which costs as much as the read in a VM (nested page walks); measured here, decode attention over
a 1.6 GB pool ran 1.5x faster on 2 MiB pages. Linux gives them to anonymous memory advised with MADV_HUGEPAGE
when /sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise` (the common default); elsewhere the
advice is a no-op and the buffers are ordinary.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import torch

MADV_HUGEPAGE = 14
HUGE_PAGE = 2 << 20


@functools.cache
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def advise_huge_pages(t: torch.Tensor) -> bool:
    """Ask for huge pages behind the whole 2 MiB-aligned part of `t`'s memory; True when the kernel agreed.

    Only pages not yet touched are affected, so call it before writing to a fresh tensor.
    """
    madvise = _madvise()
    if madvise is None or t.device.type != "cpu":
        return False
    start = t.data_ptr()
    end = start + t.numel() * t.element_size()
    lo = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    hi = end & ~(HUGE_PAGE - 1)
    return hi > lo and madvise(lo, hi - lo, MADV_HUGEPAGE) == 0


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device = "cpu") -> torch.Tensor:
    """torch.zeros, on huge pages when it lives on the CPU."""
    t = torch.empty(shape, dtype=dtype, device=device)
    advise_huge_pages(t)
    return t.zero_()


def pack_parameters(module: torch.nn.Module, keep_values: bool = True,
                    skip: tuple[type[torch.nn.Module], ...] = ()) -> int:
    """Move the CPU parameters and buffers of `module` into one huge-page buffer per dtype; returns bytes moved.

    The tensors keep their shapes (made contiguous) and, with `keep_values`, their values; only their storage
    changes. Without `keep_values` (a model about to be filled from a checkpoint) the new storage is zeros.
    Tensors of submodules of a type in `skip` stay where they are.
    """
    skipped = {id(t) for m in module.modules() if isinstance(m, skip) for t in (*m.parameters(), *m.buffers())}
    tensors = [t for t in (*module.parameters(), *module.buffers()) if t.device.type == "cpu" and id(t) not in skipped]
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    moved = 0
    for dtype, group in by_dtype.items():
        align = max(1, 64 // group[0].element_size())  # keep every tensor 64-byte aligned
        sizes = [-(-t.numel() // align) * align for t in group]
        flat = zeros((sum(sizes),), dtype)
        offset = 0
        for t, size in zip(group, sizes, strict=True):
            view = flat[offset : offset + t.numel()].view(t.shape)
            if keep_values:
                view.copy_(t)
            t.data = view
            offset += size
        moved += flat.numel() * flat.element_size()
    return moved

"""Row-wise argmax of CPU logits through sprig's C kernel (`kernels/csrc/argmax.c`), for greedy sampling.

Same result as `torch.argmax(x, dim=-1)` (ties to the lowest index, a NaN row to its first NaN) at memory speed:
torch's CPU argmax takes 9 ms for a batch of 256 rows of a 32k vocabulary in fp32 and 19 ms in bf16.
"""

from __future__ import annotations

import torch

from sprig.kernels.cpu_native import native_kernels

_CODES = {torch.float32: 0, torch.bfloat16: 1}


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """argmax over the last dim of a 2-D tensor [B, V] → int64 [B]."""
    code = _CODES.get(x.dtype)
    lib = native_kernels() if x.device.type == "cpu" and code is not None else None
    if lib is None or x.dim() != 2 or x.shape[1] == 0 or x.stride(1) != 1:
        return x.argmax(dim=-1)
    out = torch.empty(x.shape[0], dtype=torch.int64)
    if x.shape[0] and lib.argmax_rows(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), code, out.data_ptr(),
                                      torch.get_num_threads()) != 0:
        return x.argmax(dim=-1)
    return out

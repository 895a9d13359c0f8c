"""The Triton kernels compile for real GPUs (ahead of time, no GPU needed) within shared-memory limits."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
)
pytest.importorskip(
    "triton.compiler", reason="this triton has no ahead-of-time compile API", exc_type=ImportError
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", [90])
def test_every_kernel_compiles_for_sm(arch):
    # A fresh process: this one may hold interpreted kernels (TRITON_INTERPRET=1), which cannot be compiled.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the current default, set to silence its warning
    proc = subprocess.run(
        [sys.executable, "-m", "sprig.kernels.triton_compile_check", str(arch)],
        env=env, capture_output=True, text=True, timeout=290,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    compiled = {line.split()[1] for line in proc.stdout.splitlines()}
    assert {"_decode_split_kernel", "_extend_kernel", "_rms_norm_kernel", "_bitmask_kernel"} <= compiled
    assert {"_gemv_kernel", "_gemm_kernel", "_rows_kernel"} <= compiled  # GGML block-quant (triton_block_quant)
    assert "_expert_gemm_kernel" in compiled  # the fused MoE (triton_moe)

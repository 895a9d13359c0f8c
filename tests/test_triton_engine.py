"""The engine on the Triton kernels (CPU interpreter) gives the same greedy tokens as on the torch kernels, with the
KV cache in the model dtype or quantized."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sprig.runtime.model.checkpoints import checkpoint_path

pytest.importorskip("triton", reason="triton is not installed")

SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from sprig import Engine
prompts = [[5, 17, 300, 42], list(range(100, 137)), [9] * 20]
params = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
out = {}
for backend in ("torch", "triton"):
    with Engine(sys.argv[1], dtype="float32", max_total_tokens=512, attention_backend=backend,
                kv_cache_dtype=sys.argv[2]) as e:
        out[backend] = [r["output_ids"] for r in e.generate(input_ids=prompts, sampling_params=params)]
print(json.dumps(out))
"""


@pytest.mark.parametrize(("name", "kv_cache_dtype"), [("tiny-qwen3", "auto"), ("tiny-qwen3", "fp8_e4m3"),
                                                     ("tiny-gemma2", "auto"), ("tiny-gemma3", "auto")])
def test_triton_backend_matches_torch_backend(name, kv_cache_dtype):
    """Gemma 2 / 3: soft-capped scores and sliding-window layers in the Triton kernels, past the window of 8."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(checkpoint_path(name)), kv_cache_dtype],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["triton"] == out["torch"]

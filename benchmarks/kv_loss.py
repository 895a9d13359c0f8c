"""Where a quantized KV cache loses on SmolLM2-135M: keys or values, which layers, and what rotating the keys buys.

    python benchmarks/kv_loss.py [--threads 1] [--max-windows 3] [--variants NAME ...] [--layers]

Each variant rounds the keys (after rotary embedding) and/or the values of every attention call to a KV cache dtype
and back, with sprig's own codes and scales (`kernels/kv_quant.py`: one bf16 scale per token and head), inside
transformers' fp32 model of the dequantized GGUF; "rot" variants first rotate queries and keys by the Hadamard
matrix (`kernels/hadamard.py`, what sprig does for fp8 caches; q·k unchanged). `--layers` also quantizes e5m2 keys
in one layer at a time. Perplexity on the start of benchmarks/data/licenses.txt; results go to results/kv_loss.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from quality import record_variant, text_windows, transformers_model

from sprig.kernels.hadamard import hadamard_rotate_
from sprig.kernels.kv_quant import dequantize_kv, quantize_kv
from sprig.runtime.bench.perplexity import transformers_perplexity

E5M2, E4M3, INT8 = torch.float8_e5m2, torch.float8_e4m3fn, torch.int8
# name -> (key dtype or None, value dtype or None, rotate queries and keys)
VARIANTS: dict[str, tuple[torch.dtype | None, torch.dtype | None, bool]] = {
    "e5m2-kv": (E5M2, E5M2, False),
    "e5m2-k": (E5M2, None, False),
    "e5m2-v": (None, E5M2, False),
    "e5m2-k-rot": (E5M2, None, True),
    "e5m2-kv-rot": (E5M2, E5M2, True),
    "e4m3-kv": (E4M3, E4M3, False),
    "e4m3-kv-rot": (E4M3, E4M3, True),
    "int8-kv": (INT8, INT8, False),
    "int8-kv-rot": (INT8, INT8, True),
}


class KVRoundTrip:
    """The attention function transformers calls, with K/V rounded through a cache dtype in the chosen layers."""

    def __init__(self) -> None:
        self.k: torch.dtype | None = None
        self.v: torch.dtype | None = None
        self.rotate = False
        self.layers: set[int] | None = None  # None: every layer

    def __call__(self, module, q, k, v, mask, **kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if self.layers is None or module.layer_idx in self.layers:
            if self.rotate:
                q, k = q.clone(), k.clone()
                hadamard_rotate_(q)
                hadamard_rotate_(k)
            k = k if self.k is None else dequantize_kv(*quantize_kv(k, self.k), k.dtype)
            v = v if self.v is None else dequantize_kv(*quantize_kv(v, self.v), v.dtype)
        return sdpa_attention_forward(module, q, k, v, mask, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--layers", action="store_true", help="also e5m2 keys in one layer at a time")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-windows", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/kv_loss.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AttentionInterface

    gguf, ids, windows = text_windows(args.max_windows)
    trip = KVRoundTrip()
    AttentionInterface.register("sprig_kv_round_trip", trip)
    model = transformers_model(gguf)
    model.set_attn_implementation("sprig_kv_round_trip")
    base = transformers_perplexity(model, ids, windows)
    results = {"fp32": {"ppl": base.value, "tokens": base.tokens}}
    print(f"{'fp32':24s} ppl {base.value:.4f} over {base.tokens} tokens", flush=True)
    runs = [(name, *VARIANTS[name], None) for name in args.variants]
    if args.layers:
        runs += [(f"e5m2-k-layer{i}", E5M2, None, False, {i}) for i in range(model.config.num_hidden_layers)]
    for name, k, v, rotate, layers in runs:
        trip.k, trip.v, trip.rotate, trip.layers = k, v, rotate, layers
        record_variant(results, name, transformers_perplexity(model, ids, windows), base, args.out)


if __name__ == "__main__":
    main()

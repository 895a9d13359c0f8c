"""Where 8-bit linears lose on SmolLM2-135M: weight scales per row vs per group, activations per token vs per block,
int8 vs fp8, measured as perplexity on the start of benchmarks/data/licenses.txt.

    python benchmarks/int8_loss.py [--threads 1] [--max-windows 3] [--variants NAME ...]

Each variant rounds the decoder layers' linear weights and/or their inputs to 8 bits and back (fake quantization in
fp32) inside transformers' fp32 model of the dequantized GGUF; the LM head (the tied embedding) stays fp32, as in
sprig. `w8a8-row-token` is what `--quantization int8` computes (sprig's int8 row is measured beside it by
benchmarks/quality.py); `fp8-row` is `--quantization fp8`; `q8_0` is GGML's Q8_0 (weights per 32, activations per
32, as sprig's block-quantized kernels do). Results go to results/int8_loss.json.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from pathlib import Path

import torch
from quality import record_variant, text_windows, transformers_model

from sprig.runtime.bench.perplexity import transformers_perplexity

Quant = Callable[[torch.Tensor], torch.Tensor]


def int8_groups(group: int | None) -> Quant:
    """Symmetric int8 round trip with one scale per `group` consecutive values of each row (None: the whole row)."""

    def q(x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        g = x.reshape(-1, group if group else shape[-1])
        scale = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30) / 127
        return (torch.round(g / scale).clamp(-127, 127) * scale).reshape(shape)

    return q


def fp8_groups(group: int | None, fmt: torch.dtype = torch.float8_e4m3fn) -> Quant:
    """fp8 round trip, one scale per `group` values of each row (None: the whole row), amax to the format's max."""
    top = torch.finfo(fmt).max

    def q(x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        g = x.reshape(-1, group if group else shape[-1])
        scale = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30) / top
        return ((g / scale).to(fmt).float() * scale).reshape(shape)

    return q


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


# name -> (weight round trip, activation round trip, linears left in fp32 by name suffix)
VARIANTS: dict[str, tuple[Quant, Quant, tuple[str, ...]]] = {
    "w8-row": (int8_groups(None), identity, ()),
    "w8-g128": (int8_groups(128), identity, ()),
    "w8-g32": (int8_groups(32), identity, ()),
    "a8-token": (identity, int8_groups(None), ()),
    "a8-b128": (identity, int8_groups(128), ()),
    "a8-b32": (identity, int8_groups(32), ()),
    "w8a8-row-token": (int8_groups(None), int8_groups(None), ()),
    "w8a8-row-token-no-down": (int8_groups(None), int8_groups(None), ("down_proj",)),
    "w8a8-g32-token": (int8_groups(32), int8_groups(None), ()),
    "w8a8-row-b32": (int8_groups(None), int8_groups(32), ()),
    "q8_0": (int8_groups(32), int8_groups(32), ()),
    "fp8-row": (fp8_groups(None), identity, ()),
    "fp8-g128": (fp8_groups(128), identity, ()),
    "fp8-g32": (fp8_groups(32), identity, ()),
}


def quantize_model(model: torch.nn.Module, weight_q: Quant, act_q: Quant, skip: tuple[str, ...]) -> None:
    """Round the decoder layers' linear weights now and their inputs at every call."""
    for name, m in model.model.layers.named_modules():
        if isinstance(m, torch.nn.Linear) and not name.endswith(skip):
            m.weight.data = weight_q(m.weight.data)
            if act_q is not identity:
                m.register_forward_pre_hook(lambda _m, args: (act_q(args[0]),))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-windows", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/int8_loss.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gguf, ids, windows = text_windows(args.max_windows)
    fp32 = transformers_model(gguf)
    base = transformers_perplexity(fp32, ids, windows)
    results = {"fp32": {"ppl": base.value, "tokens": base.tokens}}
    print(f"{'fp32':24s} ppl {base.value:.4f} over {base.tokens} tokens", flush=True)
    for name in args.variants:
        model = copy.deepcopy(fp32)
        quantize_model(model, *VARIANTS[name])
        record_variant(results, name, transformers_perplexity(model, ids, windows), base, args.out)


if __name__ == "__main__":
    main()

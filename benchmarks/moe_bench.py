"""The fused MoE C kernel (kernels/cpu_moe.py over kernels/csrc/moe.c) against the torch per-expert loop
(kernels/moe.py: F.linear per active expert, oneDNN in bf16) on a MoE layer larger than the cache: 8 experts,
hidden 1024, expert intermediate 2816, top-2, bf16 (138 MB of expert weights per layer).

    OMP_NUM_THREADS=2 python benchmarks/moe_bench.py                 # the table for benchmarks/README.md
    python benchmarks/moe_bench.py --threads 1 --tokens 1 --seconds 2

Rows: decode steps of 1 and 16 tokens and a 512-token prefill. Each call runs the next of `--layers` layers (different
weights, so a call never finds the previous call's experts in the cache, as in a model's forward). Each cell is the
minimum over repeated calls for `--seconds`, in milliseconds; GB/s is the active experts' weight bytes over the time.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from bench_block_quant import best_us  # a script beside this one (its folder is on sys.path)

from sprig.kernels.cpu_gemm import vec_isa
from sprig.kernels.cpu_moe import cpu_fused_moe, pack_experts
from sprig.kernels.moe import fused_moe, route


def active_bytes(logits: torch.Tensor, top_k: int, hidden: int, inter: int) -> int:
    """Bytes of the expert weights one call reads (bf16: 3 matrices of hidden x inter per active expert)."""
    _, ids = route(logits, top_k, True)
    return int(ids.unique().numel()) * 3 * hidden * inter * 2


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    e, h, i, k = args.experts, args.hidden, args.intermediate, args.top_k
    gen = torch.Generator().manual_seed(0)
    layers = [((torch.randn(e, 2 * i, h, generator=gen) * h**-0.5).bfloat16(),
               (torch.randn(e, h, i, generator=gen) * i**-0.5).bfloat16()) for _ in range(args.layers)]
    packed = [pack_experts(w13, w2) for w13, w2 in layers]
    mb = 3 * e * h * i * 2 / 1e6
    print(f"{e} experts x hidden {h} x intermediate {i}, top-{k}, bf16 ({mb:.0f} MB per layer, {args.layers} layers);"
          f" {args.threads} threads; C path {vec_isa().name.lower() if vec_isa() else '-'}; ms, min of repeats")
    print("| tokens | active experts | torch loop (ms) | fused C (ms) | speed-up | fused C (GB/s) |")
    print("|---|---|---|---|---|---|")
    for t in args.tokens:
        x = torch.randn(t, h, generator=gen).bfloat16()
        logits = torch.randn(t, e, generator=gen)
        torch_next, fused_next = itertools.cycle(layers), itertools.cycle(packed)

        def torch_call() -> object:
            w13, w2 = next(torch_next)  # noqa: B023 - called right away
            return fused_moe(x, w13, w2, logits, k, True)  # noqa: B023

        def fused_call() -> object:
            return cpu_fused_moe(x, next(fused_next), logits, k, True)  # noqa: B023

        ref, got = torch_call(), fused_call()
        assert (ref.float() - got.float()).abs().max() < 0.1, "the kernels disagree"
        slow, fast = best_us(torch_call, args.seconds) / 1e3, best_us(fused_call, args.seconds) / 1e3
        gbs = active_bytes(logits, k, h, i) / fast / 1e6
        active = int(route(logits, k, True)[1].unique().numel())
        print(f"| {t} | {active} | {slow:.2f} | {fast:.2f} | {slow / fast:.2f}x | {gbs:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 512])
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    run(parser.parse_args())


if __name__ == "__main__":
    main()

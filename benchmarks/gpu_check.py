"""GPU check of the Triton kernels: correctness against the torch references at real sizes, and speed.

For every kernel and dtype it prints the largest error against the torch reference (relative to the reference's
largest magnitude), the time of each (median of CUDA-event-timed runs, L2 flushed before each run), and the
memory-bandwidth bound: the bytes the op must move divided by the peak bandwidth measured here with a large
device copy. `%bw` is bound / Triton time, the share of peak bandwidth the kernel reaches. Attention rows also
print the Triton kernel's TFLOP/s (prefill is compute-bound, so its %bw is expected to be low).

    python benchmarks/gpu_check.py                  # fp16 and bf16, about 2-4 minutes on an H100/H200
    python benchmarks/gpu_check.py --dtypes fp16 --budget-s 120
    python benchmarks/gpu_check.py --engine         # instead: the overlap schedule on/off, and pp 1 vs 2 (2 GPUs)
    python benchmarks/gpu_check.py --block-quant    # only the GGML block-quant twins at SmolLM2's shapes (~1 min)

`--engine` runs overlap_bench's measurement on CUDA (llama-100m bf16, 128 -> 64 tokens, concurrency 16 and 64,
overlap off then on: output tokens/s, the gap between forwards, the forward's time per step) and, where two GPUs
are visible, pp_bench's pp = 1 against pp = 2 (throughput, TPOT, the p2p time per step).

Exit status: 0 all comparisons pass, 1 some comparison failed, 2 no CUDA device (or triton missing).
It stops starting new cases once `--budget-s` (default 420 s, so the whole run fits in 8 minutes) is spent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2, torch.float32: 1e-4}
DEVICE = "cuda"  # module-level so the case builders can be smoke-tested on CPU under the Triton interpreter
SHRINK = 1  # divides every size (smoke tests only)


def _n(size: int) -> int:
    """A case size, divided by SHRINK (kept at least 1)."""
    return max(1, size // SHRINK)


@dataclass
class Case:
    """One kernel at one size: how to run each side, what to compare, how much it must move."""

    name: str
    shape: str
    dtype: torch.dtype
    ref: Callable[[], object]  # torch reference, timed as is (in-place ops just run again)
    tri: Callable[[], object]
    check: Callable[[], float]  # max abs error of Triton vs torch on fresh inputs
    bytes_moved: int
    flops: float = 0.0


# --------------------------------------------------------------------------------------------- timing


def _flush_buffer() -> torch.Tensor:
    return torch.empty(256 * 2**20, dtype=torch.uint8, device=DEVICE)  # larger than any GPU's L2


def time_ms(fn: Callable[[], object], flush: torch.Tensor, target_ms: float = 300.0) -> float:
    """Median milliseconds of `fn`, each run after an L2 flush, with ~target_ms of runs."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    reps = max(5, min(100, int(target_ms / max((time.perf_counter() - t0) * 1e3, 1e-3))))
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)
    ]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def peak_bandwidth(flush: torch.Tensor) -> float:
    """Bytes per second of a 2 GiB device-to-device copy, the best of a few runs."""
    src = torch.empty(2**30, dtype=torch.uint16, device=DEVICE)
    dst = torch.empty_like(src)
    ms = min(time_ms(lambda: dst.copy_(src), flush, 50.0) for _ in range(3))
    return 2 * src.numel() * src.element_size() / (ms * 1e-3)


# --------------------------------------------------------------------------------------------- cases


def _err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest difference, relative to the reference's largest magnitude (at least 1): ulps scale with it."""
    ref32 = ref.float()
    return ((got.float() - ref32).abs().max() / ref32.abs().max().clamp(min=1.0)).item()


def _norm_cases(dtype: torch.dtype) -> list[Case]:
    from sprig.kernels import norm, triton_norm

    t, h = _n(8192), _n(8192)
    x, r = torch.randn(t, h, dtype=dtype, device=DEVICE), torch.randn(t, h, dtype=dtype, device=DEVICE)
    w = torch.randn(h, dtype=dtype, device=DEVICE)
    size = x.numel() * x.element_size()

    def fused_err() -> float:
        a, b = triton_norm.fused_add_rms_norm(x, r, w, 1e-6), norm.fused_add_rms_norm(x, r, w, 1e-6)
        return max(_err(a[0], b[0]), _err(a[1], b[1]))

    return [
        Case("rms_norm", f"{t}x{h}", dtype, lambda: norm.rms_norm(x, w, 1e-6),
             lambda: triton_norm.rms_norm(x, w, 1e-6),
             lambda: _err(triton_norm.rms_norm(x, w, 1e-6), norm.rms_norm(x, w, 1e-6)), 2 * size),
        Case("fused_add_rms_norm", f"{t}x{h}", dtype, lambda: norm.fused_add_rms_norm(x, r, w, 1e-6),
             lambda: triton_norm.fused_add_rms_norm(x, r, w, 1e-6), fused_err, 4 * size),
    ]  # fmt: skip


def _rope_case(dtype: torch.dtype) -> Case:
    from sprig.kernels import rope, triton_rope

    t, hq, hkv, d = _n(16384), 32, 8, 128
    q, k = (
        torch.randn(t, hq, d, dtype=dtype, device=DEVICE),
        torch.randn(t, hkv, d, dtype=dtype, device=DEVICE),
    )
    inv_freq = 1.0 / (500000 ** (torch.arange(0, d, 2, device=DEVICE).float() / d))
    angles = torch.arange(32768, device=DEVICE).float()[:, None] * inv_freq
    cache = torch.cat([angles.cos(), angles.sin()], dim=-1)
    pos = torch.randint(0, 32768, (t,), device=DEVICE)

    def check() -> float:
        q1, k1, q2, k2 = q.clone(), k.clone(), q.clone(), k.clone()
        rope.apply_rotary_(q1, k1, pos, cache)
        triton_rope.apply_rotary_(q2, k2, pos, cache)
        return max(_err(q1, q2), _err(k1, k2))

    moved = 2 * (q.numel() + k.numel()) * q.element_size() + t * (8 + d * 4)
    return Case("apply_rotary_", f"T={t} {hq}/{hkv}x{d}", dtype, lambda: rope.apply_rotary_(q, k, pos, cache),
                lambda: triton_rope.apply_rotary_(q, k, pos, cache), check, moved)  # fmt: skip


def _silu_case(dtype: torch.dtype) -> Case:
    from sprig.kernels import activation, triton_activation

    t, inter = _n(8192), _n(14336)
    gu = torch.randn(t, 2 * inter, dtype=dtype, device=DEVICE)
    return Case("silu_and_mul", f"{t}x2x{inter}", dtype, lambda: activation.silu_and_mul(gu),
                lambda: triton_activation.silu_and_mul(gu),
                lambda: _err(triton_activation.silu_and_mul(gu), activation.silu_and_mul(gu)),
                3 * t * inter * gu.element_size())  # fmt: skip


def _torch_bitmask() -> Callable[[torch.Tensor, torch.Tensor], None]:
    try:
        from sprig.kernels.bitmask import apply_token_bitmask_

        return apply_token_bitmask_
    except ImportError:  # kernels/bitmask.py is written apart: fall back to the plain torch expression

        def apply(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
            shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
            bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).flatten(1)[:, : logits.shape[1]].bool()
            logits.masked_fill_(~bits, float("-inf"))

        return apply


def _bitmask_case(dtype: torch.dtype) -> Case:
    from sprig.kernels import triton_bitmask

    b, vocab = _n(256), _n(128256)
    logits = torch.randn(b, vocab, dtype=dtype, device=DEVICE)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (b, -(-vocab // 32)), dtype=torch.int32, device=DEVICE)
    ref = _torch_bitmask()

    def check() -> float:
        a, c = logits.clone(), logits.clone()
        ref(a, bitmask)
        triton_bitmask.apply_token_bitmask_(c, bitmask)
        return 0.0 if torch.equal(a, c) else float("inf")

    moved = bitmask.numel() * 4 + logits.numel() * logits.element_size() // 2  # half the tokens get -inf
    return Case("apply_token_bitmask_", f"{b}x{vocab}", dtype, lambda: ref(logits, bitmask),
                lambda: triton_bitmask.apply_token_bitmask_(logits, bitmask), check, moved)  # fmt: skip


def _pool(dtype: torch.dtype, ext_lens: list[int], prefix_lens: list[int], page: int, hkv: int, d: int):
    """A shuffled random page pool, the step's metadata on DEVICE, and the page tables (on CPU)."""
    from sprig.kernels.attention import AttentionMetadata, ExtendSeq

    per_seq = [-(-(e + p) // page) for e, p in zip(ext_lens, prefix_lens, strict=True)]
    perm = torch.randperm(sum(per_seq))
    tables = list(torch.split(perm, per_seq))
    meta = AttentionMetadata.build(page, ext_lens, prefix_lens, tables)

    def mv(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(DEVICE)

    meta = AttentionMetadata(
        page, mv(meta.decode_rows), mv(meta.decode_pages), mv(meta.decode_mask),
        tuple(ExtendSeq(s.token_start, s.extend_len, s.prefix_len, s.pages.to(DEVICE), mv(s.mask)) for s in meta.extends),
    )  # fmt: skip
    shape = (sum(per_seq) * page, hkv, d)
    k_cache, v_cache = (
        torch.randn(shape, dtype=dtype, device=DEVICE),
        torch.randn(shape, dtype=dtype, device=DEVICE),
    )
    return k_cache, v_cache, meta, tables


def _attention_case(name: str, dtype: torch.dtype, ext_lens: list[int], prefix_lens: list[int]) -> Case:
    from sprig.kernels import attention, triton_attention

    hq, hkv, d, page = 32, 8, 128, 16
    ext_lens, prefix_lens = [_n(e) if e > 1 else e for e in ext_lens], [p // SHRINK for p in prefix_lens]
    ext_lens, prefix_lens = ext_lens[: _n(len(ext_lens))], prefix_lens[: _n(len(prefix_lens))]
    k_cache, v_cache, meta, tables = _pool(dtype, ext_lens, prefix_lens, page, hkv, d)
    n = sum(ext_lens)
    q = torch.randn(n, hq, d, dtype=dtype, device=DEVICE)
    k, v = (
        torch.randn(n, hkv, d, dtype=dtype, device=DEVICE),
        torch.randn(n, hkv, d, dtype=dtype, device=DEVICE),
    )
    scale = d**-0.5
    # This step's k/v go into the pool first, as in the model: the reference reads them back from there.
    positions = [torch.arange(p, p + e) for e, p in zip(ext_lens, prefix_lens, strict=True)]
    slots = torch.cat([t[pos // page] * page + pos % page for t, pos in zip(tables, positions, strict=True)])
    attention.store_kv(k_cache, v_cache, slots.to(DEVICE), k, v)

    def run(mod) -> Callable[[], torch.Tensor]:
        return lambda: mod.paged_attention(q, k, v, k_cache, v_cache, meta, scale)

    keys = sum(e + p for e, p in zip(ext_lens, prefix_lens, strict=True))
    pairs = sum(e * p + e * (e + 1) / 2 for e, p in zip(ext_lens, prefix_lens, strict=True))
    moved = 2 * keys * hkv * d * q.element_size() + 2 * q.numel() * q.element_size()
    shape = f"B={len(ext_lens)} new={max(ext_lens)} ctx={max(e + p for e, p in zip(ext_lens, prefix_lens, strict=True))}"
    return Case(name, shape, dtype, run(attention), run(triton_attention),
                lambda: _err(run(triton_attention)(), run(attention)()), moved, 4.0 * hq * d * pairs)  # fmt: skip


def _store_kv_case(dtype: torch.dtype) -> Case:
    from sprig.kernels import attention, triton_attention

    t, hkv, d = _n(16384), 8, 128
    k_cache = torch.zeros(4 * t, hkv, d, dtype=dtype, device=DEVICE)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(4 * t, device=DEVICE)[:t]
    k, v = (
        torch.randn(t, hkv, d, dtype=dtype, device=DEVICE),
        torch.randn(t, hkv, d, dtype=dtype, device=DEVICE),
    )

    def check() -> float:
        attention.store_kv(k_cache, v_cache, slots, k, v)
        kc, vc = k_cache.clone(), v_cache.clone()
        k_cache.zero_(), v_cache.zero_()
        triton_attention.store_kv(k_cache, v_cache, slots, k, v)
        return max(_err(kc, k_cache), _err(vc, v_cache))

    return Case("store_kv", f"T={t} {hkv}x{d}", dtype, lambda: attention.store_kv(k_cache, v_cache, slots, k, v),
                lambda: triton_attention.store_kv(k_cache, v_cache, slots, k, v), check,
                4 * k.numel() * k.element_size() + t * 8)  # fmt: skip


# GGML block-quant twins (kernels/triton_block_quant.py) at SmolLM2-135M's shapes: (N, K) of q/o, k/v, gate/up and
# down (its GGUF file stores them Q4_1) and the tied embedding / LM head (Q8_0). K-quants need K % 256 == 0: of
# these shapes only down's K = 1536, where every type is timed.
SMOLLM2_LINEARS = ((576, 576), (192, 576), (1536, 576), (576, 1536))
SMOLLM2_VOCAB = 49152


def _random_blocks(qtype, n: int, k: int) -> torch.Tensor:
    """Random GGML rows on DEVICE: random codes, small finite fp16 scales and mins (at each block's fp16 fields)."""
    from sprig.kernels.ggml_quants import GGMLType

    fp16_at = {GGMLType.Q4_1: (0, 2), GGMLType.Q4_K: (0, 2), GGMLType.Q5_K: (0, 2), GGMLType.Q6_K: (208,)}
    raw = torch.randint(0, 256, (n, qtype.row_bytes(k)), dtype=torch.uint8, device=DEVICE)
    blocks = raw.view(-1, qtype.type_size)
    for at in fp16_at.get(qtype, (0,)):
        scale = (torch.rand(blocks.shape[0], device=DEVICE) * 0.02 - 0.005).half()
        blocks[:, at : at + 2] = scale.view(torch.uint8).view(-1, 2)
    return raw


def _block_quant_matmul_case(dtype: torch.dtype, qtype, m: int, n: int, k: int) -> Case:
    """Triton over the raw blocks vs the reference (ggml_quants.dequantize, then an fp32 product); the torch
    column times cuBLAS on the weight dequantized to x's dtype beforehand (what dequantizing at load would run)."""
    from sprig.kernels import ggml_quants, triton_block_quant

    m, n = _n(m), _n(n)  # K stays: it must be whole blocks
    raw = _random_blocks(qtype, n, k)
    w32 = ggml_quants.dequantize(raw, qtype, k)
    dense = w32.to(dtype)
    x = torch.randn(m, k, dtype=dtype, device=DEVICE)

    def check() -> float:
        return _err(triton_block_quant.block_quant_matmul(x, raw, qtype), x.float() @ w32.T)

    moved = raw.numel() + (m * k + m * n) * x.element_size()
    return Case(f"bq_matmul {qtype.name}", f"M={m} N={n} K={k}", dtype, lambda: torch.nn.functional.linear(x, dense),
                lambda: triton_block_quant.block_quant_matmul(x, raw, qtype), check, moved, 2.0 * m * n * k)  # fmt: skip


def _block_quant_rows_case(dtype: torch.dtype) -> Case:
    """The embedding lookup: bitwise against the reference; the torch column times F.embedding on a dense table."""
    from sprig.kernels import ggml_quants, triton_block_quant
    from sprig.kernels.ggml_quants import GGMLType

    vocab, k, count = _n(SMOLLM2_VOCAB), 576, _n(4096)
    raw = _random_blocks(GGMLType.Q8_0, vocab, k)
    table = ggml_quants.dequantize(raw, GGMLType.Q8_0, k).to(dtype)
    ids = torch.randint(0, vocab, (count,), device=DEVICE)

    def check() -> float:
        same = torch.equal(triton_block_quant.block_quant_rows(raw, ids, GGMLType.Q8_0, dtype), table[ids])
        return 0.0 if same else float("inf")

    moved = count * (GGMLType.Q8_0.row_bytes(k) + k * table.element_size() + 8)
    return Case("bq_rows Q8_0", f"{count} of {vocab}x{k}", dtype, lambda: torch.nn.functional.embedding(ids, table),
                lambda: triton_block_quant.block_quant_rows(raw, ids, GGMLType.Q8_0, dtype), check, moved)  # fmt: skip


def block_quant_builders(dtype: torch.dtype) -> list[Callable[[], list[Case]]]:
    """SmolLM2's Q4_1 linears at decode (M = 1) and prefill (M = 512), the GEMV's and GEMM's smallest tiles
    (M = 8, 16), its Q8_0 LM head and embedding lookup, and every type on the down projection."""
    from sprig.kernels.ggml_quants import GGMLType
    from sprig.kernels.triton_block_quant import SUPPORTED_TYPES

    cases = [(GGMLType.Q4_1, m, n, k) for n, k in SMOLLM2_LINEARS for m in (1, 512)]
    cases += [(GGMLType.Q4_1, m, 1536, 576) for m in (8, 16)]
    cases += [(GGMLType.Q8_0, m, SMOLLM2_VOCAB, 576) for m in (1, 512)]
    cases += [(t, m, 576, 1536) for t in SUPPORTED_TYPES if t is not GGMLType.Q4_1 for m in (1, 512)]
    return [(lambda c=c: [_block_quant_matmul_case(dtype, *c)]) for c in cases] + [
        lambda: [_block_quant_rows_case(dtype)]
    ]


def case_builders(dtype: torch.dtype) -> list[Callable[[], list[Case]]]:
    """Cheap closures that allocate each case's tensors only when it runs (and free them after)."""
    return [
        lambda: _norm_cases(dtype),
        lambda: [_rope_case(dtype)],
        lambda: [_silu_case(dtype)],
        lambda: [_bitmask_case(dtype)],
        lambda: [_store_kv_case(dtype)],
        lambda: [_attention_case("decode", dtype, [1] * 256, [2047] * 256)],
        lambda: [
            _attention_case(
                "decode ragged", dtype, [1] * 64, [int(x) for x in torch.randint(100, 8000, (64,))]
            )
        ],
        lambda: [_attention_case("decode long", dtype, [1] * 4, [32767] * 4)],
        lambda: [_attention_case("prefill", dtype, [2048] * 4, [0] * 4)],
        lambda: [_attention_case("extend+prefix", dtype, [512, 1024, 37, 900], [1500, 4000, 8191, 0])],
        *block_quant_builders(dtype),
    ]


# --------------------------------------------------------------------------------------------- report


def run(dtypes: list[torch.dtype], budget_s: float, block_quant_only: bool = False) -> int:
    """Run every case (or the GGML block-quant ones) within the budget, print the table; the number of failed
    comparisons."""
    flush = _flush_buffer()
    bw = peak_bandwidth(flush)
    print(f"{torch.cuda.get_device_name()}: measured peak bandwidth {bw / 1e12:.2f} TB/s\n")
    header = (
        f"{'kernel':22} {'shape':32} {'dtype':9} {'rel err':>9} {'ok':>3} {'torch ms':>9} {'triton ms':>9} "
    )
    print(header + f"{'speedup':>7} {'bound ms':>8} {'%bw':>5} {'TFLOP/s':>7}")
    deadline, failures = time.monotonic() + budget_s, 0
    for dtype in dtypes:
        for build in block_quant_builders(dtype) if block_quant_only else case_builders(dtype):
            if time.monotonic() > deadline:
                print(f"budget of {budget_s:.0f}s spent: skipping the remaining cases")
                return failures
            for case in build():
                failures += _report(case, bw, flush)
            torch.cuda.empty_cache()
    return failures


def _report(case: Case, bw: float, flush: torch.Tensor) -> int:
    """Check and time one case, print its row; 1 if the comparison failed."""
    err = case.check()
    ok = err <= TOL[case.dtype] * (1 if case.flops == 0 else 2)
    ref_ms, tri_ms = time_ms(case.ref, flush), time_ms(case.tri, flush)
    bound_ms = case.bytes_moved / bw * 1e3
    tflops = f"{case.flops / (tri_ms * 1e-3) / 1e12:7.1f}" if case.flops else ""
    dtype = str(case.dtype).removeprefix("torch.")
    print(f"{case.name:22} {case.shape:32} {dtype:9} {err:9.2e} {'yes' if ok else 'NO':>3} {ref_ms:9.3f} "
          f"{tri_ms:9.3f} {ref_ms / tri_ms:6.2f}x {bound_ms:8.3f} {100 * bound_ms / tri_ms:4.0f}% {tflops}",
          flush=True)  # fmt: skip
    return 0 if ok else 1


def engine_check(model: str) -> None:
    """The overlap schedule and pipeline parallelism on CUDA, with the CPU benchmarks' measurements."""
    import overlap_bench
    import pp_bench

    print(f"{'C':>4} {'mode':>8} {'tok/s':>8} {'gap us':>8} {'fwd ms':>8}")
    for conc in (16, 64):
        for overlap in (False, True):
            r = overlap_bench.measure(model, 1, conc, overlap, seed=conc, device="cuda")
            print(f"{conc:>4} {'overlap' if overlap else 'serial':>8} {r['tok_s']:>8.1f} {r['gap_us']:>8.0f} "
                  f"{r['forward_ms']:>8.2f}")
    if torch.cuda.device_count() < 2:
        print("pipeline parallel: skipped (each stage needs its own GPU; 1 visible)")
        return
    args = argparse.Namespace(dtype="bfloat16", requests=64, concurrency=16, new_tokens=64)
    for pp in (1, 2):
        r = pp_bench.run(model, pp, pp == 1, args, device="cuda")
        print(f"pp {pp}: {r['output_tok_s']:.0f} tok/s, TPOT {r['tpot_ms_median']:.2f} ms, "
              f"p2p {r['comm_ms_per_step']:.3f} ms/step")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, refuse politely without CUDA, run the check; the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="fp16,bf16", help="comma-separated: fp16, bf16, fp32")
    parser.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting cases after this many seconds"
    )
    parser.add_argument("--engine", action="store_true", help="the engine measurements instead of the kernels")
    parser.add_argument("--block-quant", action="store_true",
                        help="only the GGML block-quant matmul and lookup at SmolLM2's shapes")  # fmt: skip
    parser.add_argument("--model", default="llama-100m", help="checkpoint recipe for --engine")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine; run it on a GPU. (On CPU the Triton kernels are "
              "checked by tests/test_triton_*.py under TRITON_INTERPRET=1.)", file=sys.stderr)  # fmt: skip
        return 2
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("gpu_check: unset TRITON_INTERPRET to time compiled kernels", file=sys.stderr)
        return 2
    try:
        import triton  # noqa: F401
    except ImportError:
        print("gpu_check: triton is not installed: pip install 'sprig[gpu]'", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    if args.engine:
        engine_check(args.model)
        return 0
    failures = run([DTYPES[name.strip()] for name in args.dtypes.split(",")], args.budget_s, args.block_quant)
    print(f"\n{'all comparisons pass' if failures == 0 else f'{failures} comparison(s) FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

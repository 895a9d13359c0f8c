"""A quantized KV cache (`--kv-cache-dtype int8|fp8_e4m3|fp8_e5m2`): bytes, kernels, pool size and accuracy.

Accuracy against fp32 transformers, 64 positions (16 by prefill, then 48 decode steps, so both the extend and the
decode attention read the codes), measured on tiny-llama / tiny-qwen2 with the default backend (C kernels):
  rel. max error  fp32 model: int8 0.029-0.034, fp8_e4m3 0.142-0.240, fp8_e5m2 0.334-0.359
                  bf16 model: int8 0.063-0.082, fp8_e4m3 0.191-0.219, fp8_e5m2 0.345-0.482 (bf16 KV: 0.032-0.063)
  top-1 agreement fp32 model: int8 0.953-0.969, fp8_e4m3 0.828-0.859, fp8_e5m2 0.703-0.750
                  bf16 model: int8 0.922-0.938, fp8_e4m3 0.797-0.844, fp8_e5m2 0.641-0.766
(fp8 with keys rotated, `kv_quant.rotates_keys`: random weights have no outlier channels, so the rotation moves these
figures either way, 0.142-0.398 and 0.154-0.369 before it; its gain shows on the real model, below.)
Greedy 32-token continuations of a bf16 model, each step fed the bf16 run's token (8 prompts): agreement with the
bf16-KV run's tokens int8 0.945-0.969, fp8_e4m3 0.828-0.891, fp8_e5m2 0.688-0.793 (tiny-llama, tiny-qwen2,
tiny-qwen3). These random-weight checkpoints have small logit margins: an fp32 model agrees with the bf16 one on
only 0.94-0.98 of top-1s, and free-running continuations drift apart after the first flip whatever the precision.
The bounds leave ~1.3x headroom on the error and a few points on the agreements.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from sprig.kernels import attention as ref
from sprig.kernels import cpu_elementwise, cpu_native, hadamard
from sprig.kernels.kv_quant import QMAX, SCALE_DTYPE, KVCacheDtype, dequantize_kv, quantize_kv, rotates_keys
from sprig.runtime.config import KV_CACHE_DTYPES, EngineConfig
from sprig.runtime.model import kv_pool
from sprig.runtime.model.checkpoints import RECIPES
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.kv_pool import KVPool, PoolSize, bytes_per_token, choose_pool_size
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

KV_DTYPES = [torch.int8, torch.float8_e4m3fn, torch.float8_e5m2]
ACCURACY = {  # (model dtype, kv dtype): max relative error, min top-1 agreement
    ("float32", "int8"): (0.05, 0.9), ("float32", "fp8_e4m3"): (0.31, 0.75), ("float32", "fp8_e5m2"): (0.5, 0.65),
    ("bfloat16", "int8"): (0.11, 0.88), ("bfloat16", "fp8_e4m3"): (0.29, 0.75),
    ("bfloat16", "fp8_e5m2"): (0.62, 0.58),
}
GREEDY_AGREEMENT = {"int8": 0.9, "fp8_e4m3": 0.78, "fp8_e5m2": 0.62}


def _vector_lib():
    return cpu_native.load_library()


def _generic_lib():
    """The C sources built without AVX-512: the portable path, checked on this machine too."""
    return cpu_native.load_library(tuple(f for f in cpu_native.FLAGS if f != "-march=native") + ("-mno-avx512f",))


# --------------------------------------------------------------------------------------------- the codes


@pytest.mark.parametrize("dtype", KV_DTYPES)
def test_codes_round_trip_within_half_a_step_of_each_rows_scale(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, 32, generator=g) * torch.logspace(-4, 4, 64).view(-1, 1, 1)
    x[3] = 0.0  # an all-zero row keeps zero codes
    codes, scale = quantize_kv(x, dtype)
    assert codes.dtype == dtype and scale.dtype == SCALE_DTYPE and scale.shape == (64, 4)
    back = dequantize_kv(codes, scale, torch.float32)
    assert torch.equal(back[3], torch.zeros_like(back[3]))
    assert codes.float().abs().max() <= QMAX[dtype]
    amax = x.abs().amax(-1, keepdim=True)
    # int8: half a step of scale; fp8: half a mantissa step relative to the value (plus the subnormal floor)
    bound = amax / 127 * 0.51 if dtype == torch.int8 else x.abs() * {torch.float8_e4m3fn: 2**-4,
                                                                     torch.float8_e5m2: 2**-3}[dtype] + amax * 1e-4
    assert bool(((back - x).abs() <= bound * 1.02).all())


@pytest.mark.parametrize("lib_kind", ["vector", "generic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_c_store_writes_the_bytes_torch_writes(lib_kind, dtype, kv_dtype, monkeypatch):
    lib = _vector_lib() if lib_kind == "vector" else _generic_lib()
    monkeypatch.setattr(cpu_elementwise, "native_kernels", lambda: lib)
    g = torch.Generator().manual_seed(1)
    qkv = (torch.randn(37, 3, 4, 64, generator=g) * torch.logspace(-3, 3, 37).view(-1, 1, 1, 1)).to(dtype)
    k, v = qkv[:, 1], qkv[:, 2]  # strided views, as the fused projection gives them
    slots = torch.randperm(80, generator=g)[:37]

    def pool() -> tuple[torch.Tensor, ...]:
        return (torch.zeros(80, 4, 64, dtype=torch.uint8).view(kv_dtype),
                torch.zeros(80, 4, 64, dtype=torch.uint8).view(kv_dtype),
                torch.zeros(80, 4, dtype=SCALE_DTYPE), torch.zeros(80, 4, dtype=SCALE_DTYPE))

    want, got = pool(), pool()
    ref.store_kv(want[0], want[1], slots, k, v, want[2], want[3])
    calls = []
    monkeypatch.setattr(cpu_elementwise.torch_attention, "store_kv", lambda *a: calls.append(a))
    cpu_elementwise.store_kv(got[0], got[1], slots, k, v, got[2], got[3])
    assert not calls  # the C kernel took it
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b)


def test_a_quantized_cache_without_scales_is_an_error():
    cache = torch.zeros(4, 1, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match="k_scale and v_scale"):
        ref.store_kv(cache, cache.clone(), torch.arange(2), torch.ones(2, 1, 8), torch.ones(2, 1, 8))


# --------------------------------------------------------------------------------------------- fp8 keys' rotation


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    return h / n**0.5


@pytest.mark.parametrize("d", [64, 128, 80, 7])
def test_the_rotation_is_the_orthonormal_hadamard_matrix_blockwise(d):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 3, d, generator=g)
    y = x.clone()
    hadamard.hadamard_rotate_(y)
    block = hadamard.hadamard_block(d)
    assert block == {64: 64, 128: 128, 80: 16, 7: 1}[d]
    want = (x.double().reshape(5, 3, d // block, block) @ _sylvester(block)).reshape(x.shape)
    torch.testing.assert_close(y.double(), want, atol=1e-5, rtol=1e-5)
    q = torch.randn(5, 3, d, generator=g)
    dots = (q * x).sum(-1)
    hadamard.hadamard_rotate_(q)
    torch.testing.assert_close((q * y).sum(-1), dots, atol=1e-4, rtol=1e-4)  # q H · k H = q · k


@pytest.mark.parametrize("lib_kind", ["vector", "generic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 80])
def test_the_c_rotation_gives_the_bits_torch_gives(lib_kind, dtype, d, monkeypatch):
    lib = _vector_lib() if lib_kind == "vector" else _generic_lib()
    monkeypatch.setattr(cpu_elementwise, "native_kernels", lambda: lib)
    g = torch.Generator().manual_seed(4)
    qkv = (torch.randn(37, 9 + 2 * 3, d, generator=g) * torch.logspace(-2, 2, d)).to(dtype)
    want, got = qkv.clone(), qkv.clone()
    hadamard.hadamard_rotate_(want[:, :9])  # strided views, as rope leaves q and k in the fused projection
    calls = []
    monkeypatch.setattr(cpu_elementwise.hadamard, "hadamard_rotate_", lambda x: calls.append(x))
    cpu_elementwise.hadamard_rotate_(got[:, :9])
    assert not calls  # the C kernel took it
    assert torch.equal(want, got)


def test_only_fp8_pools_rotate_keys():
    assert [rotates_keys(t) for t in (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.bfloat16)] == [
        True, True, False, False]


# --------------------------------------------------------------------------------------------- attention


def _decode_case(seed: int, dtype: torch.dtype, kv_dtype: torch.dtype, lens: list[int], hq: int, hkv: int, d: int,
                 page_size: int):
    g = torch.Generator().manual_seed(seed)
    n_pages = 4 + sum(-(-n // page_size) for n in lens)
    k_codes, k_scale = quantize_kv(torch.randn(n_pages * page_size, hkv, d, generator=g) * 3, kv_dtype)
    v_codes, v_scale = quantize_kv(torch.randn(n_pages * page_size, hkv, d, generator=g), kv_dtype)
    free = (torch.randperm(n_pages - 1, generator=g) + 1).tolist()
    tables = [torch.tensor([free.pop() for _ in range(-(-n // page_size))]) for n in lens]
    meta = ref.AttentionMetadata.build(page_size, [1] * len(lens), [n - 1 for n in lens], tables,
                                       split_shared_prefixes=False)
    q = torch.randn(len(lens), hq, d, generator=g).to(dtype)
    return q, (k_codes, v_codes, k_scale, v_scale), meta


@pytest.mark.parametrize("lib_kind", ["vector", "generic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize(("hq", "hkv", "d"), [(12, 4, 64), (8, 2, 128), (6, 2, 80)])
def test_c_decode_over_codes_matches_the_dequantized_reference(lib_kind, dtype, kv_dtype, hq, hkv, d):
    lib = _vector_lib() if lib_kind == "vector" else _generic_lib()
    lens = [1, 7, 16, 17, 64, 65, 130, 333]  # inside, at and across page and 64-key chunk borders
    q, (kc, vc, ks, vs), meta = _decode_case(0, dtype, kv_dtype, lens, hq, hkv, d, 16)
    scale = d**-0.5
    out = cpu_native.paged_decode_attention(q, kc, vc, meta.decode_pages, meta.decode_lens, 16, scale, lib=lib,
                                            k_scale=ks, v_scale=vs)
    assert out is not None and out.dtype == dtype
    plain_k, plain_v = dequantize_kv(kc, ks, torch.float32), dequantize_kv(vc, vs, torch.float32)
    want = ref.decode_attention(q.float(), plain_k, plain_v, meta, scale)
    tol = 2e-5 if dtype == torch.float32 else 1.6e-2
    torch.testing.assert_close(out.float(), want, atol=tol, rtol=tol)
    # the torch reference reads the codes to the same result
    torch.testing.assert_close(ref.decode_attention(q.float(), kc, vc, meta, scale, ks, vs), want)


@pytest.mark.skipif(not cpu_native.vec_attention_available(), reason="the vector extend kernel needs AVX512_BF16")
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize(("hq", "hkv", "d"), [(12, 4, 64), (8, 2, 128)])
def test_c_extend_over_codes_matches_the_torch_path(kv_dtype, hq, hkv, d):
    """Prefills and extends after cached prefixes over a quantized pool: the C kernel dequantizes each code to bf16
    as the torch path does, so the two differ only by the kernel's bf16 softmax weights (1.6e-2 as for bf16)."""
    g = torch.Generator().manual_seed(5)
    page, ext, pre = 16, [3, 37, 130, 1, 64], [0, 40, 96, 300, 0]
    tables = [torch.randperm(200, generator=g)[: -(-(e + p) // page)] + 1 for e, p in zip(ext, pre, strict=True)]
    kc, ks = quantize_kv(torch.randn(201 * page, hkv, d, generator=g), kv_dtype)
    vc, vs = quantize_kv(torch.randn(201 * page, hkv, d, generator=g), kv_dtype)
    meta = ref.AttentionMetadata.build(page, ext, pre, tables)
    q = torch.randn(sum(ext), hq, d, generator=g).to(torch.bfloat16)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    assert cpu_native.extend_attention_native(q, kc, vc, meta, d**-0.5, out, k_scale=ks, v_scale=vs)
    want = torch.empty(q.shape, dtype=torch.bfloat16)
    ref.extend_attention(q, q[:, :hkv], q[:, :hkv], kc, vc, meta, d**-0.5, want, ks, vs)  # reads k, v from the pool
    rows = torch.cat([torch.arange(s.token_start, s.token_start + s.extend_len) for s in meta.extends])
    assert len(rows) == sum(ext) - 1  # the one-token row after a prefix is a decode row
    torch.testing.assert_close(out[rows].float(), want[rows].float(), atol=1.6e-2, rtol=1.6e-2)


def test_shared_prefix_groups_read_codes_too():
    """The torch reference's shared-prefix split (log-sum-exp merge) dequantizes like the plain decode path."""
    g = torch.Generator().manual_seed(3)
    kc, ks = quantize_kv(torch.randn(40 * 16, 2, 64, generator=g), torch.int8)
    vc, vs = quantize_kv(torch.randn(40 * 16, 2, 64, generator=g), torch.int8)
    common = list(range(1, 6))
    tables = [torch.tensor(common + [10 + 3 * i, 11 + 3 * i]) for i in range(4)]
    lens = [100, 110, 97, 112]
    meta = ref.AttentionMetadata.build(16, [1] * 4, [n - 1 for n in lens], tables)
    assert meta.decode_split is not None
    q = torch.randn(4, 8, 64, generator=g)
    plain = ref.AttentionMetadata(16, meta.decode_rows, meta.decode_pages, meta.decode_mask, ())
    torch.testing.assert_close(ref.decode_attention(q, kc, vc, meta, 0.125, ks, vs),
                               ref.decode_attention(q, kc, vc, plain, 0.125, ks, vs), atol=2e-5, rtol=2e-5)


# --------------------------------------------------------------------------------------------- pool and flags


@pytest.mark.parametrize("kind", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_the_pool_holds_1_9x_the_tokens_at_the_same_mem_fraction(kind, monkeypatch, tiny_paths):
    r = RECIPES["llama-100m"]  # its attention shapes on a tiny checkpoint's config (the pool reads only those)
    cfg = replace(load_model_config(tiny_paths["tiny-llama"]), num_layers=r.num_layers, num_kv_heads=r.num_kv_heads,
                  head_dim=r.hidden_size // r.num_heads, context_length=4096)
    monkeypatch.setattr(kv_pool, "available_memory_bytes", lambda device: 2 * 2**30)
    kv = KVCacheDtype.parse(kind)
    # 64 codes + a 2-byte scale per head against 128 bytes of bf16
    assert bytes_per_token(cfg, torch.bfloat16, kv) == 2 * 12 * 4 * (64 + 2)
    base = choose_pool_size(cfg, torch.bfloat16, 16, None, 0.3, "cpu")
    quant = choose_pool_size(cfg, torch.bfloat16, 16, None, 0.3, "cpu", kv)
    assert quant.num_tokens >= 1.9 * base.num_tokens
    pool = KVPool(cfg, PoolSize(4, 16), torch.bfloat16, "cpu", kv)
    assert pool.buffer.dtype == kv.storage_dtype(torch.bfloat16)
    assert pool.k_scales is not None and pool.k_scales[0].shape == (5 * 16, 4)
    assert pool.nbytes == 5 * 16 * bytes_per_token(cfg, torch.bfloat16, kv)


def test_kv_cache_dtype_names_and_errors():
    assert {m.value for m in KVCacheDtype} | {"fp8"} == set(KV_CACHE_DTYPES)
    assert KVCacheDtype.parse("fp8") is KVCacheDtype.FP8_E4M3
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int4").validate()
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        KVCacheDtype.parse("fp16")


# --------------------------------------------------------------------------------------------- accuracy


def _logits(path, ids: list[int], dtype: str, kv: str, prefill: int = 16) -> torch.Tensor:
    """Logits at every position: `prefill` tokens in one extend, then one decode step per token."""
    model = load_model(path, dtype)
    pool = KVPool(model.cfg, PoolSize(8, 16), model.dtype, "cpu", KVCacheDtype.parse(kv))
    runner, pages = ModelRunner(model, pool), pool.alloc(4)
    rows = [runner.forward([SeqInput(ids[:prefill], 0, pages, all_logits=True)]).logits.float()]
    rows += [runner.forward([SeqInput(ids[i : i + 1], i, pages)]).logits.float() for i in range(prefill, len(ids))]
    return torch.cat(rows)


@pytest.mark.parametrize(("dtype", "kv"), list(ACCURACY))
def test_error_and_top1_agreement_within_measured_bounds(reference, dtype, kv):
    path, ids, want = reference
    out = _logits(path, ids, dtype, kv)
    max_rel, min_top1 = ACCURACY[(dtype, kv)]
    rel = ((out - want).abs().max() / want.abs().max()).item()
    top1 = (out.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert rel < max_rel and top1 >= min_top1, (rel, top1)


def _greedy(runner: ModelRunner, pool: KVPool, prompt: list[int], n: int, feed: list[int] | None) -> list[int]:
    """n greedy tokens after `prompt`; each step is fed `feed`'s token when given (else its own pick)."""
    pages = pool.alloc(8)
    assert pages is not None
    logits = runner.forward([SeqInput(prompt, 0, pages)]).logits
    picks = []
    for i in range(n):
        picks.append(int(logits[-1].argmax()))
        token = picks[-1] if feed is None else feed[i]
        logits = runner.forward([SeqInput([token], len(prompt) + i, pages)]).logits
    pool.free(pages)
    return picks


@pytest.mark.parametrize("kv", list(GREEDY_AGREEMENT))
def test_greedy_continuations_follow_the_bf16_cache(tiny_paths, kv):
    model = load_model(tiny_paths["tiny-llama"], "bfloat16")
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 2000) for _ in range(rng.randint(8, 64))] for _ in range(8)]
    base_pool = KVPool(model.cfg, PoolSize(16, 16), model.dtype)
    base = [_greedy(ModelRunner(model, base_pool), base_pool, p, 32, None) for p in prompts]
    pool = KVPool(model.cfg, PoolSize(16, 16), model.dtype, "cpu", KVCacheDtype.parse(kv))
    picks = [_greedy(ModelRunner(model, pool), pool, p, 32, b) for p, b in zip(prompts, base, strict=True)]
    agree = sum(a == b for x, y in zip(base, picks, strict=True) for a, b in zip(x, y, strict=True)) / (32 * 8)
    assert agree >= GREEDY_AGREEMENT[kv], agree


# The real SmolLM2-135M (fp32, dequantized GGUF) with a quantized KV cache: perplexity of the short text
# (tests/perplexity_helpers.py, 511 scored tokens: the prefill attention reads the codes it stored) vs the fp32
# cache's 18.833, measured: int8 +0.20 %, fp8_e4m3 +0.38 %, fp8_e5m2 +4.70 % (fp8 keys rotated; +1.78 % and +0.25 %
# unrotated). Over so few tokens e5m2 swings either way: on tokens 3,584-7,679 rotated +2.66 %, unrotated +5.05 %, and
# over the first 2,047 +1.71 % against +3.17 % (the target, held by the test below). Bounds: the targets of
# benchmarks/README.md's quality table (int8 1 %, fp8 3 %), e5m2 here its short-text figure with 1.3x headroom.
@pytest.mark.parametrize(("kv", "bound"), [("int8", 1.0), ("fp8_e4m3", 3.0), ("fp8_e5m2", 6.0)])
def test_smollm2_perplexity_with_a_quantized_kv_cache(smollm2_gguf, smollm2_fp32_perplexity, kv, bound):
    from perplexity_helpers import assert_perplexity_near, short_perplexity

    ppl = short_perplexity(smollm2_gguf, dtype="float32", gguf_dequantize=True, kv_cache_dtype=kv)
    assert_perplexity_near(ppl.value, smollm2_fp32_perplexity, bound)


@pytest.fixture(scope="module")
def smollm2_fp32_long_perplexity(smollm2_gguf) -> float:
    from perplexity_helpers import long_perplexity

    return long_perplexity(smollm2_gguf, dtype="float32", gguf_dequantize=True).value


# The same over the first 2,047 tokens (perplexity_helpers.long_perplexity), where the fp8 caches' loss shows: fp32
# cache 19.9199; e4m3 +0.40 %, e5m2 +1.71 % with fp8 keys rotated (kv_quant.rotates_keys), +1.29 % and +3.17 % before.
# Bounds: the quality table's 3 % target for e5m2, 1 % for e4m3; both fail without the rotation.
@pytest.mark.slow
@pytest.mark.parametrize(("kv", "bound"), [("fp8_e4m3", 1.0), ("fp8_e5m2", 3.0)])
def test_smollm2_perplexity_over_2k_tokens_with_an_fp8_kv_cache(smollm2_gguf, smollm2_fp32_long_perplexity, kv,
                                                                 bound):
    from perplexity_helpers import assert_perplexity_near, long_perplexity

    ppl = long_perplexity(smollm2_gguf, dtype="float32", gguf_dequantize=True, kv_cache_dtype=kv)
    assert_perplexity_near(ppl.value, smollm2_fp32_long_perplexity, bound)

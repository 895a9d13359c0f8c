"""Build and load sprig's C kernels for the CPU (`kernels/csrc/*.c`) with the system C compiler.

The library is compiled on first use with `-O3 -march=native -fopenmp` (a few seconds, one process per source,
with a progress bar on a terminal) into `$SPRIG_CACHE_DIR/kernels` (default `~/.cache/sprig/kernels`), under a
name that hashes the source, the flags, the compiler and the CPU, and loaded with ctypes. It links libgomp by
soname, so inside a process that has imported torch it shares torch's OpenMP runtime and thread pool instead of
starting a second one. When no compiler is found or the build fails, `native_kernels()` returns None once with a
logged reason and callers keep the torch reference path; `SPRIG_NATIVE_KERNELS=0` forces that.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from sprig.kernels.attention import AttentionMetadata, DecodeSplit
from sprig.kernels.attention import decode_attention as torch_decode_attention
from sprig.kernels.attention import extend_attention as torch_extend_attention
from sprig.kernels.attention import paged_attention as torch_paged_attention
from sprig.kernels.kv_quant import KV_DTYPE_CODES, SCALE_DTYPE

log = logging.getLogger(__name__)

SOURCES = tuple(sorted(p.name for p in (Path(__file__).parent / "csrc").glob("*.c")))  # one library of all kernels
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC", "-std=gnu11")
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
# The C signature of every exported kernel: (argument types); each returns int (0 = done, else not handled).
SIGNATURES: dict[str, list] = {
    "paged_decode_attention": [_P] * 6 + [_I] * 6 + [_F, ctypes.c_int, ctypes.c_int] + [_P] * 3 + [_I]
    + [ctypes.c_int, _P, _P],
    "find_groups": [_P, _P, _I, _I, _I, _P, _P, _P, _P],
    # cpu_elementwise.c, wrapped by kernels/cpu_elementwise.py
    "rms_norm": [_P] * 5 + [_I] * 7 + [_F, ctypes.c_int, ctypes.c_int, ctypes.c_int],
    "rotary_embedding": [_P] * 4 + [_I] * 9 + [ctypes.c_int, ctypes.c_int],
    "hadamard_rotate": [_P] + [_I] * 5 + [ctypes.c_int, ctypes.c_int],
    "silu_and_mul": [_P] * 2 + [_I] * 3 + [ctypes.c_int, ctypes.c_int],
    "store_kv": [_P] * 5 + [_I] * 8 + [ctypes.c_int, ctypes.c_int, ctypes.c_int, _P, _P],
    "attend_prefix_groups": [_P] * 4 + [_I] + [_P] * 3 + [_I] * 5 + [_F, _P, _P, ctypes.c_int],
    "extend_attention_amx": [_P, _I, _P, _P, _P, _P, _I, _P, _P, _P] + [_I] * 5 + [_F, ctypes.c_int],
    "extend_attention_vec": [_P, _I, _P, _P, _P, _P, _I, _P, _P, _P] + [_I] * 5 + [_F, ctypes.c_int, ctypes.c_int]
    + [_P] * 2,
    "vec_attention_available": [],
    "argmax_rows": [_P, _I, _I, _I, ctypes.c_int, _P, ctypes.c_int],
    "apply_token_bitmask": [_P, _I, _I, _I, _P, _I, _I, _P, ctypes.c_int],
    "amx_gemm_available": [],
    "amx_linear_bf16": [_P] * 4 + [_I] * 3 + [ctypes.c_int, ctypes.c_int],
    "vec_gemm_best_isa": [],
    "vec_linear_bf16": [_P] * 4 + [_I] * 3 + [ctypes.c_int] * 3,
    "int8_gemm_best_isa": [],
    "int8_linear": [_P, _I] + [_P] * 5 + [_I] * 3 + [ctypes.c_int] * 4,
    # block_quant.c, wrapped by kernels/cpu_block_quant.py
    "bq_best_isa": [],
    "bq_linear": [_P, _I, _P, _I, ctypes.c_int, _P, _P] + [_I] * 3 + [ctypes.c_int] * 4,
    "bq_embedding": [_P, _P, _I, ctypes.c_int, _P] + [_I] * 3 + [ctypes.c_int] * 2,
    # moe.c, wrapped by kernels/cpu_moe.py
    "moe_fused": [_P, _P, _I, _I, _I, ctypes.c_int, _P, _P, _I, _I, ctypes.c_int, ctypes.c_int, _P, ctypes.c_int],
    # lora.c, wrapped by kernels/cpu_lora.py
    "lora_apply": [_P, _I, _P, _I] + [_P] * 5 + [_I] * 7 + [ctypes.c_int] * 4,
    # graph.c, driven by runtime/model/cpu_graph.py
    "graph_kernel_id": [ctypes.c_char_p],
    "graph_call_size": [],
    "run_graph": [_P, _I],
}


def cache_dir() -> Path:
    return Path(os.environ.get("SPRIG_CACHE_DIR", Path.home() / ".cache" / "sprig")) / "kernels"


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU model and its feature flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


def _compiler() -> str | None:
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc) or shutil.which("gcc")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-2000:]}")


def _build(cc: str, flags: tuple[str, ...], out: Path) -> None:
    """Compile each source to an object (in parallel, one bar step each), then link them into `out`."""
    src_dir = Path(__file__).parent / "csrc"
    out.parent.mkdir(parents=True, exist_ok=True)
    compile_flags = [f for f in flags if f != "-shared"]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        objects = [str(Path(tmp) / f"{Path(s).stem}.o") for s in SOURCES]
        tmp_lib = Path(tmp) / out.name
        # Shown only when stderr is a terminal (tqdm's disable=None): silent in tests and in log files.
        with tqdm(total=len(SOURCES) + 1, desc="compiling sprig's CPU kernels (first run)", unit="step",
                  disable=None) as bar, ThreadPoolExecutor(min(len(SOURCES), os.cpu_count() or 1)) as pool:
            jobs = [pool.submit(_run, [cc, *compile_flags, "-c", str(src_dir / s), "-o", o])
                    for s, o in zip(SOURCES, objects, strict=True)]
            for job in as_completed(jobs):
                job.result()
                bar.update()
            _run([cc, *flags, *objects, "-o", str(tmp_lib), "-lm"])
            bar.update()
        os.replace(tmp_lib, out)  # atomic: concurrent builders each install a whole library


def _library_path(cc: str, flags: tuple[str, ...]) -> Path:
    h = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "csrc").glob("*.[ch]")):  # the sources and the headers they include
        h.update(path.read_bytes())
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    h.update("\0".join([*flags, version, _cpu_signature(), platform.machine()]).encode())
    return cache_dir() / f"sprig_kernels_{h.hexdigest()[:16]}.so"


def load_library(flags: tuple[str, ...] = FLAGS) -> ctypes.CDLL:
    """Build (unless cached) and load the kernels compiled with `flags`; raises RuntimeError saying why not."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    try:
        path = _library_path(cc, flags)
        if not path.exists():
            _build(cc, flags, path)
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(str(e)) from e
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = argtypes
    return lib


@functools.cache
def native_kernels() -> ctypes.CDLL | None:
    """The kernel library for this machine, built if needed; None (with the reason logged) when it cannot be."""
    if os.environ.get("SPRIG_NATIVE_KERNELS", "1").lower() in ("0", "false", "off", "no"):
        return None
    try:
        return load_library()
    except RuntimeError as e:
        log.warning("could not build sprig's CPU kernels, using the torch attention path: %s", e)
        return None


KernelCall = Callable[[str, tuple, int], None]
_recording = threading.Lock()  # one recording at a time: it swaps the library's functions


@contextmanager
def recording_calls(lib: ctypes.CDLL, on_call: KernelCall) -> Iterator[None]:
    """While active, every kernel this thread calls through `lib` still runs, and then `on_call(name, args,
    status)` sees it; other threads' calls pass through unseen. Wrappers must look their kernel up on `lib` at
    call time (not keep the function object) for their calls to be seen."""
    thread = threading.get_ident()
    originals = {name: getattr(lib, name) for name in SIGNATURES}

    def recorder(name: str, fn: Callable[..., int]) -> Callable[..., int]:
        def call(*args):
            status = fn(*args)
            if threading.get_ident() == thread:
                on_call(name, args, status)
            return status

        call.__name__ = name
        return call

    with _recording:
        for name, fn in originals.items():
            setattr(lib, name, recorder(name, fn))
        try:
            yield
        finally:
            for name, fn in originals.items():
                setattr(lib, name, fn)


@functools.cache
def amx_available() -> bool:
    """True when the kernel library has the AMX path and this process may use the tiles."""
    lib = native_kernels()
    return lib is not None and lib.amx_gemm_available() == 0


@functools.cache
def vec_attention_available() -> bool:
    """True when the kernel library has the AVX512_BF16 attention paths (grouped decode, prefill / extend)."""
    lib = native_kernels()
    return lib is not None and lib.vec_attention_available() == 0


def amx_enabled() -> bool:
    """AMX is available and not turned off with SPRIG_AMX=0 (read on every call, so tests can set it)."""
    return os.environ.get("SPRIG_AMX", "1") != "0" and amx_available()


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pages: torch.Tensor, lens: torch.Tensor,
    page_size: int, scale: float, lib: ctypes.CDLL | None = None, split: DecodeSplit | None = None,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Attention of one new query token per sequence over its pages; None when the kernel cannot take it.

    q [B, Hq, D]; k_cache/v_cache [slots, Hkv, D] of q's dtype, or int8 / fp8 codes with their bf16 scales
    k_scale/v_scale [slots, Hkv]; pages [B, max_pages] and lens [B] int64 (every len >= 1). Returns [B, Hq, D].
    `lib` defaults to `native_kernels()`. With `split` (rows sharing leading pages), bf16 on AMX attends each
    group's shared pages once for all its rows (the same result).
    """
    lib = lib or native_kernels()
    code = DTYPE_CODES.get(q.dtype)
    quantized = k_scale is not None and v_scale is not None
    kv_code = KV_DTYPE_CODES.get(k_cache.dtype) if quantized else DTYPE_CODES.get(k_cache.dtype)
    if lib is None or code is None or kv_code is None or q.device.type != "cpu" or v_cache.dtype != k_cache.dtype:
        return None
    if not quantized and k_cache.dtype != q.dtype:
        return None
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return None
    scales = [t for t in (k_scale, v_scale) if t is not None and quantized]
    if not all(t.dtype == SCALE_DTYPE and t.is_contiguous() and t.shape == k_cache.shape[:2] for t in scales):
        return None
    q = q.contiguous()
    pages = pages.contiguous()
    lens = lens.contiguous()
    out = torch.empty_like(q)
    b, hq, d = q.shape
    groups = (0, 0, 0, 0) if split is None else (
        split.rows.data_ptr(), split.offsets.data_ptr(), split.shared_pages.data_ptr(), len(split.groups))
    status = lib.paged_decode_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), pages.data_ptr(), lens.data_ptr(),
        b, pages.shape[1], hq, k_cache.shape[1], d, page_size, scale, code, torch.get_num_threads(), *groups,
        kv_code, *([t.data_ptr() for t in scales] if scales else [None, None]))
    return out if status == 0 else None


def decode_attention(
    qd: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """`attention.decode_attention` through the C kernel, or the torch reference where the kernel cannot run."""
    if meta.decode_lens is not None:
        assert meta.decode_pages is not None  # set with the decode lengths
        out = paged_decode_attention(qd, k_cache, v_cache, meta.decode_pages, meta.decode_lens, meta.page_size,
                                     scale, split=meta.decode_split, k_scale=k_scale, v_scale=v_scale)
        if out is not None:
            return out
    return torch_decode_attention(qd, k_cache, v_cache, meta, scale, k_scale, v_scale)


def extend_attention_native(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
    out: torch.Tensor, lib: ctypes.CDLL | None = None, k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> bool:
    """Prefill / extend attention of `meta.extends` in C, written into `out`: on AMX tiles where the CPU has them
    (and SPRIG_AMX is not 0), else on vector units (`vec_extend.c`, where the build has AVX512_BF16). False
    where neither can take it (the caller then computes every extend row): not bf16, head size not 64 or 128,
    metadata without `extend_pages`, a CPU without either path.

    q [T, Hq, D] may be a row-strided view (of the fused qkv projection); out [T, Hq, D] contiguous. A quantized
    pool (int8 / fp8 codes with their bf16 scales k_scale / v_scale [slots, Hkv]) goes to the vector path, which
    dequantizes the codes to bf16 as `kv_quant.dequantize_kv` does.
    """
    lib = lib or native_kernels()
    quantized = k_scale is not None and v_scale is not None
    kv_code = KV_DTYPE_CODES.get(k_cache.dtype) if quantized else DTYPE_CODES.get(k_cache.dtype)
    if (lib is None or meta.extend_pages is None or q.dtype != torch.bfloat16 or kv_code is None
            or (not quantized and k_cache.dtype != q.dtype) or v_cache.dtype != k_cache.dtype
            or q.stride(2) != 1 or q.stride(1) != q.shape[2] or not out.is_contiguous()
            or not (k_cache.is_contiguous() and v_cache.is_contiguous())):
        return False
    scales = [k_scale, v_scale] if k_scale is not None and v_scale is not None else []
    if not all(t.dtype == SCALE_DTYPE and t.is_contiguous() and t.shape == k_cache.shape[:2] for t in scales):
        return False
    pages, layout = meta.extend_pages, meta.extend_layout
    assert layout is not None  # set with extend_pages
    _, hq, d = q.shape
    args = (q.data_ptr(), q.stride(0), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), pages.data_ptr(),
            pages.shape[1], layout[0].data_ptr(), layout[1].data_ptr(), layout[2].data_ptr(), pages.shape[0], hq,
            k_cache.shape[1], d, meta.page_size, scale, torch.get_num_threads())
    if amx_enabled() and not quantized:
        return lib.extend_attention_amx(*args) == 0
    scale_ptrs: list[int | None] = [t.data_ptr() for t in scales] if scales else [None, None]
    return lib.extend_attention_vec(*args, kv_code, *scale_ptrs) == 0


def extend_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    meta: AttentionMetadata, scale: float, out: torch.Tensor, k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """`attention.extend_attention` in C where `extend_attention_native` can, else the torch reference."""
    if meta.extends and not extend_attention_native(q, k_cache, v_cache, meta, scale, out, k_scale=k_scale,
                                                    v_scale=v_scale):
        torch_extend_attention(q, k, v, k_cache, v_cache, meta, scale, out, k_scale, v_scale)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    meta: AttentionMetadata, scale: float, k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None, softcap: float | None = None, window: int | None = None,
) -> torch.Tensor:
    """`attention.paged_attention` with decode rows attended by the C kernel and extends in C where it can (a
    soft-cap or sliding window runs the torch reference: the C kernels have neither yet)."""
    return torch_paged_attention(q, k, v, k_cache, v_cache, meta, scale, decode=decode_attention,
                                 extend=extend_attention, k_scale=k_scale, v_scale=v_scale, softcap=softcap,
                                 window=window)

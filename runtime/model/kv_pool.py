"""The KV pool: K/V tensors for every layer, allocated once, and the single owner of page allocation.

Sliding-window layers (Gemma 2 / 3's interleaved ones, every layer of a Mistral-style model) may keep their K/V in a
second, smaller region with its own pages (`SlidingPoolSpec`), as SGLang's SWA pool does. Pages are numbered in the
full region; each full page maps to the sliding page that holds the sliding layers' K/V of the same tokens, or to the
sliding scratch page once those were released (a page wholly before every window that reads it). A full page and its
sliding page are allocated together; the sliding one may be released early (`drop_sliding`), and both go back
together (`free`). Attention of a sliding layer reads the mapped page table (`sliding_pages`); a released entry reads
the scratch page, which its window masks out. Which sliding pages to release and when is `engine/sliding_kv.py`'s.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from sprig.kernels.kv_quant import SCALE_DTYPE, KVCacheDtype
from sprig.runtime.model import host_memory
from sprig.runtime.model.config import ModelConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSize:
    num_pages: int
    page_size: int

    @property
    def num_tokens(self) -> int:
        return self.num_pages * self.page_size


def page_slots(pages: list[int] | np.ndarray, page_size: int) -> np.ndarray:
    """The slots (int64) of whole pages, in page order."""
    return (np.asarray(pages, dtype=np.int64)[:, None] * page_size + np.arange(page_size)).reshape(-1)


def slot_pages(slots: np.ndarray, page_size: int) -> list[int]:
    """The pages of page-aligned slots (the inverse of `page_slots`)."""
    return (slots[::page_size] // page_size).tolist()


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def bytes_per_token(cfg: ModelConfig, dtype: torch.dtype, kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO,
                    num_layers: int | None = None) -> int:
    """Pool bytes one token takes over all layers (or `num_layers` of them): K and V elements, plus a scale per kv
    head when quantized."""
    per_head = cfg.head_dim * _element_size(kv_cache_dtype.storage_dtype(dtype))
    if kv_cache_dtype.quantized:
        per_head += _element_size(SCALE_DTYPE)
    layers = cfg.num_layers if num_layers is None else num_layers
    return 2 * layers * cfg.num_kv_heads * per_head


@dataclass(frozen=True)
class SlidingPoolSpec:
    """The sliding-window layers' own region: which decoder layers, their (one) window, its usable pages."""

    layers: tuple[int, ...]
    window: int
    num_pages: int

    def __post_init__(self) -> None:
        if self.window < 1 or self.num_pages < 1 or not self.layers:
            raise ValueError("a sliding pool needs a positive window, pages and at least one layer")


def sliding_layers(cfg: ModelConfig) -> tuple[tuple[int, ...], int] | None:
    """The decoder layers with a sliding window and that window; None when no layer slides. Layers with
    different windows share no region: ValueError."""
    windows = cfg.parts.layer_windows
    layers = tuple(i for i, w in enumerate(windows) if w is not None)
    if not layers:
        return None
    sizes = {windows[i] for i in layers}
    if len(sizes) != 1:
        raise ValueError(f"a sliding pool takes one window; the layers have {sorted(sizes)}")  # type: ignore[type-var]
    window = sizes.pop()
    assert window is not None  # the layers were picked for having one
    return layers, window


def sliding_pool_spec(cfg: ModelConfig, full: PoolSize, ratio: float, min_tokens: int) -> SlidingPoolSpec | None:
    """The sliding region for a full pool of `full`: `ratio` of its tokens (SGLang's swa_full_tokens_ratio), at least
    `min_tokens` (what one request's window and prefill chunk need); None when no layer slides."""
    found = sliding_layers(cfg)
    if found is None:
        return None
    tokens = max(int(full.num_tokens * ratio), min_tokens)
    return SlidingPoolSpec(found[0], found[1], -(-tokens // full.page_size))


def available_memory_bytes(device: str) -> int:
    """Free memory on the device the pool will live on (MemAvailable for the CPU)."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


def choose_pool_size(
    cfg: ModelConfig,
    dtype: torch.dtype,
    page_size: int,
    max_total_tokens: int | None,
    mem_fraction: float,
    device: str,
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO,
    sliding_ratio: float | None = None,
) -> PoolSize:
    """Size the pool from an explicit token count, else from a fraction of the device's free memory. With a
    `sliding_ratio` the sliding layers take a region of that share of the tokens (`sliding_pool_spec`), and a token
    costs the full layers' bytes plus that share of the sliding layers'."""
    per_token = float(bytes_per_token(cfg, dtype, kv_cache_dtype))
    found = sliding_layers(cfg) if sliding_ratio is not None else None
    if found is not None:
        assert sliding_ratio is not None  # found only with a ratio
        n_sliding = len(found[0])
        per_token = bytes_per_token(cfg, dtype, kv_cache_dtype, cfg.num_layers - n_sliding) + sliding_ratio * \
            bytes_per_token(cfg, dtype, kv_cache_dtype, n_sliding)
    if max_total_tokens is not None:
        tokens = max_total_tokens
        how = "--max-total-tokens"
    else:
        budget = int(available_memory_bytes(device) * mem_fraction)
        tokens = int(budget // max(per_token, 1.0))
        # A pool beyond what a full batch of max-context requests could use only wastes memory on the CPU.
        tokens = min(tokens, 64 * cfg.context_length)
        how = f"--mem-fraction {mem_fraction}"
    num_pages = max(1, tokens // page_size)
    size = PoolSize(num_pages, page_size)
    gib = size.num_tokens * per_token / 2**30
    logger.info("KV pool: %d tokens (%d pages of %d), %.2f GiB, %s, from %s%s", size.num_tokens, num_pages, page_size,
                gib, kv_cache_dtype.value, how, "" if found is None else f", sliding layers at {sliding_ratio} of it")
    return size


class PageAllocator:
    """A free list of `num_pages` pages handed out lowest first, with a double-free check."""

    def __init__(self, num_pages: int, what: str = "KV pages") -> None:
        self._num_pages = num_pages
        self._what = what  # named in the double-free error
        # A min-heap: a request's pages come out in increasing, mostly adjacent order, so decode attention reads
        # its prompt's K/V as long runs instead of pages scattered over the whole pool.
        self._free: list[int] = list(range(num_pages))
        self._is_free = torch.ones(num_pages, dtype=torch.bool)

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    def alloc(self, num_pages: int) -> list[int] | None:
        """Take `num_pages` pages, or None (and nothing taken) when too few are free."""
        if num_pages > len(self._free):
            return None
        pages = [heapq.heappop(self._free) for _ in range(num_pages)]
        self._is_free[pages] = False
        return pages

    def free(self, pages: list[int] | torch.Tensor) -> None:
        """Return pages; freeing a page twice is a bug and raises."""
        pages = [int(p) for p in pages]
        if not pages:
            return
        if bool(self._is_free[pages].any()) or len(set(pages)) != len(pages):
            raise RuntimeError(f"double free of {self._what}")
        self._is_free[pages] = True
        for p in pages:
            heapq.heappush(self._free, p)

    def reset(self) -> None:
        """Every page free again."""
        self._free = list(range(self._num_pages))
        self._is_free.fill_(True)


def _kv_tensors(num_layers: int, slots: int, cfg: ModelConfig, storage: torch.dtype, quantized: bool, device: str
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """K/V [layers, 2, slots, Hkv, D] in `storage` and, for a quantized cache, its scales [layers, 2, slots, Hkv]."""
    # fp8 tensors cannot be filled by torch on the CPU: zero the bytes, then view them as fp8
    raw = torch.uint8 if storage.itemsize == 1 else storage
    buffer = host_memory.zeros((num_layers, 2, slots, cfg.num_kv_heads, cfg.head_dim), raw, device).view(storage)
    scales = host_memory.zeros((num_layers, 2, slots, cfg.num_kv_heads), SCALE_DTYPE, device) if quantized else None
    return buffer, scales


class SlidingPages(PageAllocator):
    """The sliding region's free list and the map from full pages to sliding pages (its scratch page: none)."""

    def __init__(self, spec: SlidingPoolSpec, num_full_pages: int) -> None:
        super().__init__(spec.num_pages, "sliding KV pages")
        self.spec = spec
        self.window = spec.window
        self.scratch_page = spec.num_pages
        # index num_full_pages is the full scratch page: padding rows of static batches write the sliding scratch
        self.page_of = np.full(num_full_pages + 1, self.scratch_page, dtype=np.int64)

    def reset(self) -> None:
        super().reset()
        self.page_of.fill(self.scratch_page)


class KVPool(PageAllocator):
    """Per-layer K and V caches [num_pages * page_size, Hkv, D] and a free list of pages.

    With a quantized `kv_cache_dtype` the caches hold int8 / fp8 codes and `k_scales` / `v_scales` their bf16
    scales [num_pages * page_size, Hkv] (`kernels/kv_quant.py`); otherwise the scale lists are None. With a
    `sliding` spec its layers' caches live in the sliding region ([sliding pages * page_size, Hkv, D]; see the
    module docstring); `buffer` then holds the full layers' only.
    """

    def __init__(self, cfg: ModelConfig, size: PoolSize, dtype: torch.dtype, device: str = "cpu",
                 kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO, sliding: SlidingPoolSpec | None = None) -> None:
        super().__init__(size.num_pages)
        self.size = size
        self.page_size = size.page_size
        self.kv_cache_dtype = kv_cache_dtype
        # One page beyond the usable ones: padding rows of static (CUDA-graph) batches write there.
        self.scratch_page = size.num_pages
        storage = kv_cache_dtype.storage_dtype(dtype)
        quantized = kv_cache_dtype.quantized
        in_sliding = set(sliding.layers) if sliding is not None else set()
        full_layers = [i for i in range(cfg.num_layers) if i not in in_sliding]
        self.buffer, self.scales = _kv_tensors(len(full_layers), size.num_tokens + size.page_size, cfg, storage,
                                               quantized, device)
        # (buffer, scales, index) of each decoder layer's K/V
        where = {layer: (self.buffer, self.scales, j) for j, layer in enumerate(full_layers)}
        self.sliding: SlidingPages | None = None
        self.sliding_buffer: torch.Tensor | None = None
        self.sliding_scales: torch.Tensor | None = None
        if sliding is not None:
            self.sliding = SlidingPages(sliding, size.num_pages)
            self.sliding_buffer, self.sliding_scales = _kv_tensors(
                len(sliding.layers), (sliding.num_pages + 1) * size.page_size, cfg, storage, quantized, device)
            where |= {layer: (self.sliding_buffer, self.sliding_scales, j) for j, layer in enumerate(sliding.layers)}
        layers = [where[i] for i in range(cfg.num_layers)]
        self.k_caches = [buf[j, 0] for buf, _, j in layers]
        self.v_caches = [buf[j, 1] for buf, _, j in layers]
        self.k_scales: list[torch.Tensor] | None = None
        self.v_scales: list[torch.Tensor] | None = None
        if quantized:
            self.k_scales = [sc[j, 0] for _, sc, j in layers]  # type: ignore[index]
            self.v_scales = [sc[j, 1] for _, sc, j in layers]  # type: ignore[index]

    @property
    def nbytes(self) -> int:
        """Bytes of the K/V tensors and their scales (both regions)."""
        tensors = (self.buffer, self.scales, self.sliding_buffer, self.sliding_scales)
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    @property
    def num_free_tokens(self) -> int:
        return len(self._free) * self.page_size

    # --- pages, with their sliding pages ------------------------------------------------------------------
    def alloc(self, num_pages: int) -> list[int] | None:
        """Take `num_pages` pages, each with a sliding page when there is a sliding region; None (and nothing
        taken) when either region has too few free."""
        sliding = self.sliding
        if sliding is not None and num_pages > sliding.num_free_pages:
            return None
        pages = super().alloc(num_pages)
        if pages is not None and sliding is not None and pages:
            held = sliding.alloc(num_pages)
            assert held is not None  # checked above
            sliding.page_of[pages] = held
        return pages

    def free(self, pages: list[int] | torch.Tensor) -> None:
        """Return pages and their sliding pages; freeing a page twice is a bug and raises."""
        pages = [int(p) for p in pages]
        super().free(pages)
        self.drop_sliding(pages)

    def drop_sliding(self, pages: list[int]) -> None:
        """Release the sliding pages of `pages` (those that still have one): their sliding K/V is gone."""
        sliding = self.sliding
        if sliding is None or not pages:
            return
        mapped = sliding.page_of[pages]
        held = mapped[mapped != sliding.scratch_page]
        if len(held):
            sliding.free(held.tolist())
            sliding.page_of[pages] = sliding.scratch_page

    def has_sliding(self, pages: list[int]) -> np.ndarray:
        """bool per page: whether its sliding K/V is still held (always True without a sliding region)."""
        if self.sliding is None:
            return np.ones(len(pages), dtype=bool)
        return self.sliding.page_of[pages] != self.sliding.scratch_page

    def sliding_table(self, pages: Sequence[int], given: np.ndarray | None = None) -> np.ndarray:
        """A step's page table in the sliding region: the one taken when the step was made (`given`), or `pages`
        mapped now."""
        assert self.sliding is not None  # asked only of a pool with a sliding region
        if given is not None:
            return given
        return self.sliding.page_of[np.asarray(pages, dtype=np.int64)]

    def snapshot_sliding(self, pages: list[int], first: int) -> np.ndarray:
        """The sliding region's page table of `pages` as it is now, the scratch page before page `first` (pages
        no query of the step reads: its windows mask them)."""
        assert self.sliding is not None  # asked only of a pool with a sliding region
        table = np.full(len(pages), self.sliding.scratch_page, dtype=np.int64)
        table[first:] = self.sliding.page_of[np.asarray(pages[first:], dtype=np.int64)]
        return table

    def move_sliding(self, dst: list[int], src: list[int]) -> list[int]:
        """Give each page of `dst` lacking sliding K/V the sliding page of the same tokens' `src` page (same
        positions, same tokens: a cached copy whose sliding part was released takes a fresh one's). Returns the
        `dst` pages that received one."""
        sliding = self.sliding
        if sliding is None or not dst:
            return []
        d, s = np.asarray(dst, dtype=np.int64), np.asarray(src, dtype=np.int64)
        take = (sliding.page_of[d] == sliding.scratch_page) & (sliding.page_of[s] != sliding.scratch_page)
        sliding.page_of[d[take]] = sliding.page_of[s[take]]
        sliding.page_of[s[take]] = sliding.scratch_page
        return d[take].tolist()

    def reset(self) -> None:
        super().reset()
        if self.sliding is not None:
            self.sliding.reset()

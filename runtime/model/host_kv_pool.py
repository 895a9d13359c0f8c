"""The host KV pool: the second tier's pages, in host memory or a memory-mapped file, and the copies to and from
the device pool.

Pages are stored page-major as raw bytes (``[pages, layers, 2, page_size, kv_heads, bytes per head]``, scales
likewise), so one host page is one contiguous run and a quantized pool's int8 / fp8 codes and bf16 scales travel
byte for byte. On CUDA the memory backend is pinned and copies run on a side stream: the copy stream waits for
the forward that wrote the pages, and the next forward waits for the copies, both on the GPU (the host thread
never blocks). On the CPU a copy is a gather and a scatter on the calling thread.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch

from sprig.runtime.model.kv_pool import KVPool, PageAllocator

GB = 10**9  # --hicache-size is in GB, as in SGLang
_file_ids = itertools.count()  # why: several engines in one process each map their own file


class HostBackend(str, Enum):
    """Where host pages live."""

    MEMORY = "memory"  # pinned on CUDA, plain on the CPU
    FILE = "file"  # a memory-mapped file: capacity beyond RAM, paged by the OS


class HostTierUnavailable(RuntimeError):
    """The host tier could not be created; the message says why (the engine then runs without it)."""


@dataclass(frozen=True)
class HostPoolSpec:
    """Size and storage of a host pool."""

    num_pages: int
    backend: HostBackend = HostBackend.MEMORY
    storage_dir: Path | None = None  # the file backend's folder


def host_pool_pages(device: KVPool, size_gb: float, ratio: float) -> int:
    """Pages of the host tier: ``size_gb`` GB when positive, else ``ratio`` times the device pool."""
    if size_gb > 0:
        return max(1, int(size_gb * GB) // page_nbytes(device))
    return max(1, int(device.size.num_pages * ratio))


def page_nbytes(device: KVPool) -> int:
    """Bytes of one page over all layers: K and V codes plus their scales."""
    kv = _paged(device.buffer, device.page_size)
    scales = 0 if device.scales is None else _paged(device.scales, device.page_size)[:, :, 0].numel()
    return kv[:, :, 0].numel() + scales


def _paged(t: torch.Tensor, page_size: int) -> torch.Tensor:
    """A device tensor [layers, 2, slots, ...] as raw bytes [layers, 2, pages, page_size, ...] (a view)."""
    raw = t.view(torch.uint8)  # the last dim (head_dim, or kv heads for scales) becomes its bytes
    layers, two, slots = raw.shape[:3]
    return raw.view(layers, two, slots // page_size, page_size, *raw.shape[3:])


class HostKVPool(PageAllocator):
    """Host copies of device KV pages, allocated page by page (lowest first), freed by the tree's owner."""

    def __init__(self, device: KVPool, spec: HostPoolSpec) -> None:
        if spec.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {spec.num_pages}")
        super().__init__(spec.num_pages, "host KV pages")
        self.spec = spec
        self.page_size = device.page_size
        self.on_cuda = device.buffer.device.type == "cuda"
        self._device_kv = _paged(device.buffer, self.page_size)
        self._device_scales = None if device.scales is None else _paged(device.scales, self.page_size)
        shapes = [(spec.num_pages, *self._page_shape(self._device_kv))]
        if self._device_scales is not None:
            shapes.append((spec.num_pages, *self._page_shape(self._device_scales)))
        self._host = _allocate(shapes, spec, pin=self.on_cuda)
        self._stream = torch.cuda.Stream(device.buffer.device) if self.on_cuda else None

    @staticmethod
    def _page_shape(paged: torch.Tensor) -> tuple[int, ...]:
        layers, two, _, page_size, *rest = paged.shape
        return (layers, two, page_size, *rest)

    @property
    def num_pages(self) -> int:
        return self.spec.num_pages

    @property
    def page_nbytes(self) -> int:
        return sum(t[0].numel() for t in self._host)

    @property
    def nbytes(self) -> int:
        return self.page_nbytes * self.spec.num_pages

    def save(self, device_pages: list[int], host_pages: list[int]) -> None:
        """Copy device pages into host pages (device → host)."""
        pairs = zip(self._device_tensors(), self._host, strict=True)
        if self._stream is None:
            dev_idx, host_idx = torch.tensor(device_pages), torch.tensor(host_pages)
            for dev, host in pairs:
                host.index_copy_(0, host_idx, dev.index_select(2, dev_idx).movedim(2, 0))
            return
        with self._on_copy_stream():
            dev_idx = torch.tensor(device_pages, device=self._device_kv.device)
            for dev, host in pairs:
                staged = dev.index_select(2, dev_idx).movedim(2, 0).contiguous()
                for j, page in enumerate(host_pages):
                    host[page].copy_(staged[j], non_blocking=True)

    def load(self, host_pages: list[int], device_pages: list[int]) -> None:
        """Copy host pages into device pages (host → device)."""
        pairs = zip(self._device_tensors(), self._host, strict=True)
        if self._stream is None:
            dev_idx, host_idx = torch.tensor(device_pages), torch.tensor(host_pages)
            for dev, host in pairs:
                dev.index_copy_(2, dev_idx, host.index_select(0, host_idx).movedim(0, 2))
            return
        with self._on_copy_stream():
            dev_idx = torch.tensor(device_pages, device=self._device_kv.device)
            for dev, host in pairs:
                staged = torch.empty((len(host_pages), *host.shape[1:]), dtype=host.dtype, device=dev.device)
                for j, page in enumerate(host_pages):
                    staged[j].copy_(host[page], non_blocking=True)
                dev.index_copy_(2, dev_idx, staged.movedim(0, 2))

    @contextlib.contextmanager
    def _on_copy_stream(self) -> Iterator[None]:
        """Enqueue copies on the side stream, ordered on the GPU after the work before them and before the work
        after them: the forward that wrote the pages, and the next forward that reads loaded pages or reuses
        offloaded slots. The host thread never waits."""
        assert self._stream is not None
        compute = torch.cuda.current_stream(self._stream.device)  # the pool's device, whatever is current
        self._stream.wait_stream(compute)
        with torch.cuda.stream(self._stream):
            yield
        compute.wait_stream(self._stream)

    def _device_tensors(self) -> list[torch.Tensor]:
        return [self._device_kv] if self._device_scales is None else [self._device_kv, self._device_scales]


def _allocate(shapes: list[tuple[int, ...]], spec: HostPoolSpec, pin: bool) -> list[torch.Tensor]:
    """One uint8 tensor per shape: in (pinned) memory, or carved out of one memory-mapped file."""
    sizes = [math.prod(s) for s in shapes]
    if spec.backend is HostBackend.MEMORY:
        return [torch.empty(s, dtype=torch.uint8, pin_memory=pin) for s in shapes]
    flat = _map_file(spec.storage_dir or Path("."), sum(sizes))
    out, offset = [], 0
    for shape, n in zip(shapes, sizes, strict=True):
        out.append(flat[offset : offset + n].view(shape))
        offset += n
    return out


def _map_file(folder: Path, nbytes: int) -> torch.Tensor:
    """A fresh file of ``nbytes`` reserved blocks, memory-mapped, then unlinked (its space goes with the process)."""
    path = folder / f"sprig-hicache-{os.getpid()}-{next(_file_ids)}.kv"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
        if nbytes > free:
            raise HostTierUnavailable(f"disk full: the host tier needs {nbytes} bytes, {free} are free in {folder}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise HostTierUnavailable(f"cannot create the cache file {path}: {e.strerror or e}") from e
    try:
        os.posix_fallocate(fd, 0, nbytes)  # reserve now: a full disk later would be a SIGBUS on a mapped page
        return torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
    except (OSError, RuntimeError) as e:  # from_file reports mmap failures as RuntimeError
        raise HostTierUnavailable(f"cannot reserve {nbytes} bytes in {path}: {getattr(e, 'strerror', None) or e}") from e
    finally:
        os.close(fd)
        path.unlink()  # the mapping keeps the blocks; the name goes now, so no file outlives the process

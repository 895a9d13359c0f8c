"""Decode steps replayed on the CPU from recorded C-kernel calls: what a CUDA graph is to a GPU.

At batch 1 a small model's decode step spends about as long in Python as in its weight reads: each layer runs ten
kernel wrappers (input checks, output allocations, ctypes argument conversion) whose kernels take microseconds.
`capture` runs one forward and records every call it makes into sprig's C kernels, and turns the few torch ops a
forward makes besides (the embedding lookup, row gathers, `.contiguous()` copies) into the two helpers of
`kernels/csrc/graph.c`; `CpuGraph.replay` then runs the whole list with one call into C.

Recorded calls hold raw pointers, so every tensor they touch must stay where it is: the graph keeps the tensors
created during the capture alive, and the caller keeps its inputs in static buffers (`runner.DecodeGraphRunner`). Any
other torch op during the capture -- a wrapper falling back to its torch reference, or a `.item()` that would
freeze a data-dependent branch -- aborts it with `GraphCaptureError`, which names the op; the step then runs
eagerly.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from sprig.kernels.cpu_native import SIGNATURES, native_kernels, recording_calls

aten = torch.ops.aten
T = TypeVar("T")
GRAPH_INTS = 24  # graph.c's GraphCall: integer and pointer arguments per call
GRAPH_FLOATS = 2  # float arguments per call
COPY_DIMS = 4  # graph_copy's largest source rank
HELPERS = ("graph_copy", "graph_gather")  # graph.c's stand-ins for the torch ops a forward makes


class GraphCall(ctypes.Structure):
    """One recorded call, laid out as graph.c's GraphCall."""

    _fields_ = [("kernel", ctypes.c_int64), ("i", ctypes.c_int64 * GRAPH_INTS), ("f", ctypes.c_double * GRAPH_FLOATS)]


class GraphCaptureError(RuntimeError):
    """A forward did something a CPU graph cannot replay (the message says what)."""


# Ops that only describe memory (new buffers, views): nothing to replay.
_METADATA_OPS = frozenset({
    aten.empty.memory_format, aten.empty_like.default, aten.empty_strided.default, aten.view.default,
    aten._unsafe_view.default, aten.split_with_sizes.default, aten.split.Tensor, aten.select.int, aten.slice.Tensor,
    aten.unsqueeze.default, aten.squeeze.dim, aten.transpose.int, aten.permute.default, aten.t.default,
    aten.as_strided.default, aten.expand.default, aten.detach.default, aten.alias.default,
})
# Ops that return a view when they can and a contiguous copy otherwise: the copy is replayed.
_COPY_OPS = frozenset({aten.reshape.default, aten.contiguous.default, aten.clone.default})
_GATHER_OPS = frozenset({aten.embedding.default, aten.index_select.default})


@dataclass
class CpuGraph:
    """A recorded forward: `replay()` reruns its kernel calls on whatever the static inputs hold now."""

    calls: ctypes.Array = field(repr=False)  # of GraphCall
    names: list[str] = field(repr=False)  # the kernel of each call, for errors
    keep: list[torch.Tensor] = field(repr=False)  # the tensors created during the capture, which the calls use

    def replay(self) -> None:
        lib = native_kernels()
        assert lib is not None  # a graph was captured, so the library is there
        failed = lib.run_graph(self.calls, len(self.names))
        if failed:
            raise RuntimeError(f"CPU graph call {failed - 1} ({self.names[failed - 1]}) failed on replay")


class _Recorder(TorchDispatchMode):
    """Collects the kernel calls of a forward in order; refuses the torch ops it cannot turn into one."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        super().__init__()
        # Looked up now: while recording, the library's functions are the recording wrappers.
        self.kernel_ids = {name: lib.graph_kernel_id(name.encode()) for name in [*SIGNATURES, *HELPERS]}
        self.calls: list[GraphCall] = []
        self.names: list[str] = []
        self.keep: list[torch.Tensor] = []
        self.failure: str | None = None

    def add(self, name: str, ints: Sequence[int], floats: Sequence[float] = ()) -> None:
        kernel = self.kernel_ids[name]
        if kernel < 0:
            raise GraphCaptureError(f"the C kernel {name} cannot be replayed from a graph")
        if len(ints) > GRAPH_INTS or len(floats) > GRAPH_FLOATS:
            raise GraphCaptureError(f"{name} takes more arguments than a graph call holds")
        call = GraphCall(kernel)
        call.i[: len(ints)] = ints
        call.f[: len(floats)] = list(floats)
        self.calls.append(call)
        self.names.append(name)

    def on_kernel(self, name: str, args: tuple, status: int) -> None:
        """A C kernel ran: record it with its arguments split into integers (pointers too) and floats."""
        if status != 0:
            self.failure = self.failure or f"the C kernel {name} declined its input (status {status})"
            return
        ints: list[int] = []
        floats: list[float] = []
        for value, kind in zip(args, SIGNATURES[name], strict=True):
            if kind is ctypes.c_float:
                floats.append(float(value))
            else:
                ints.append(0 if value is None else int(value))
        self.add(name, ints, floats)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.keep.extend(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        if func in _METADATA_OPS:
            return out
        if func in _COPY_OPS:
            if out.untyped_storage().data_ptr() != args[0].untyped_storage().data_ptr():
                self._copy(args[0], out)
            return out
        if func in _GATHER_OPS:
            table, index = (args[0], args[1]) if func is aten.embedding.default else (args[0], args[2])
            if func is aten.index_select.default and args[1] != 0:
                raise GraphCaptureError("index_select along a dim other than 0 cannot be replayed")
            self._gather(table, index, out)
            return out
        raise GraphCaptureError(f"torch op {func} ran during a CPU graph capture (only C kernels are replayed)")

    def _copy(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        if src.dim() > COPY_DIMS or not dst.is_contiguous() or src.device.type != "cpu":
            raise GraphCaptureError(f"a copy of a {src.dim()}-d tensor cannot be replayed")
        pad = COPY_DIMS - src.dim()
        sizes, strides = [1] * pad + list(src.shape), [0] * pad + list(src.stride())
        self.add("graph_copy", [dst.data_ptr(), src.data_ptr(), *sizes, *strides, src.element_size()])

    def _gather(self, table: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> None:
        if (table.dim() != 2 or table.stride(1) != 1 or index.dim() != 1 or not index.is_contiguous()
                or index.dtype != torch.int64 or not out.is_contiguous()):
            raise GraphCaptureError("only row gathers of a 2-d table by a 1-d int64 index can be replayed")
        es = table.element_size()
        self.add("graph_gather", [out.data_ptr(), table.data_ptr(), index.data_ptr(), index.shape[0],
                                  table.shape[1] * es, table.stride(0) * es, table.shape[0]])


def capture(run: Callable[[], T]) -> tuple[T, CpuGraph]:
    """Run `run()` once (its result is real) and record it as a CpuGraph; GraphCaptureError says why it cannot be.

    Everything `run` reads must stay at the same address for the graph's lifetime (static buffers, weights, the KV
    pool); the tensors it creates are kept by the graph, its result among them."""
    lib = native_kernels()
    if lib is None:
        raise GraphCaptureError("sprig's C kernels are not built here")
    if lib.graph_call_size() != ctypes.sizeof(GraphCall):
        raise GraphCaptureError("graph.c and cpu_graph.py disagree on the layout of a call")
    recorder = _Recorder(lib)
    with recording_calls(lib, recorder.on_kernel), recorder:
        out = run()
    if recorder.failure is not None:
        raise GraphCaptureError(recorder.failure)
    calls = (GraphCall * len(recorder.calls))(*recorder.calls)
    results = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return out, CpuGraph(calls, recorder.names, [*recorder.keep, *results])

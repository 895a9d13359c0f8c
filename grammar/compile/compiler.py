"""The grammar compiler the engine talks to: cache first, then a worker, never the engine loop; and
`matcher_for`, each request's matcher over what it compiled.

    compiler = GrammarCompiler(TokenizerInfo.from_tokenizer(path, eos_token_ids=[2], vocab_size=2100))
    future = compiler.submit(GrammarSpec.json_schema(schema))   # returns at once
    compiled = future.result()                                  # the compiled grammar, or raises GrammarError
    matcher = matcher_for(compiled)                             # the compiled grammar's backend picks it

Results (and errors) are cached by (kind, canonical spec, tokenizer fingerprint) in a bounded LRU;
concurrent requests for the same spec share one compilation, each through its own future, so a request
that cancels its future (a timeout) does not cancel the compilation the others wait for.

A backend's matcher module is imported on first use, so the default (llguidance) path never loads
outlines-core, and compile workers (which import this package, never build matchers) never load torch.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sprig.grammar.backend import Backend, Compiled
from sprig.grammar.compile import worker
from sprig.grammar.compile.cache import ERROR_BYTES, LruCache
from sprig.grammar.compile.pool import CompilePool
from sprig.grammar.errors import GrammarError
from sprig.grammar.spec import GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo

if TYPE_CHECKING:  # why: the matcher interface imports torch; this module must not at import time
    from sprig.grammar.matcher import GrammarMatcher


@dataclass
class _Counters:
    compiles: int = 0
    errors: int = 0
    coalesced: int = 0
    seconds_total: float = 0.0
    seconds_max: float = 0.0


class GrammarCompiler:
    """Compiles constraints for one tokenizer, off the caller's thread, with limits and a cache.

    max_workers: compile processes (threads if isolate=False); cache_entries / cache_bytes: LRU bounds;
    timeout_s: wall time per compilation; max_memory_bytes: address-space limit of each worker process.
    isolate=False compiles in threads of this process: faster to start, but time and memory limits can
    then only be checked before outlines-core runs, not enforced while it runs.
    backend: "llguidance" (default: a context-free grammar, token masks computed lazily per reached state;
    also the only backend for `GrammarSpec.ebnf`) or "outlines" (one regex, an eager token automaton).
    """

    def __init__(self, tokenizer_info: TokenizerInfo, max_workers: int = 2, cache_entries: int = 1024,
                 cache_bytes: int = 1 << 30, timeout_s: float = 60.0, max_memory_bytes: int | None = 4 << 30,
                 isolate: bool = True, backend: Backend | str = Backend.LLGUIDANCE) -> None:
        self.backend = Backend.parse(backend)
        self.tokenizer_info = tokenizer_info
        self.timeout_s = timeout_s
        self._cache = LruCache(cache_entries, cache_bytes)
        self._inflight: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()
        self._counters = _Counters()
        self._pool: CompilePool | None = None
        self._threads: ThreadPoolExecutor | None = None
        if isolate:
            self._pool = CompilePool(max_workers, timeout_s, max_memory_bytes, worker.init_worker,
                                     (tokenizer_info, self.backend))
        else:
            self._threads = ThreadPoolExecutor(max(1, max_workers), thread_name_prefix="sprig-grammar")

    def submit(self, spec: GrammarSpec) -> Future:
        """Start compiling `spec` (or find it cached); the Future yields a compiled grammar or a GrammarError."""
        key = (spec.canonical_key(), f"{self.tokenizer_info.fingerprint}:{self.backend.value}")
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                return _done(cached)
            if key in self._inflight:
                self._counters.coalesced += 1
                return _view(self._inflight[key])
            outer: Future = Future()
            self._inflight[key] = outer
        if self._pool is not None:
            inner = self._pool.submit(worker.build_in_worker, spec, self.backend)
        else:
            assert self._threads is not None
            inner = self._threads.submit(worker.build, spec, self.tokenizer_info, self.backend)
        inner.add_done_callback(lambda done: self._finish(key, spec, done, outer))
        return _view(outer)

    def compile(self, spec: GrammarSpec) -> Compiled:
        """Compile synchronously (through the same cache and workers)."""
        return self.submit(spec).result()

    def _finish(self, key: tuple[str, str], spec: GrammarSpec, done: Future, outer: Future) -> None:
        try:
            compiled = worker.finish(spec, done.result(), self.tokenizer_info, self.backend)
            value: Compiled | GrammarError = compiled
            nbytes = compiled.nbytes
        except GrammarError as exc:
            value, nbytes = exc.with_param(exc.param or spec.param), ERROR_BYTES
        except BaseException as exc:  # noqa: BLE001 - internal failures are not cached, only reported
            with self._lock:
                self._inflight.pop(key, None)
            outer.set_exception(exc)
            return
        with self._lock:
            self._cache.put(key, value, nbytes)
            self._inflight.pop(key, None)
            self._record(value)
        _complete(outer, value)

    def _record(self, value: Compiled | GrammarError) -> None:
        c = self._counters
        if isinstance(value, GrammarError):
            c.errors += 1
            return
        c.compiles += 1
        c.seconds_total += value.compile_time_s
        c.seconds_max = max(c.seconds_max, value.compile_time_s)

    def stats(self) -> dict[str, float]:
        """Counters for metrics: compiles, errors, cache hits/misses/evictions, sizes, times, timeouts."""
        c, s = self._counters, self._cache.stats
        return {
            "compiles": c.compiles, "compile_errors": c.errors, "coalesced": c.coalesced,
            "cache_hits": s.hits, "cache_misses": s.misses, "cache_evictions": s.evictions,
            "cache_entries": len(self._cache), "cache_bytes": self._cache.nbytes,
            "compile_time_s_total": round(c.seconds_total, 6), "compile_time_s_max": round(c.seconds_max, 6),
            "timeouts": self._pool.timeouts if self._pool else 0,
            "worker_crashes": self._pool.crashes if self._pool else 0,
        }

    def clear_cache(self) -> None:
        self._cache.clear()

    def shutdown(self) -> None:
        """Stop the workers (compilations still queued run first)."""
        if self._pool is not None:
            self._pool.shutdown()
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def __enter__(self) -> GrammarCompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _view(shared: Future) -> Future:
    """A caller's own future on a shared compilation: cancelling it (a request that timed out) leaves the
    compilation, and every other caller's future, running."""
    mine: Future = Future()

    def copy_result(done: Future) -> None:
        if mine.cancelled():
            return
        exc = done.exception()
        try:
            if exc is not None:
                mine.set_exception(copy.copy(exc) if isinstance(exc, GrammarError) else exc)
            else:
                mine.set_result(done.result())
        except InvalidStateError:  # why: cancelled between the check and the set
            pass

    shared.add_done_callback(copy_result)
    return mine


def _done(value: Compiled | GrammarError) -> Future:
    future: Future = Future()
    _complete(future, value)
    return future


def _complete(future: Future, value: Compiled | GrammarError) -> None:
    if isinstance(value, GrammarError):
        future.set_exception(copy.copy(value))  # why: one exception object must not be raised in many threads
    else:
        future.set_result(value)


def matcher_for(compiled: Compiled, max_rollback: int = 64) -> GrammarMatcher:
    """One request's matcher over `compiled` (cheap; the compiled grammar is shared and read-only)."""
    if compiled.backend is Backend.OUTLINES:
        from sprig.grammar.outlines.matcher import OutlinesMatcher

        return OutlinesMatcher(compiled, max_rollback)  # type: ignore[arg-type]
    if compiled.backend is Backend.LLGUIDANCE:
        from sprig.grammar.llg.matcher import LlgMatcher

        return LlgMatcher(compiled, max_rollback)  # type: ignore[arg-type]
    raise ValueError(f"no matcher for backend {compiled.backend!r}")


__all__ = ["GrammarCompiler", "matcher_for"]

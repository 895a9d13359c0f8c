"""`@sprig.function`: a program as a Python function, and how it runs (alone, in batches, async)."""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from sprig.lang.backends.base import Backend, Prompt
from sprig.lang.errors import InvalidArgumentError
from sprig.lang.ir import GenParams
from sprig.lang.state import ProgramState, RunConfig
from sprig.lang.tracing import constant_prefix

MAX_AUTO_THREADS = 64

_default_backend: Backend | None = None
_wrapped: weakref.WeakKeyDictionary[Any, Backend] = weakref.WeakKeyDictionary()
_wrap_lock = threading.Lock()


def as_backend(obj: Any) -> Backend:
    """A backend from a `Backend` or a `sprig.Engine` (wrapped once per engine)."""
    if isinstance(obj, Backend):
        return obj
    if hasattr(obj, "generate") and hasattr(obj, "tokenizer"):
        from sprig.lang.backends.local import LocalBackend

        with _wrap_lock:
            if obj not in _wrapped:
                _wrapped[obj] = LocalBackend(obj)
            return _wrapped[obj]
    raise InvalidArgumentError(f"not a backend: {type(obj).__name__} (use a sprig.Engine or a lang backend)",
                               param="backend")


def set_default_backend(backend: Any) -> None:
    """The backend programs use when `run` is given none (a `sprig.Engine` or a backend; None clears it)."""
    global _default_backend
    _default_backend = None if backend is None else as_backend(backend)


def get_default_backend() -> Backend | None:
    """The backend set by `set_default_backend`, if any."""
    return _default_backend


def _resolve(backend: Any) -> Backend:
    if backend is not None:
        return as_backend(backend)
    if _default_backend is None:
        raise InvalidArgumentError("no backend: pass backend=... or call sprig.set_default_backend(...)",
                                   param="backend")
    return _default_backend


def _defaults(max_new_tokens: int | None, temperature: float | None, top_p: float | None, top_k: int | None,
              min_p: float | None, frequency_penalty: float | None, presence_penalty: float | None,
              repetition_penalty: float | None, stop: str | Sequence[str] | None,
              priority: int | None = None) -> GenParams:
    stop_t = None if stop is None else ((stop,) if isinstance(stop, str) else tuple(stop))
    return GenParams(max_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                     frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                     repetition_penalty=repetition_penalty, stop=stop_t, priority=priority)


class SprigFunction:
    """A program: `fn(s, **kwargs)` whose `s` is a `ProgramState`. Run it with `run` or `run_batch`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> ProgramState:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, backend: Any = None, stream: bool = False, seed: int | None = None,
            max_new_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None,
            top_k: int | None = None, min_p: float | None = None, frequency_penalty: float | None = None,
            presence_penalty: float | None = None, repetition_penalty: float | None = None,
            stop: str | Sequence[str] | None = None, priority: int | None = None, **kwargs: Any) -> ProgramState:
        """Run the program once and return its state.

        The sampling options are defaults for every `gen` that does not set them; `seed` makes the whole run
        reproducible (each call derives its own seed from it); `priority` is the scheduling priority of every
        `gen` (higher first) that does not set its own. Without `stream` this returns when the program
        is done and raises its error; with `stream=True` it returns at once while the program runs in the
        background (read it with `s.text_iter()`; errors end the iterator and stay on `s.error`).
        """
        config = RunConfig(_resolve(backend), _defaults(max_new_tokens, temperature, top_p, top_k, min_p,
                                                        frequency_penalty, presence_penalty,
                                                        repetition_penalty, stop, priority), seed, stream)
        state = ProgramState(config)
        if stream:
            threading.Thread(target=self._execute, args=(state, args, kwargs), name="sprig-program",
                             daemon=True).start()
            return state
        self._execute(state, args, kwargs)
        if state.error is not None:
            raise state.error
        return state

    def run_batch(self, batch_kwargs: Sequence[dict[str, Any]], *, backend: Any = None,
                  num_threads: int | str = "auto", progress_bar: bool = False, cache_prefix: bool = True,
                  seed: int | None = None, max_new_tokens: int | None = None, temperature: float | None = None,
                  top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
                  frequency_penalty: float | None = None, presence_penalty: float | None = None,
                  repetition_penalty: float | None = None,
                  stop: str | Sequence[str] | None = None, priority: int | None = None) -> list[ProgramState]:
        """Run the program once per kwargs dict, `num_threads` at a time; returns the states in order.

        A failing program does not stop the others: its exception is on its state's `error`. With
        `cache_prefix`, the text all programs start with is found by tracing and cached once first.
        """
        if not isinstance(batch_kwargs, Sequence) or not all(isinstance(k, dict) for k in batch_kwargs):
            raise InvalidArgumentError("run_batch takes a list of keyword-argument dicts", param="batch_kwargs")
        threads = _thread_count(num_threads, len(batch_kwargs))
        config = RunConfig(_resolve(backend), _defaults(max_new_tokens, temperature, top_p, top_k, min_p,
                                                        frequency_penalty, presence_penalty,
                                                        repetition_penalty, stop, priority), seed)
        if cache_prefix:
            prefix = constant_prefix(self.fn, batch_kwargs, config.backend.chat_formatter)
            if prefix:
                config.backend.cache_prefix(Prompt(prefix))
        states = [ProgramState(config) for _ in batch_kwargs]
        if not states:
            return states
        with ThreadPoolExecutor(threads, thread_name_prefix="sprig-batch") as pool:
            futures = [pool.submit(self._execute, st, (), kw) for st, kw in zip(states, batch_kwargs, strict=True)]
            done = as_completed(futures)
            if progress_bar:
                from tqdm.auto import tqdm

                done = tqdm(done, total=len(futures), desc=getattr(self.fn, "__name__", "program"))
            for _ in done:
                pass
        return states

    async def run_async(self, *args: Any, **kwargs: Any) -> ProgramState:
        """`run` without blocking the event loop."""
        return await asyncio.to_thread(functools.partial(self.run, *args, **kwargs))

    async def run_batch_async(self, batch_kwargs: Sequence[dict[str, Any]], **options: Any) -> list[ProgramState]:
        """`run_batch` without blocking the event loop."""
        return await asyncio.to_thread(functools.partial(self.run_batch, batch_kwargs, **options))

    def _execute(self, state: ProgramState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            state.ret_value = self.fn(state, *args, **kwargs)
            state.sync_all()
            error = state.first_error()
            if error is not None:
                state.fail(error)  # a failed branch fails the program
        except BaseException as e:  # noqa: BLE001 - stored on the state (run re-raises it)
            state.sync_all()
            state.fail(e)
        finally:
            state.mark_finished()


def function(fn: Callable[..., Any]) -> SprigFunction:
    """Decorator: turn `def prog(s, ...)` into a runnable sprig program."""
    return SprigFunction(fn)


def _thread_count(num_threads: int | str, batch_size: int) -> int:
    if num_threads == "auto":
        return max(1, min(batch_size, MAX_AUTO_THREADS))
    if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise InvalidArgumentError("num_threads must be a positive integer or 'auto'", param="num_threads")
    return num_threads

"""Compile workers: processes that can be killed, so a compile that runs too long or too big cannot hurt.

outlines-core compiles in native code that no Python timeout can interrupt, and a pathological automaton
can eat gigabytes. Each worker is a separate process (a fresh interpreter, so it shares no threads or
torch state with the engine) under an address-space limit (RLIMIT_AS); a thread per worker feeds it one job
at a time and waits at most `timeout_s`. A worker past its time is killed and replaced; one that dies (out
of memory) likewise. Either way the job fails with `GrammarTooComplex` and the other jobs never notice.
"""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from sprig.grammar.errors import too_complex

_STOP = object()
STARTUP_TIMEOUT_S = 120.0


def _worker_main(conn) -> None:
    """A worker's life: apply limits, run the initializer, then answer jobs until the pipe closes."""
    initializer, init_args, memory_limit = conn.recv()
    if memory_limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    if initializer is not None:
        initializer(*init_args)
    conn.send((True, "ready"))
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, fn(*args)))
        except MemoryError:
            conn.send((False, too_complex("compilation ran out of its memory budget")))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            try:
                conn.send((False, exc))
            except Exception:  # noqa: BLE001 - an exception that does not pickle goes back as text
                conn.send((False, RuntimeError(f"{type(exc).__name__}: {str(exc)[:300]}")))


class _Slot:
    """One worker process and the thread that feeds it."""

    def __init__(self, pool: CompilePool) -> None:
        self.pool = pool
        self.process: Any = None
        self.conn: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="sprig-grammar-compile")
        self.thread.start()

    def _ensure_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        # why: a fresh interpreter (not fork, not multiprocessing's spawn, which re-imports __main__)
        parent, child = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from sprig.grammar.compile.pool import _serve; _serve({child.fileno()})"],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send((self.pool.initializer, self.pool.init_args, self.pool.memory_limit))
        if not self.conn.poll(STARTUP_TIMEOUT_S):  # why: start-up time must not count against a job's budget
            raise EOFError("compile worker did not start")
        self.conn.recv()

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def _run(self) -> None:
        try:  # why: start the worker now, so the first job does not wait for its interpreter and imports
            self._ensure_process()
        except (EOFError, OSError):
            self._kill()  # a job will try again
        while True:
            job = self.pool.jobs.get()
            if job is _STOP:
                self._kill()
                return
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                self._execute(future, fn, args)

    def _execute(self, future: Future, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._ensure_process()
            self.conn.send((fn, args))
            if not self.conn.poll(self.pool.timeout_s):
                self._kill()
                self.pool.timeouts += 1
                future.set_exception(too_complex(f"compilation took longer than {self.pool.timeout_s:g} s"))
                return
            ok, value = self.conn.recv()
        except (EOFError, OSError):
            self._kill()
            self.pool.crashes += 1
            future.set_exception(too_complex("compilation exceeded its memory budget (worker died)"))
            return
        except BaseException as exc:  # noqa: BLE001 - the feeding thread must survive anything
            self._kill()
            future.set_exception(RuntimeError(f"grammar compile worker failed: {exc}"))
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


class CompilePool:
    """A fixed number of killable worker processes; `submit(fn, *args) -> Future`."""

    def __init__(self, max_workers: int, timeout_s: float, memory_limit: int | None = None,
                 initializer: Callable[..., None] | None = None, init_args: tuple = ()) -> None:
        self.timeout_s, self.memory_limit = timeout_s, memory_limit
        self.initializer, self.init_args = initializer, init_args
        self.jobs: queue.Queue = queue.Queue()
        self.timeouts = self.crashes = 0
        self._slots = [_Slot(self) for _ in range(max(1, max_workers))]
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run fn(*args) in a worker; fn must be importable by name (a module-level function)."""
        if self._closed:
            raise RuntimeError("the compile pool is shut down")
        future: Future = Future()
        self.jobs.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._slots:
            self.jobs.put(_STOP)
        for slot in self._slots:
            slot.thread.join(timeout=10)


def _serve(fd: int) -> None:
    """Entry point of a worker process (see `_Slot._ensure_process`)."""
    _worker_main(Connection(fd))

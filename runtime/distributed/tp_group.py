"""Rank 0 of a multi-process engine (tensor and/or pipeline parallel): start the other ranks, send each step, notice
a dead rank, stop them all.

On one machine sprig starts ranks 1..N-1 itself (fresh `python -c` processes); under `torchrun` every rank is
already running and rank 0 is the process that serves. The world is `pp_size * tp_size` ranks (rank = stage *
tp_size + tp rank). The scheduler, radix tree and sampler stay here. Tensor parallel only: each step rank 0
broadcasts the scheduled sequences (`tp_protocol`), every rank runs the same forward, and rank 0 receives the
gathered logits. With pipeline stages, rank 0 broadcasts a step to its own stage only and the sequences travel
down the pipeline with the hidden states (`pp_protocol`, `pp_runner`). A heartbeat keeps idle ranks inside their
collective timeout.

Failure: a rank that exits, or a collective that fails, marks the group failed; the other ranks are killed and the
engine's next step raises `TensorParallelError` (`PipelineParallelError` with stages; both are `ParallelError`s),
which ends the engine loop (the server reports itself dead). In
the CLI (`FailurePolicy.EXIT_PROCESS`) the process then stops itself with SIGTERM, so `sprig serve` drains and
exits with an error; a library caller keeps its process and gets the error from `generate`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import Enum
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist

from sprig.runtime.config import EngineConfig
from sprig.runtime.distributed.errors import ParallelError, PipelineParallelError, TensorParallelError
from sprig.runtime.distributed.pp_protocol import PipeLink
from sprig.runtime.distributed.pp_runner import PipelineRunner
from sprig.runtime.distributed.pp_worker import pipe_link
from sprig.runtime.distributed.rank_spec import RankSpec, collective_device, describe_rank
from sprig.runtime.distributed.tp_protocol import Command, StepChannel, encode_step
from sprig.runtime.distributed.tp_worker import build_shard, join_group, torchrun_spec
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.kv_pool import KVPool
from sprig.runtime.model.parallel import TPContext, check_divisible, check_stages
from sprig.runtime.model.runner import ModelRunner, SeqInput, StepOutput

logger = logging.getLogger(__name__)

WORKER_ENTRY = "from sprig.runtime.distributed.tp_worker import main; main()"
HEARTBEAT_S = 5.0
POLL_S = 0.25
JOIN_TIMEOUT_S = 10.0
EXIT_GRACE_S = 2.0  # how long a failed server keeps answering /health (503) before it stops itself
HARD_EXIT_S = 60.0  # if the drain after SIGTERM hangs (a rank stuck in NCCL), exit anyway


__all__ = ["ParallelError", "PipelineParallelError", "TensorParallelError", "TPGroup", "FailurePolicy"]


class FailurePolicy(Enum):
    """What the process does when a rank dies, besides failing the engine."""

    RAISE = "raise"  # library use: the engine stops, the process carries on
    EXIT_PROCESS = "exit_process"  # the CLI: stop the process with SIGTERM (then exit non-zero)


class LaunchMode(Enum):
    SPAWN = "spawn"  # sprig starts ranks 1..N-1 on this machine
    TORCHRUN = "torchrun"  # every rank was started by torchrun


_policy = FailurePolicy.RAISE
_failures: list[str] = []


def set_failure_policy(policy: FailurePolicy) -> None:
    """Choose what a rank failure does to this process (the CLI picks EXIT_PROCESS)."""
    global _policy
    _policy = policy


def recorded_failure() -> str | None:
    """The first rank failure of any group in this process, or None."""
    return _failures[0] if _failures else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _error_type(pp_size: int) -> type[ParallelError]:
    """What a failure of the group raises: pipeline errors once there are stages."""
    return TensorParallelError if pp_size == 1 else PipelineParallelError


def _exit_description(name: str, proc: RankProcess) -> str:
    code = proc.exitcode
    how = f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited ({code})"
    return f"{name} (pid {proc.pid}) {how}"


class RankProcess:
    """A rank sprig started: `python -c` importing only sprig, so the caller's __main__ never runs again."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid

    @classmethod
    def start(cls, spec: RankSpec) -> tuple[RankProcess, Connection]:
        """Start a rank process; returns it and the read end of its startup report pipe."""
        read_fd, write_fd = os.pipe()
        try:
            popen = subprocess.Popen([sys.executable, "-c", WORKER_ENTRY], stdin=subprocess.PIPE,
                                     pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        assert popen.stdin is not None
        popen.stdin.write(pickle.dumps((spec, write_fd)))
        popen.stdin.close()
        return cls(popen), Connection(read_fd, writable=False)

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()


class TPGroup:
    """Rank 0's handle on the group: the model shard, the pool, the other ranks and their health. Serves tensor
    parallelism, pipeline parallelism and both (the name is the older of the two)."""

    def __init__(self, spec: RankSpec, mode: LaunchMode, procs: list[RankProcess],
                 reports: list[Connection]) -> None:
        self.spec = spec
        self.mode = mode
        self.procs = procs  # ranks 1..N-1 when spawned; empty under torchrun
        self.reports = reports
        self.context = TPContext(0, spec.size, None)
        self.pp_size = spec.config.pp_size
        self.error = _error_type(self.pp_size)
        self.model: CausalLM | None = None
        self.pool: KVPool | None = None
        self.channel: StepChannel | None = None  # broadcasts to rank 0's tensor-parallel peers
        self.link: PipeLink | None = None  # messages to the next pipeline stage
        self.lock = threading.Lock()  # why: a step (broadcast + forward) and a heartbeat must never interleave
        self.failure: str | None = None
        self._stopping = threading.Event()
        self._last_send = time.monotonic()
        self._threads: list[threading.Thread] = []

    # --- start --------------------------------------------------------------------------------------------------
    @classmethod
    def start(cls, config: EngineConfig, model_path: str) -> TPGroup:
        """Start (or join, under torchrun) every rank, load the shards and agree on the KV pool size."""
        model_cfg = load_model_config(model_path)
        check_divisible(model_cfg, config.tp_size)  # before any process starts
        check_stages(model_cfg.num_layers, config.pp_size)
        error = _error_type(config.pp_size)
        spec = torchrun_spec(config, model_path)
        if spec is not None and spec.rank != 0:
            raise error("only rank 0 runs the engine; other ranks run the worker loop")
        if spec is None and dist.is_initialized():
            raise error("a torch.distributed process group already exists in this process: "
                        "one multi-process engine per process")
        if spec is None:
            group = cls._spawn(config, model_path)
        else:
            group = cls(spec, LaunchMode.TORCHRUN, [], [])
        atexit.register(group.shutdown)
        try:
            group._setup()
        except BaseException:
            group.shutdown()
            raise
        return group

    @classmethod
    def _spawn(cls, config: EngineConfig, model_path: str) -> TPGroup:
        size = config.tp_size * config.pp_size
        init = f"tcp://127.0.0.1:{_free_port()}"
        config = replace(config, model_path=model_path)
        procs, reports = [], []
        for rank in range(1, size):
            spec = RankSpec(rank, size, rank, init, config, model_path, parent_pid=os.getpid())
            proc, report = RankProcess.start(spec)
            procs.append(proc)
            reports.append(report)
        return cls(RankSpec(0, size, 0, init, config, model_path), LaunchMode.SPAWN, procs, reports)

    def _setup(self) -> None:
        self.context = self._watched(lambda: join_group(self.spec), "joining the process group")
        self.model, self.pool = self._watched(lambda: build_shard(self.spec, self.context), "loading the shards")
        self._wait_ready()
        device = collective_device(self.spec)
        if self.context.size > 1:
            self.channel = StepChannel(self.context, device)
        if self.pp_size > 1:
            assert self.model is not None  # loaded above
            self.link = pipe_link(self.spec, self.model.dtype)
        self._start_thread(self._heartbeat, "sprig-tp-heartbeat")
        if self.procs:
            self._start_thread(self._supervise, "sprig-tp-supervisor")

    def _watched(self, fn: Callable[[], Any], what: str) -> Any:
        """Run a collective phase of startup; a rank that dies meanwhile fails it at once (not at the timeout)."""
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
                result["error"] = e

        thread = threading.Thread(target=run, name="sprig-tp-startup", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(POLL_S)
            dead = self._dead_rank()
            if dead is not None and thread.is_alive():
                raise self.error(f"{dead} while {what}{self._reported_error()}")
        if "error" in result:
            dead = self._dead_rank()
            if dead is not None:
                raise self.error(f"{dead} while {what}{self._reported_error()}") from None
            raise result["error"]
        return result["value"]

    def _wait_ready(self) -> None:
        for rank, conn in enumerate(self.reports, start=1):
            kind, message = conn.recv() if conn.poll(JOIN_TIMEOUT_S) else ("error", "no report")
            if kind != "ready":
                raise self.error(f"{self.rank_name(rank)} failed to start: {message}")

    def rank_name(self, rank: int) -> str:
        return describe_rank(rank, self.spec.config.tp_size, self.pp_size)

    def _dead_rank(self) -> str | None:
        for rank, proc in enumerate(self.procs, start=1):
            if not proc.is_alive():
                return _exit_description(self.rank_name(rank), proc)
        return None

    def _reported_error(self) -> str:
        for conn in self.reports:
            with contextlib.suppress(EOFError, OSError):
                while conn.poll(0):
                    kind, message = conn.recv()
                    if kind == "error":
                        return f": {message}"
        return ""

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # --- steps --------------------------------------------------------------------------------------------------
    def runner(self) -> ModelRunner:
        """The model runner rank 0's engine steps through."""
        assert self.model is not None and self.pool is not None
        if self.pp_size > 1:
            return PipelineRunner(self.model, self.pool, self)
        return TPModelRunner(self.model, self.pool, self)

    def send(self, command: Command, payload: torch.Tensor | None = None) -> None:
        """Broadcast a command to rank 0's tensor-parallel peers (if any); the caller holds `lock`."""
        self.raise_if_failed()
        if self.channel is not None:
            self.channel.send(command, payload)
        self.touch()

    def announce(self, command: Command) -> None:
        """A command for every rank (heartbeat, shutdown): to this stage's peers and down the pipeline."""
        self.send(command)
        if self.link is not None:
            self.link.send_next(command)

    def touch(self) -> None:
        """A message went out: no heartbeat is due before HEARTBEAT_S."""
        self._last_send = time.monotonic()

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.error(self.failure)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def fail(self, message: str) -> None:
        """Mark the group failed (the first cause wins), stop every other rank and apply the failure policy."""
        if self.failure is not None or self._stopping.is_set():
            return
        self.failure = message
        _failures.append(message)
        every = "every tensor-parallel rank" if self.pp_size == 1 else "every rank of the pipeline"
        print(f"sprig: error: {message}; stopping {every}", file=sys.stderr, flush=True)
        self._stop_ranks(graceful=False)
        if _policy is FailurePolicy.EXIT_PROCESS:
            threading.Thread(target=_stop_this_process, name="sprig-tp-exit", daemon=True).start()

    def wait_for_cause(self, timeout: float) -> str | None:
        """After a failed collective: give the supervisor a moment to name the rank that died."""
        deadline = time.monotonic() + timeout
        while self.failure is None and time.monotonic() < deadline:
            dead = self._dead_rank()
            if dead is not None:
                return dead
            time.sleep(0.05)
        return self.failure

    # --- background threads -------------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        while not self._stopping.wait(HEARTBEAT_S / 5):
            if self.failed or time.monotonic() - self._last_send < HEARTBEAT_S:
                continue
            with self.lock:
                if self.failed or self._stopping.is_set():
                    continue
                try:
                    self.announce(Command.HEARTBEAT)
                except Exception as e:  # noqa: BLE001 - a broken peer
                    self.fail(self.wait_for_cause(2.0) or f"heartbeat to the other ranks failed: {e}")

    def _supervise(self) -> None:
        while not self._stopping.wait(POLL_S) and not self.failed:
            dead = self._dead_rank()
            if dead is not None and not self._stopping.is_set():
                self.fail(dead)

    # --- stop ---------------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Tell every rank to stop, wait for them (kill stragglers) and leave the process group. Idempotent."""
        if self._stopping.is_set():
            return
        healthy = self.failure is None and (self.channel is not None or self.link is not None)
        self._stopping.set()
        if healthy and self.lock.acquire(timeout=JOIN_TIMEOUT_S):
            try:
                self.announce(Command.SHUTDOWN)
                if self.link is not None:
                    self.link.drain(JOIN_TIMEOUT_S)  # why: steps still in flight must land before the group goes
            except Exception:  # noqa: BLE001 - the ranks are stopped below either way
                logger.debug("could not send SHUTDOWN", exc_info=True)
            finally:
                self.lock.release()
        self._stop_ranks(graceful=healthy)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2 * POLL_S + HEARTBEAT_S / 5)
        if dist.is_initialized() and (healthy or self.mode is LaunchMode.SPAWN):
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        for conn in self.reports:
            conn.close()
        with contextlib.suppress(Exception):
            atexit.unregister(self.shutdown)

    def _stop_ranks(self, graceful: bool) -> None:
        deadline = time.monotonic() + (JOIN_TIMEOUT_S if graceful else 0.0)
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(JOIN_TIMEOUT_S)


def _stop_this_process() -> None:
    """EXIT_PROCESS: let /health report the failure briefly, drain via SIGTERM, and exit hard if that hangs."""
    time.sleep(EXIT_GRACE_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(HARD_EXIT_S)
    os._exit(1)


class TPModelRunner(ModelRunner):
    """Rank 0's runner: broadcast the step, then run this rank's share of the same forward."""

    def __init__(self, model: CausalLM, pool: KVPool, group: TPGroup) -> None:
        super().__init__(model, pool)
        self.group = group

    def forward(self, seqs: Sequence[SeqInput]) -> StepOutput:
        with self.group.lock:
            try:
                self.group.send(Command.STEP, encode_step(seqs))
                return super().forward(seqs)
            except TensorParallelError:
                raise
            except Exception as e:
                cause = self.group.wait_for_cause(2.0) or f"a tensor-parallel collective failed: {e}"
                self.group.fail(cause)
                raise TensorParallelError(cause) from e

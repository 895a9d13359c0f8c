"""The systems `benchmarks/compare.py` measures side by side: sprig servers (radix cache on and off, int8 weights),
llama.cpp's `llama-server` on the same checkpoint converted to GGUF (in the checkpoint's dtype or Q8_0), and
`transformers.generate` in static batches. Given a GGUF file instead of a folder, sprig and llama-server both serve
that file as stored (sprig with its block-quant kernels), and `sprig-bf16` serves it dequantized to bf16.

Servers are child processes; each run is the same workload sent by the same HTTP client. The transformers
baseline runs in-process (it has no server).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import httpx

from sprig.runtime.bench.cli import BenchResult, run_workload, step_profile, warmup_sessions
from sprig.runtime.bench.client import LoadSpec, OpenAIBackend
from sprig.runtime.bench.datasets import Session, WorkloadSpec
from sprig.runtime.bench.metrics import summarize
from sprig.runtime.model.tokenizer import Tokenizer


class SystemKind(str, Enum):
    """The systems compare knows how to start."""

    SPRIG = "sprig"
    SPRIG_NO_CACHE = "sprig-no-cache"
    SPRIG_INT8 = "sprig-int8"  # weights quantized to int8 at load (--quantization int8)
    SPRIG_BF16 = "sprig-bf16"  # a GGUF file dequantized to bf16 at load (--gguf-dequantize)
    LLAMA_CPP = "llama.cpp"
    LLAMA_CPP_Q8 = "llama.cpp-q8_0"  # the checkpoint converted to a Q8_0 GGUF
    TRANSFORMERS = "transformers"


KERNEL_FACTS = ("linear kernels", "attention backend")  # lines of sprig's start-up block the report keeps


class SystemUnavailable(Exception):
    """A system cannot run here (not installed, unsupported workload); the message says why."""


@dataclass(frozen=True)
class Setup:
    """What every system shares: one checkpoint, dtype, thread count and slot count."""

    model_dir: Path
    dtype: str = "bfloat16"
    threads: int = 2
    concurrency: int = 16
    ctx_per_slot: int = 2048
    kv_tokens: int = 32768
    log_dir: Path = Path("results/compare/logs")
    gguf_dir: Path = Path("results/gguf")
    llama_server: str | None = None  # binary; None: $LLAMA_SERVER or `llama-server` on PATH
    llama_cpp_dir: str | None = None  # source tree with convert_hf_to_gguf.py; None: $LLAMA_CPP_DIR
    # ggml's CPU flash attention is the slower path here: 32 random requests at concurrency 16 ran at 107 output
    # tok/s with it (the default, "auto") and 145 without.
    llama_args: tuple[str, ...] = ("-fa", "off")
    base_port: int = 31900
    progress: bool = True

    @property
    def is_gguf(self) -> bool:
        """The checkpoint is one GGUF file, which every system serves as it is."""
        return self.model_dir.suffix == ".gguf"


class System(Protocol):
    """A system under test."""

    name: str

    def start(self) -> None: ...

    def run(self, spec: WorkloadSpec, sessions: list[Session], load: LoadSpec, tok: Tokenizer) -> BenchResult: ...

    def stop(self) -> None: ...


@dataclass
class ServerSystem:
    """An OpenAI-compatible server in a child process, measured over HTTP."""

    name: str
    command: list[str]
    port: int
    log_path: Path
    stats_route: str | None = None  # sprig's /server_info: engine step timings around each run
    env: dict[str, str] = field(default_factory=dict)
    progress: bool = True
    proc: subprocess.Popen | None = None
    warmed: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Launch the server and wait until /health answers 200 (model loaded)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env}, start_new_session=True)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemUnavailable(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise SystemUnavailable(f"{self.name} did not become healthy in 600 s; see {self.log_path}")

    def run(self, spec: WorkloadSpec, sessions: list[Session], load: LoadSpec, tok: Tokenizer) -> BenchResult:
        """One measured run of the workload (a short warm-up the first time)."""
        before = self._stats()
        warm = None if self.warmed else warmup_sessions(spec, tok, 2)
        self.warmed = True
        records = asyncio.run(self._drive(sessions, load, tok, warm))
        after = self._stats()
        profile = step_profile(before, after) if before and after else None
        summary = summarize(records, self.name, spec.kind.value, load.request_rate, load.max_concurrency)
        return BenchResult(summary, {"system": self.name, "command": self.command}, records, profile)

    async def _drive(self, sessions: list[Session], load: LoadSpec, tok: Tokenizer,
                     warm: list[Session] | None) -> list[Any]:
        backend = OpenAIBackend(self.url, model="default")
        try:
            return await run_workload(backend, sessions, load, tok, self.progress, self.name, warm)
        finally:
            await backend.aclose()

    def _stats(self) -> dict[str, Any] | None:
        if self.stats_route is None:
            return None
        try:
            return httpx.get(f"{self.url}{self.stats_route}", timeout=30).json()
        except (httpx.HTTPError, ValueError):
            return None

    def resident_mib(self) -> dict[str, float] | None:
        """The server process's resident memory now and at its peak (VmRSS, VmHWM), in MiB; None when gone."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return resident_of(self.proc.pid)

    def startup_facts(self, labels: tuple[str, ...] = KERNEL_FACTS, wait_s: float = 10.0) -> dict[str, str]:
        """`label: value` lines of the server's start-up block, read from its log (waits a little: the block may
        be printed just after /health turns 200)."""
        deadline = time.monotonic() + wait_s
        while True:
            facts = parse_facts(self.log_path.read_text(errors="replace"), labels)
            if len(facts) == len(labels) or time.monotonic() >= deadline:
                return facts
            time.sleep(0.5)

    def stop(self) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after 30 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def resident_of(pid: int) -> dict[str, float] | None:
    """VmRSS and VmHWM of a process from /proc, in MiB (None where /proc has no such process)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = {m.group(1): int(m.group(2)) / 1024 for m in re.finditer(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}
    return {"rss_mib": found["VmRSS"], "peak_mib": found["VmHWM"]} if len(found) == 2 else None


def parse_facts(log: str, labels: tuple[str, ...]) -> dict[str, str]:
    """The last `label: value` line of each label in a log (sprig's start-up block indents and aligns them)."""
    facts: dict[str, str] = {}
    for label in labels:
        for m in re.finditer(rf"^\s*{re.escape(label)}:\s*(.*?)\s*$", log, re.MULTILINE):
            facts[label] = m.group(1)
    return facts


def sprig_server(setup: Setup, cache: bool, port: int, quantization: str | None = None,
                 dequantize: bool = False) -> ServerSystem:
    """`sprig serve` on the setup's checkpoint (radix cache on or off, weights quantized at load or not, a GGUF
    file's blocks kept or dequantized)."""
    if dequantize and not setup.is_gguf:
        raise SystemUnavailable("sprig-bf16 dequantizes a GGUF file: pass --model FILE.gguf")
    name = "sprig" if cache else "sprig-no-cache"
    dtype = "bfloat16" if dequantize else setup.dtype
    cmd = [sys.executable, "-m", "sprig.runtime.cli", "serve", "--model", str(setup.model_dir),
           "--dtype", dtype, "--num-threads", str(setup.threads), "--port", str(port),
           "--max-total-tokens", str(setup.kv_tokens), "--served-model-name", "default"]
    if not cache:
        cmd.append("--disable-radix-cache")
    if quantization:
        name = f"sprig-{quantization}"
        cmd += ["--quantization", quantization]
    if dequantize:
        name = "sprig-bf16"
        cmd.append("--gguf-dequantize")
    return ServerSystem(name, cmd, port, setup.log_dir / f"{name}.log", stats_route="/server_info",
                        progress=setup.progress)


def find_llama_server(setup: Setup) -> str:
    """The llama-server binary, or SystemUnavailable with how to install it."""
    candidate = setup.llama_server or os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    if candidate and Path(candidate).is_file():
        return str(candidate)
    raise SystemUnavailable("llama-server not found (pass --llama-server PATH or set $LLAMA_SERVER); "
                            "benchmarks/README.md shows how to build it")


def gguf_of(setup: Setup, outtype: str | None = None) -> Path:
    """The checkpoint as GGUF in `outtype` (default: the setup's dtype), converted once with llama.cpp's own
    converter; a GGUF checkpoint is served as it is."""
    if setup.is_gguf:
        if outtype is not None:
            raise SystemUnavailable(f"the checkpoint is a GGUF file already; no {outtype} conversion of it")
        return setup.model_dir
    outtype = outtype or {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[setup.dtype]
    out = setup.gguf_dir / f"{setup.model_dir.name}-{outtype}.gguf"
    if out.exists():
        return out
    llama_dir = setup.llama_cpp_dir or os.environ.get("LLAMA_CPP_DIR")
    if not llama_dir:
        raise SystemUnavailable("no GGUF yet and no llama.cpp source tree to convert with (--llama-cpp-dir or "
                                "$LLAMA_CPP_DIR: the folder holding convert_hf_to_gguf.py)")
    log = setup.log_dir / f"gguf-convert-{outtype}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sprig.runtime.bench.gguf", llama_dir, str(setup.model_dir), str(out), outtype]
    with log.open("w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0 or not out.exists():
        raise SystemUnavailable(f"GGUF conversion failed (exit {code}); see {log}")
    return out


def llama_server(setup: Setup, port: int, outtype: str | None = None) -> ServerSystem:
    """llama.cpp's `llama-server` with one slot per concurrent request, same thread count as sprig, on the GGUF in
    `outtype` (default: the setup's dtype)."""
    binary = find_llama_server(setup)
    gguf = gguf_of(setup, outtype)
    name = f"llama.cpp-{outtype}" if outtype else "llama.cpp"
    cmd = [binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "-t", str(setup.threads), "-tb", str(setup.threads), "-np", str(setup.concurrency),
           "-c", str(setup.ctx_per_slot * setup.concurrency), "--alias", "default", "--no-webui", *setup.llama_args]
    log = setup.log_dir / (f"llama-server-{outtype}.log" if outtype else "llama-server.log")
    return ServerSystem(name, cmd, port, log, progress=setup.progress)


@dataclass
class TransformersSystem:
    """`transformers.generate` in static batches of `concurrency` rows, in this process."""

    setup: Setup
    name: str = "transformers"
    runner: Any = None

    def start(self) -> None:
        import torch

        from sprig.runtime.bench.offline import StaticBatchRunner, load_hf_model

        if self.setup.is_gguf:
            raise SystemUnavailable("transformers baseline: a checkpoint folder only (it dequantizes a GGUF file)")
        torch.set_num_threads(self.setup.threads)
        model = load_hf_model(str(self.setup.model_dir), self.setup.dtype)
        tok = Tokenizer(self.setup.model_dir)
        pad = tok.hf.token_to_id("<|endoftext|>") or 0
        self.runner = StaticBatchRunner(model, tok, self.setup.concurrency, pad)
        self.runner.run(warmup_sessions(WorkloadSpec(), tok, 2))

    def run(self, spec: WorkloadSpec, sessions: list[Session], load: LoadSpec, tok: Tokenizer) -> BenchResult:
        if any(len(s.turns) > 1 for s in sessions):
            raise SystemUnavailable("transformers baseline: single-turn workloads only")
        batch = min(self.setup.concurrency, load.max_concurrency or self.setup.concurrency)  # batch1: one row
        records = replace(self.runner, batch_size=batch).run(sessions)
        summary = summarize(records, self.name, spec.kind.value, float("inf"), batch)
        return BenchResult(summary, {"system": self.name, "batch_size": batch}, records)

    def stop(self) -> None:
        self.runner = None


def make_system(kind: SystemKind, setup: Setup, index: int) -> System:
    """Build (not start) a system; raises SystemUnavailable when it cannot run here."""
    port = setup.base_port + index
    if kind is SystemKind.SPRIG:
        return sprig_server(setup, True, port)
    if kind is SystemKind.SPRIG_NO_CACHE:
        return sprig_server(setup, False, port)
    if kind is SystemKind.SPRIG_INT8:
        return sprig_server(setup, True, port, quantization="int8")
    if kind is SystemKind.SPRIG_BF16:
        return sprig_server(setup, True, port, dequantize=True)
    if kind is SystemKind.LLAMA_CPP:
        return llama_server(setup, port)
    if kind is SystemKind.LLAMA_CPP_Q8:
        return llama_server(setup, port, outtype="q8_0")
    return TransformersSystem(setup)

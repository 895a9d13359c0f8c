"""Helpers for the server tests: start `sprig serve` in a subprocess on a free loopback port and wait for it.

Not a test module by itself (no tests); the server test modules import `ServerProcess` and `free_port` from here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 180.0


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is `pid` (read from /proc; Linux)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_serving(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """The URL a `sprig serve` process prints on stderr once it serves; kills it if it stops or never serves."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "serving" in line:
            return line.split(" at ", 1)[1].split()[0]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"sprig serve did not start: {proc.stderr.read()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_model() -> str:
    from sprig.runtime.model.checkpoints import checkpoint_path

    return str(checkpoint_path("tiny-llama"))


BASE_ARGS = ["--dtype", "float32", "--max-total-tokens", "8192", "--num-threads", "1", "--random-seed", "0"]


class ServerProcess:
    """`sprig serve` on 127.0.0.1:<free port>, stopped with SIGTERM (then SIGKILL) on `stop()`."""

    def __init__(self, *extra: str, model: str | None = None, wait: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fd, self.log_path = tempfile.mkstemp(prefix="sprig-serve-", suffix=".log")
        args = [sys.executable, "-m", "sprig.runtime.cli", "--log-level", "warning", "serve",
                "--model", model or tiny_model(), *BASE_ARGS, "--port", str(self.port), *extra]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        env.pop("SPRIG_API_KEY", None)
        self.proc = subprocess.Popen(args, stdout=fd, stderr=subprocess.STDOUT, env=env)
        os.close(fd)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sprig serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"sprig serve did not become ready:\n{self.output()}")

    def output(self) -> str:
        return Path(self.log_path).read_text(errors="replace")[-6000:]

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_info(url: str, headers: dict[str, str] | None = None) -> dict:
    return httpx.get(url + "/server_info", headers=headers, timeout=30).json()


def wait_idle(url: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> dict:
    """Wait until nothing runs or waits in the engine and the server holds no request; returns /server_info."""
    deadline = time.monotonic() + timeout
    info: dict = {}
    while time.monotonic() < deadline:
        info = server_info(url, headers)
        if info["running"] == 0 and info["waiting"] == 0 and info["server"]["inflight_sequences"] == 0:
            return info
        time.sleep(0.1)
    raise AssertionError(f"the server did not become idle: {info}")


def assert_no_kv_leak(info: dict) -> None:
    """Idle invariant: every KV slot is free or held by the prefix cache, none protected by a request."""
    assert info["cache_protected_tokens"] == 0, info
    assert info["kv_free_tokens"] + info["cache_evictable_tokens"] == info["kv_total_tokens"], info


def assert_openai_error(resp: httpx.Response, status: int, param: str | None = None,
                        code: str | None = None) -> dict:
    """The response has `status` and an OpenAI error body (optionally with this param/code)."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    body = resp.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and len(err["message"]) <= 400
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err

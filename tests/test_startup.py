"""A first run that says what is happening: the start-up block of `sprig serve`, progress bars for the first-run
builds and weight loading (on a terminal only), and log levels that match events (a clean shutdown and a replica
coming back are INFO, not WARNING)."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import pytest
from test_server_helpers import ServerProcess, tiny_model

from sprig.kernels import cpu_native
from sprig.runtime.model import loader
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.router.policy import PolicyConfig, Selector
from sprig.runtime.router.workers import HealthSettings, WorkerPool

LABELS = ("model", "dtype", "device", "attention backend", "linear kernels", "decode graphs",
          "overlap schedule", "threads", "KV pool", "radix cache", "host KV tier", "grammar backend",
          "tensor parallel", "pipeline parallel", "speculative", "data parallel")


def test_serve_prints_one_start_up_block_and_shuts_down_without_a_warning():
    server = ServerProcess("--log-level", "info", "--disable-radix-cache")  # a global flag after the command
    try:
        out = server.output()
    finally:
        status = server.stop()
    lines = out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("sprig: serving "))
    assert f"at {server.url} (OpenAI API: {server.url}/v1)" in lines[title]
    block = {k: v.strip() for k, v in (line.strip().split(": ", 1) for line in lines[title + 1:title + 1 + len(LABELS)])}
    assert tuple(block) == LABELS
    assert block["model"].startswith(f"{tiny_model()} (safetensors, LlamaForCausalLM, ")
    assert block["dtype"].startswith("float32 (--dtype float32)")
    assert re.fullmatch(r"(cpu|torch) \(.+\)", block["attention backend"])
    assert re.fullmatch(r"torch x \d+", block["linear kernels"])  # fp32: F.linear (sprig's CPU kernels take bf16)
    assert block["decode graphs"].startswith("off (")  # fp32 linears run in torch (or no C kernels: torch backend)
    assert block["threads"] == "1 (--num-threads)"
    assert re.fullmatch(r"8192 tokens, \d+\.\d\d GiB, page size 16", block["KV pool"])
    assert block["radix cache"].startswith("off")
    assert block["host KV tier"] == "off"
    assert (block["tensor parallel"], block["pipeline parallel"], block["data parallel"]) == ("1", "1", "1")
    final = server.output()
    assert status == 0
    assert "INFO sprig.runtime.server.state: draining" in final  # --log-level info after `serve` took effect
    assert " WARNING " not in final, final


def test_a_replica_coming_back_is_info_and_going_down_a_warning(caplog: pytest.LogCaptureFixture):
    pool = WorkerPool(["http://a"], Selector(PolicyConfig(), 1), HealthSettings())
    with caplog.at_level(logging.INFO, logger="sprig.runtime.router.workers"):
        pool.mark_up(0)
        pool.mark_down(0, "connection refused")
        pool.mark_up(0)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert levels == [(logging.INFO, "worker http://a is healthy"),
                      (logging.WARNING, "worker http://a is unhealthy: connection refused"),
                      (logging.INFO, "worker http://a is healthy")]


class Stderr(io.StringIO):
    """A stand-in for stderr that is, or is not, a terminal."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("terminal", [True, False])
def test_first_run_builds_and_loading_show_bars_on_a_terminal_only(terminal, tmp_path, monkeypatch):
    monkeypatch.setenv("SPRIG_CACHE_DIR", str(tmp_path))  # nothing built yet: a first run
    monkeypatch.setattr(loader, "PROGRESS_DELAY_S", 0.0)  # the tiny model loads faster than the real delay
    stderr = Stderr(terminal)
    monkeypatch.setattr(sys, "stderr", stderr)
    path = checkpoint_path("tiny-llama")
    lib = cpu_native.load_library() if cpu_native._compiler() else None
    loader.load_model(path, dtype="float32")
    monkeypatch.undo()
    out = stderr.getvalue()
    bars = {"building the tiny-llama checkpoint (first run)": "4/4", "loading weights": "100%"}
    if lib is not None:
        steps = len(cpu_native.SOURCES) + 1
        bars["compiling sprig's CPU kernels (first run)"] = f"{steps}/{steps}"
    for desc, done in bars.items():
        finished = [line for line in re.split(r"[\r\n]", out) if line.startswith(desc) and done in line]
        assert bool(finished) == terminal, (desc, out[-2000:])
    if not terminal:
        assert "\r" not in out, out[-2000:]
    # The bars change nothing: the same checkpoint bytes as the one built for the other tests.
    built = (path / "model.safetensors").read_bytes()
    assert built == (Path(tiny_model()) / "model.safetensors").read_bytes()

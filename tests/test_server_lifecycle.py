"""Lifecycle: SIGTERM drains in-flight requests then aborts the rest and exits 0; startup failures exit non-zero."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest
from test_server_helpers import ServerProcess, server_info


def _stream_lines(url: str, body: dict, out: list, first_line: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=120) as client, \
            client.stream("POST", "/v1/completions", json=body) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                out.append(line[6:])
                first_line.set()


def _wait_inflight(url: str, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while server_info(url)["server"]["inflight_sequences"] < count:
        assert time.monotonic() < deadline
        time.sleep(0.02)


LONG = {"prompt": "long", "max_tokens": 1900, "ignore_eos": True, "temperature": 1.0, "n": 8, "stream": True}


@pytest.fixture(scope="module")
def servers():
    """Both servers start together (their torch imports overlap)."""
    pair = {"drain": ServerProcess("--shutdown-timeout", "1.5", wait=False),
            "now": ServerProcess("--shutdown-timeout", "0", wait=False)}
    try:
        for s in pair.values():
            s.wait_ready()
        yield pair
    finally:
        for s in pair.values():
            s.stop()


def test_sigterm_finishes_in_flight_requests_aborts_the_rest_and_exits_0(servers):
    server = servers["drain"]
    try:
        lines: list[str] = []
        started = threading.Event()
        long = threading.Thread(target=_stream_lines, args=(server.url, LONG, lines, started))
        long.start()
        assert started.wait(60)
        medium: dict = {}

        def run_medium() -> None:
            medium["resp"] = httpx.post(server.url + "/v1/completions", timeout=60,
                                        json={"prompt": "m", "max_tokens": 40, "ignore_eos": True})

        worker = threading.Thread(target=run_medium)
        worker.start()
        _wait_inflight(server.url, 9)
        signaled = time.monotonic()
        server.signal(signal.SIGTERM)
        worker.join(30)
        long.join(30)
        code = server.proc.wait(30)
        elapsed = time.monotonic() - signaled
    finally:
        server.stop()
    assert code == 0, server.output()
    assert elapsed < 1.5 + 10
    resp = medium["resp"]
    assert resp.status_code == 200 and resp.json()["choices"][0]["finish_reason"] == "length"
    assert lines[-1] == "[DONE]"
    finishes = {}
    for line in lines[:-1]:
        for choice in json.loads(line)["choices"]:
            if choice["finish_reason"] is not None:
                finishes[choice["index"]] = choice["finish_reason"]
    assert finishes == dict.fromkeys(range(8), "abort")
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", timeout=5)


def test_shutdown_timeout_zero_aborts_at_once(servers):
    server = servers["now"]
    try:
        lines: list[str] = []
        started = threading.Event()
        long = threading.Thread(target=_stream_lines, args=(server.url, LONG, lines, started))
        long.start()
        assert started.wait(60)
        signaled = time.monotonic()
        server.signal(signal.SIGINT)
        long.join(30)
        stream_ended = time.monotonic() - signaled
        code = server.proc.wait(30)
    finally:
        server.stop()
    assert code == 0 and lines[-1] == "[DONE]"
    assert stream_ended < 2.0  # the process itself then needs Python/torch teardown time
    said = server.output()
    assert "sprig: draining: 8 sequences in flight get up to 0 s to finish (Ctrl-C again stops at once)" in said
    assert said.rstrip().endswith("sprig: stopped") and "Traceback" not in said


def test_a_model_that_fails_to_load_exits_non_zero(tmp_path, capsys):
    from sprig.runtime.cli import main

    (tmp_path / "config.json").write_text("{}")
    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "failed to load" in err and "Traceback" not in err


def test_busy_port_and_bad_options_exit_non_zero_with_one_line(capsys):
    from sprig.runtime.cli import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert main(["serve", "--port", str(sock.getsockname()[1])]) == 2
    assert "cannot listen" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--max-queued-requests", "0"]) == 2
    assert "max-queued-requests" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--api-keys", "/nonexistent/keys.toml"]) == 2
    assert "keys file" in capsys.readouterr().err

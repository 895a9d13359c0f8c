"""`sprig router` / `sprig serve --dp-size`: the cache-aware policy, the proxied API, and a replica that dies."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
from test_server_helpers import child_pids

from sprig.runtime.router.launch import args_to_argv
from sprig.runtime.router.policy import Policy, PolicyConfig, RoutingKey, Selector, routing_key

GREEDY = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}
WORDS = ["alpha beta gamma", "delta epsilon zeta", "eta theta iota", "kappa lambda mu"]  # no shared prefixes


# --- policy ---------------------------------------------------------------------------------------------------------
def test_routing_key_reads_every_route():
    assert routing_key("/generate", {"text": "héllo"}).tokens.tolist() == list("héllo".encode())
    assert routing_key("/generate", {"text": ["ab", "cd"]}).tokens.tolist() == [97, 98]
    ids = routing_key("/generate", {"input_ids": [5, 6, 7]})
    assert ids.namespace == "ids" and ids.tokens.tolist() == [5, 6, 7]
    assert routing_key("/v1/completions", {"prompt": "xy"}).tokens.tolist() == [120, 121]
    chat = routing_key("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"},
                                                             {"role": "user", "content": [{"type": "text",
                                                                                           "text": "hi"}]}]})
    assert bytes(chat.tokens.astype(np.uint8)) == b"system\nbe brief\nuser\nhi\n"
    assert len(routing_key("/generate", "not a dict").tokens) == 0


def test_cache_aware_keeps_prefixes_together_and_balances_load():
    sel = Selector(PolicyConfig(balance_abs=4, balance_rel=1.5), 2)
    system = "You are a helpful assistant. " * 20
    a = sel.choose(RoutingKey.of_text(system + "q1"), [0, 0], [0, 1])
    b = sel.choose(RoutingKey.of_text("Another long system prompt. " * 20 + "q1"), [1, 0], [0, 1])
    assert (a.reason, b.reason) == ("room", "room") and a.index != b.index  # new prefixes spread by tree size
    again = sel.choose(RoutingKey.of_text(system + "q2"), [3, 0], [0, 1])
    assert again.index == a.index and again.reason == "cache" and again.matched >= len(system)
    skewed = sel.choose(RoutingKey.of_text(system + "q3"), [20, 1], [0, 1])
    assert skewed.index == 1 and skewed.reason == "balance"  # loads diverge: the least loaded wins
    only = sel.choose(RoutingKey.of_text(system + "q4"), [0, 0], [1])
    assert only.index == 1  # an unhealthy replica is never chosen, whatever its cache
    sel.forget(a.index)
    assert sel.indexes[a.index].size == 0
    with pytest.raises(LookupError):
        sel.choose(RoutingKey.of_text("x"), [0, 0], [])


def test_round_robin_cycles_and_tree_is_bounded():
    rr = Selector(PolicyConfig(policy=Policy.ROUND_ROBIN), 3)
    assert [rr.choose(RoutingKey.empty(), [0, 0, 0], [0, 1, 2]).index for _ in range(4)] == [0, 1, 2, 0]
    small = Selector(PolicyConfig(max_tree_tokens=100), 1)
    for i in range(10):
        small.choose(RoutingKey.of_text(f"{i} " * 30), [0], [0])
    assert small.indexes[0].size <= 100


def test_dp_flags_are_rebuilt_for_replicas():
    p = argparse.ArgumentParser()
    p.add_argument("--model", "--model-path", dest="model_path", default=None)
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--port", type=int, default=1)
    args = p.parse_args(["--model", "m", "--num-threads", "1", "--disable-radix-cache", "--port", "9"])
    assert args_to_argv(p, args, {"port"}) == ["--model-path", "m", "--num-threads", "1", "--disable-radix-cache"]


def test_router_needs_valid_flags():
    out = subprocess.run([sys.executable, "-m", "sprig.runtime.cli", "router", "--workers", "http://x:1",
                          "--cache-threshold", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--cache-threshold must be in [0, 1]" in out.stderr


# --- two live replicas behind `sprig serve --dp-size 2` -------------------------------------------------------------
def _replica_pid(parent: int, port: int) -> int:
    """The child of `parent` that listens on `port` (found through its socket inode)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    inodes = {f"socket:[{r[9]}]" for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port}
    for pid in child_pids(parent):
        fds = Path(f"/proc/{pid}/fd")
        if any(fd.is_symlink() and os.readlink(fd) in inodes for fd in fds.iterdir()):
            return pid
    raise AssertionError(f"no replica listens on {port}")


def _accepts(url: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def dp_server(tiny_paths):
    cmd = [sys.executable, "-m", "sprig.runtime.cli", "serve", "--model", str(tiny_paths["tiny-llama"]), "--dp-size",
           "2", "--num-threads", "1", "--max-total-tokens", "8192", "--port", "0", "--health-interval", "0.5"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 180
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        if line.startswith("sprig: routing"):
            url = line.split(" at ", 1)[1].split()[0]
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep the pipe drained
    if url is None or url.endswith(":0"):
        proc.kill()
        pytest.fail("sprig serve --dp-size 2 did not start")
    yield proc, url
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_router_proxies_the_single_server_api(dp_server):
    proc, url = dp_server
    with httpx.Client(base_url=url, timeout=60) as c:
        for _ in range(50):
            if c.get("/health").status_code == 200 and c.get("/health").json()["healthy_workers"] == 2:
                break
            time.sleep(0.2)
        workers = [w["url"] for w in c.get("/server_info").json()["router"]["workers"]]
        direct = httpx.post(f"{workers[0]}/generate", json={"text": "hello", "sampling_params": GREEDY}).json()
        routed = c.post("/generate", json={"text": "hello", "sampling_params": GREEDY}).json()
        assert routed["output_ids"] == direct["output_ids"]
        assert c.get("/v1/models").json()["data"][0]["id"]
        body = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
        with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = [line for line in resp.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) >= 3
        assert c.post("/flush_cache").json()["flushed"] is True
        assert c.post("/reset_prefix_cache", params={"timeout": 5}).json()["flushed"] is True  # vLLM's name
        assert c.get("/model_info").json() == httpx.get(f"{workers[0]}/model_info").json()
        # A shared prefix stays on one replica, so its later requests hit that replica's cache.
        system = "You are a terse assistant who answers in one word. " * 8
        metas = [c.post("/generate", json={"text": f"{system}Q{i}", "sampling_params": GREEDY}).json()["meta_info"]
                 for i in range(4)]
        assert all(m["cached_tokens"] > 0 for m in metas[1:])
        assert c.post("/generate", content=b"{not json").status_code == 400  # the replica's own validation
        assert c.get("/metrics").text.count("sprig_router_worker_healthy") == 2


def test_a_killed_replica_fails_only_its_in_flight_requests(dp_server):
    proc, url = dp_server
    long = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}
    client = httpx.Client(base_url=url, timeout=120)
    workers = [w["url"] for w in client.get("/server_info").json()["router"]["workers"]]
    replicas = [_replica_pid(proc.pid, int(w.rsplit(":", 1)[1])) for w in workers]
    assert client.post("/flush_cache").json()["flushed"]  # why: empty prefix trees, so "room" alternates replicas
    results: dict[int, tuple[int, bytes]] = {}

    def stream(i: int) -> None:
        with client.stream("POST", "/generate", json={"text": WORDS[i], "sampling_params": long,
                                                      "stream": True}) as resp:
            results[i] = (resp.status_code, resp.read())

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = client.get("/server_info").json()["router"]["workers"]
        if all(w["in_flight"] >= 1 for w in info) and sum(w["in_flight"] for w in info) == 4:
            break
        time.sleep(0.05)
    os.kill(replicas[0], signal.SIGKILL)
    while _accepts(workers[0]):  # why: until its last thread is gone, a connection still lands in its backlog
        time.sleep(0.01)
    # Requests sent after it died all succeed: a refused connection is retried on the other replica.
    after = [client.post("/generate", json={"text": f"after {i}", "sampling_params": GREEDY}) for i in range(6)]
    assert [r.status_code for r in after] == [200] * 6, after[0].text
    for t in threads:
        t.join(120)
    failed = [body for code, body in results.values() if b"worker_failed" in body]
    finished = [body for code, body in results.values() if b'"finish_reason":{"type":"length"' in body]
    assert failed and finished and len(failed) + len(finished) == 4
    for body in failed:
        event = [ln for ln in body.decode().split("\n\n") if "worker_failed" in ln][0]
        assert workers[0] in orjson.loads(event.removeprefix("data: "))["error"]["message"]
    info = client.get("/server_info").json()["router"]
    assert info["workers"][0]["status"] == "unhealthy" and info["failed"] == len(failed)
    assert client.get("/health").json()["healthy_workers"] == 1
    client.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not any(_alive(pid) for pid in replicas)

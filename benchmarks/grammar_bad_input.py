"""Bad constraints against a running `sprig serve`: each must get a 400 within 1 s while others are served.

    python benchmarks/grammar_bad_input.py [--rounds 2]

Starts `sprig serve` on the tiny test model (one thread, 16 MB request limit), keeps four clients sending plain
`/generate` requests the whole time, and sends each bad constraint (invalid schemas and regexes, `$ref` cycles,
10^5-way alternations, 30,000-deep nesting, 100,000-member enums, a 10 MB schema, malformed grammars) through
`/generate` and through `/v1/chat/completions` (`response_format`, or the `regex` / `ebnf` extra body fields).
Each round sends every case once more: the second round is answered from the grammar cache's stored error.
Prints, per case and route, the status, the seconds to the answer and the error code; then the plain requests'
latency before and during the storm, the server's and its compile workers' resident memory, and the grammar
compiler's counters from /metrics. Saves results/grammar_bad_input.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

DEEP = 30_000
CASES: dict[str, tuple[str, Any]] = {  # name: (constraint kind, value)
    "invalid JSON schema text": ("json_schema", '{"type": "object",'),
    "invalid schema (type: 5)": ("json_schema", {"type": 5}),
    "invalid regex": ("regex", "(ab"),
    "backreference": ("regex", r"(a)\1"),
    "$ref cycle": ("json_schema", {"$ref": "#"}),
    "$ref cycle through allOf": ("json_schema", {"$defs": {"a": {"$ref": "#/$defs/b"},
                                                           "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
                                                 "$ref": "#/$defs/a"}),
    "10^5-way regex alternation": ("regex", "|".join(f"w{i}" for i in range(10**5))),
    "10^5-way GBNF alternation": ("ebnf", "root ::= " + "|".join(f'"{i}"' for i in range(10**5))),
    "30,000-deep schema": ("json_schema", '{"items":' * DEEP + "{}" + "}" * DEEP),
    "30,000-deep regex": ("regex", "(" * DEEP + "a" + ")" * DEEP),
    "30,000-deep GBNF": ("ebnf", "root ::= " + "(" * DEEP + '"a"' + ")" * DEEP),
    "100,000-member enum": ("json_schema", {"enum": [f"w{i}" for i in range(10**5)]}),
    "100,000 numbers enum": ("json_schema", {"enum": list(range(10**5))}),
    "10 MB schema": ("json_schema", '{"enum": [' + ",".join(['"' + "x" * 90 + '"'] * 110_000) + "]}"),
    "DFA explosion (a|b)*a(a|b){40}": ("regex", "(a|b)*a(a|b){40}"),
    "malformed GBNF": ("ebnf", 'root ::= ( "a" | "b"'),
}


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def native_body(kind: str, value: Any) -> bytes:
    return json.dumps({"text": "Answer:", "sampling_params": {"max_new_tokens": 8, kind: as_text(value)}}).encode()


def chat_body(kind: str, value: Any) -> bytes:
    """The body as raw text: a schema goes in verbatim (json.dumps could not even write 30,000 levels)."""
    head = '{"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, '
    if kind == "json_schema":
        return (head + '"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": '
                + as_text(value) + "}}}").encode()
    return (head + json.dumps(kind) + ": " + json.dumps(value) + "}").encode()


class Server:
    def __init__(self, port: int) -> None:
        from sprig.runtime.model.checkpoints import checkpoint_path

        self.url = f"http://127.0.0.1:{port}"
        fd, self.log_path = tempfile.mkstemp(prefix="sprig-bad-input-", suffix=".log")
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sprig.runtime.cli", "--log-level", "warning", "serve", "--model",
             str(checkpoint_path("tiny-llama")), "--dtype", "float32", "--num-threads", "1", "--port", str(port),
             "--max-request-bytes", str(16 << 20), "--random-seed", "0"], stdout=fd, stderr=subprocess.STDOUT,
            env=env)
        os.close(fd)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError("server did not start: " + Path(self.log_path).read_text()[-2000:])

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of the server and of each of its child processes (the compile workers), MB."""
        out = {"server": _rss(self.proc.pid)}
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            except OSError:
                continue
            if fields.get("PPid", "").strip() == str(self.proc.pid):
                out[f"child {status.parent.name}"] = _rss(int(status.parent.name))
        return out

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PlainLoad:
    """Clients sending unconstrained requests back to back; latencies are tagged with the phase."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.phase, self.stop = url, "before", threading.Event()
        self.latencies: dict[str, list[float]] = {"before": [], "during": []}
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def _run(self, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            n = 0
            while not self.stop.is_set():
                n += 1
                t0 = time.perf_counter()
                r = http.post("/generate", json={"text": f"client {i} request {n}:",
                                                  "sampling_params": {"max_new_tokens": 16}})
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text[:100]}")
                self.latencies[self.phase].append(time.perf_counter() - t0)


def send(http: httpx.Client, route: str, kind: str, value: Any) -> tuple[int, float, str]:
    body = native_body(kind, value) if route == "/generate" else chat_body(kind, value)
    t0 = time.perf_counter()
    r = http.post(route, content=body, headers={"content-type": "application/json"})
    seconds = time.perf_counter() - t0
    try:
        err = r.json().get("error", {})
        code = err.get("code") or err.get("type") or ""
    except (ValueError, AttributeError):
        code = r.text[:60]
    return r.status_code, seconds, str(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=31977)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "results" /
                                             "grammar_bad_input.json"))
    args = parser.parse_args()
    server = Server(args.port)
    rows: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            http.post("/generate", json={"text": "warm", "sampling_params": {"max_new_tokens": 2, "regex": "warm"}})
            rss_before = server.rss_mb()
            load = PlainLoad(server.url, clients=4)
            for t in load.threads:
                t.start()
            time.sleep(3.0)
            load.phase = "during"
            print(f"{'case':34} {'route':22} {'round':>5} {'status':>6} {'seconds':>8}  code")
            for rnd in range(args.rounds):
                for name, (kind, value) in CASES.items():
                    for route in ("/generate", "/v1/chat/completions"):
                        status, seconds, code = send(http, route, kind, value)
                        rows.append({"case": name, "route": route, "round": rnd, "status": status,
                                     "seconds": seconds, "code": code})
                        print(f"{name:34} {route:22} {rnd:5} {status:6} {seconds:8.3f}  {code}", flush=True)
            load.stop.set()
            for t in load.threads:
                t.join(60)
            rss_after = server.rss_mb()
            metrics = {line.split()[0]: float(line.split()[1]) for line in http.get("/metrics").text.splitlines()
                       if line.startswith("sprig_grammar") and not line.startswith("#")}
    finally:
        server.stop()
    before, during = load.latencies["before"], load.latencies["during"]
    summary = {
        "bad_requests": len(rows), "all_400": all(r["status"] == 400 for r in rows),
        "max_seconds": max(r["seconds"] for r in rows),
        "max_seconds_first_round": max(r["seconds"] for r in rows if r["round"] == 0),
        "plain_requests_before": len(before), "plain_requests_during": len(during),
        "plain_p50_before_s": statistics.median(before), "plain_p50_during_s": statistics.median(during),
        "plain_max_during_s": max(during), "plain_failures": load.failures[:5],
        "rss_mb_before": rss_before, "rss_mb_after": rss_after, "grammar_metrics": metrics}
    print(json.dumps(summary, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

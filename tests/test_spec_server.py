"""`sprig serve --speculative-algorithm ngram`: the flags parse, /generate's meta_info carries spec_verify_ct and
spec_accept_length, /metrics and /server_info report the acceptance, and a bad flag value exits with a message."""

from __future__ import annotations

import subprocess
import sys

import httpx
from prometheus_client.parser import text_string_to_metric_families
from test_server_helpers import ServerProcess


def test_server_reports_speculation():
    loop = [50, 60, 70, 80] * 4
    with ServerProcess("--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "3") as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        body = {"input_ids": loop, "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}
        meta = http.post("/generate", json=body).json()["meta_info"]
        assert meta["spec_verify_ct"] >= 1 and 1.0 <= meta["spec_accept_length"] <= 4.0
        info = http.get("/server_info").json()
        assert info["spec_algorithm"] == "ngram" and info["spec_verify_steps"] >= meta["spec_verify_ct"]
        metrics = {s.name: s.value for f in text_string_to_metric_families(http.get("/metrics").text)
                   for s in f.samples}
    assert metrics["sprig_spec_verify_steps_total"] == info["spec_verify_steps"]
    assert metrics["sprig_spec_accept_length"] == info["spec_accept_length"]
    assert 0.0 <= metrics["sprig_spec_accept_rate"] <= 1.0


def test_bad_speculative_flag_exits_with_a_message():
    proc = subprocess.run([sys.executable, "-m", "sprig.runtime.cli", "serve", "--speculative-algorithm", "ngram",
                           "--speculative-num-draft-tokens", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "speculative_num_draft_tokens" in proc.stderr

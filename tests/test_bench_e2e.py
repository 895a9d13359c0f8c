"""Benchmarks end to end on the tiny checkpoint (fp32, one thread): `sprig bench offline`, `sprig bench serve`
against a live `sprig serve`, and a one-round `benchmarks/compare.py` with its report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sprig.runtime.bench.systems import Setup, sprig_server
from sprig.runtime.cli import main as sprig_main
from sprig.runtime.model.checkpoints import checkpoint_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny() -> Path:
    return checkpoint_path("tiny-llama")


@pytest.fixture(scope="module")
def server(tiny: Path, tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("logs")
    setup = Setup(model_dir=tiny, dtype="float32", threads=1, kv_tokens=8192, log_dir=logs, progress=False)
    system = sprig_server(setup, cache=True, port=_free_port())
    system.start()
    yield system
    system.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _summary(path: Path) -> dict:
    return json.loads(path.read_text())["summary"]


def test_bench_offline_json_schema_outputs_validate(tiny: Path, tmp_path: Path, capsys):
    out = tmp_path / "offline.json"
    code = sprig_main(["bench", "offline", "--model", str(tiny), "--dtype", "float32", "--num-threads", "1",
                       "--dataset", "json-schema", "--num-prompts", "4", "--input-len", "16", "--output-len", "64",
                       "--max-concurrency", "2", "--disable-progress", "--output", str(out), "--save-text"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Outputs valid for the schema             100.0%" in printed and "step profile:" in printed
    data = json.loads(out.read_text())
    assert data["summary"]["completed"] == 4 and data["summary"]["json_valid_share"] == 1.0
    assert data["engine_stats"]["steps"] > 0 and data["engine_stats"]["model_time_s"] > 0
    assert all(json.loads(r["text"]) for r in data["records"])


def test_bench_serve_shared_prefix_reports_cached_tokens(server, tmp_path: Path):
    out = tmp_path / "sp.json"
    code = sprig_main(["bench", "serve", "--base-url", server.url + "/v1", "--tokenizer", "tiny-llama",
                       "--dataset", "shared-prefix", "--num-prompts", "8", "--input-len", "8", "--prefix-len", "64",
                       "--num-groups", "2", "--output-len", "6", "--max-concurrency", "2", "--request-rate", "50",
                       "--arrival", "fixed", "--disable-progress", "--output", str(out)])
    assert code == 0
    s = _summary(out)
    assert (s["completed"], s["failed"], s["total_output_tokens"]) == (8, 0, 48)
    assert s["cached_tokens"] >= 6 * 48 and 0 < s["cache_hit_rate"] < 1
    assert s["ttft_ms"]["p50"] > 0 and s["tpot_ms"]["p50"] > 0 and s["request_rate"] == 50


def test_bench_serve_multi_turn_finds_the_tokenizer_and_reuses_history(server, tmp_path: Path):
    out = tmp_path / "mt.json"
    code = sprig_main(["bench", "serve", "--base-url", server.url, "--dataset", "multi-turn", "--num-prompts", "3",
                       "--num-turns", "2", "--input-len", "8", "--output-len", "4", "--disable-progress",
                       "--output", str(out)])
    assert code == 0
    records = json.loads(out.read_text())["records"]
    assert sorted((r["session"], r["turn"]) for r in records) == [(i, k) for i in range(3) for k in range(2)]
    second = [r for r in records if r["turn"] == 1]
    assert all(r["cached_tokens"] > 8 and r["completion_tokens"] == 4 for r in second)


def test_bench_serve_bad_options_exit_with_one_line(server, capsys):
    assert sprig_main(["bench", "serve", "--base-url", server.url, "--dataset", "nope"]) == 2
    assert "unknown dataset" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_one_round_writes_report(tiny: Path, tmp_path: Path):
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("compare", ROOT / "benchmarks" / "compare.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    out = tmp_path / "report"
    code = compare.main(["--model", str(tiny), "--dtype", "float32", "--threads", "1", "--systems", "sprig",
                         "transformers", "llama.cpp", "--workloads", "random", "batch1", "--rounds", "1",
                         "--num-prompts", "4", "--batch1-prompts", "2", "--batch1-output-len", "8", "--mode", "both",
                         "--max-concurrency", "2", "--input-len", "8", "--output-len", "4", "--sweep-rates", "20",
                         "--llama-server", str(tmp_path / "missing"), "--out-dir", str(out),
                         "--work-dir", str(tmp_path / "work")])
    assert code == 0
    data = json.loads((out / "compare.json").read_text())
    assert {r["system"] for r in data["runs"]} == {"sprig", "transformers"}
    assert {(r["mode"], r["workload"]) for r in data["runs"]} == {
        (m, w) for m in ("alone", "alternating") for w in ("random", "batch1")}
    assert all(r["summary"]["max_concurrency"] == 1 for r in data["runs"] if r["workload"] == "batch1")
    assert "llama.cpp" in data["skipped"] and data["sweep"][0]["system"] == "sprig"
    assert set(data["kernels"]["sprig"]) == {"linear kernels", "attention backend"} and "flags" in data["cpu"]
    report = (out / "report.md").read_text()
    assert "| random | sprig / transformers | output_tok_s |" in report and "llama.cpp skipped" in report
    assert "## Results, alone" in report and "## Batch-1 decode" in report
    assert (out / "ttft_cdf.png").exists() and (out / "throughput_vs_rate.png").exists()

"""compare.py's machinery without real servers: alone / alternating schedules, fresh seeds, batch1's concurrency,
the two-mode report, CPU facts from cpuinfo text and kernel lines from a sprig start-up log."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sprig.runtime.bench.cli import BenchResult, load_of
from sprig.runtime.bench.client import LoadSpec
from sprig.runtime.bench.datasets import DatasetKind, Session, WorkloadSpec, load_tokenizer
from sprig.runtime.bench.machine import CpuInfo, kernel_env, parse_cpuinfo
from sprig.runtime.bench.metrics import RequestRecord, summarize
from sprig.runtime.bench.report import markdown, render, with_modes
from sprig.runtime.bench.schedule import WARMUP, Mode, Plan, Runner, SeedPlan
from sprig.runtime.bench.systems import (
    ServerSystem,
    Setup,
    SystemKind,
    SystemUnavailable,
    make_system,
    parse_facts,
    resident_of,
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-llama")


@dataclass
class FakeSystem:
    """Logs start / run / stop into a shared list; each run 'generates' one token per request."""

    name: str
    log: list[tuple[Any, ...]]
    alive: set[str]
    fail_start: bool = False
    runs: list[tuple[str, int, int | None]] = field(default_factory=list)

    def start(self) -> None:
        if self.fail_start:
            raise SystemUnavailable("not installed")
        self.alive.add(self.name)
        self.log.append(("start", self.name))

    def run(self, spec: WorkloadSpec, sessions: list[Session], load: LoadSpec, tok: Any) -> BenchResult:
        self.log.append(("run", self.name, frozenset(self.alive)))
        self.runs.append((spec.kind.value, spec.seed, load.max_concurrency))
        records = [RequestRecord(s.sid, 0, 0.0, 1.0, 0.1, [0.1], 8, 2) for s in sessions]
        summary = summarize(records, self.name, spec.kind.value, load.request_rate, load.max_concurrency, "0")
        return BenchResult(summary, {}, records)

    def stop(self) -> None:
        self.alive.discard(self.name)
        self.log.append(("stop", self.name))


KINDS = [SystemKind.SPRIG, SystemKind.LLAMA_CPP, SystemKind.TRANSFORMERS]


def _spec(kind: DatasetKind, seed: int) -> WorkloadSpec:
    return WorkloadSpec(kind=kind, num_prompts=2, input_len=4, output_len=2, seed=seed)


def _runner(tok: Any, rounds: int = 2, rates: tuple[float, ...] = (), broken: SystemKind | None = None):
    log: list[tuple[Any, ...]] = []
    alive: set[str] = set()
    built: dict[str, FakeSystem] = {}
    workloads = [DatasetKind.RANDOM, DatasetKind.BATCH1]

    def make(kind: SystemKind, index: int) -> FakeSystem:
        built[kind.value] = built.get(kind.value) or FakeSystem(kind.value, log, alive, kind is broken)
        return built[kind.value]

    plan = Plan(KINDS, workloads, rounds, SeedPlan(7, len(workloads), rounds, len(rates)), _spec, 16, 16, rates)
    data: dict[str, Any] = {"runs": [], "sweep": [], "skipped": {}, "commands": {}}
    return Runner(plan, tok, make, data), log, built


def test_alone_mode_starts_one_system_at_a_time_and_stops_it_before_the_next(tok):
    runner, log, built = _runner(tok, rates=(1.0,))
    runner.run(Mode.ALONE)
    lifecycle = [e for e in log if e[0] != "run"]
    assert lifecycle == [(op, k.value) for k in KINDS for op in ("start", "stop")]
    assert all(e[2] == {e[1]} for e in log if e[0] == "run")  # nothing else alive while a system runs
    # one warm-up and two measured rounds per workload; the sweep skips transformers (no request rate)
    assert [len(built[k.value].runs) for k in KINDS] == [2 * 3 + 1, 2 * 3 + 1, 2 * 3]
    runs = runner.data["runs"]
    assert len(runs) == 3 * 2 * 2 and {r["round"] for r in runs} == {0, 1}
    assert {r["mode"] for r in runs} == {"alone"} and {s["mode"] for s in runner.data["sweep"]} == {"alone"}


def test_warmup_round_is_run_but_not_counted(tok):
    runner, _, built = _runner(tok, rounds=1)
    runner.run(Mode.ALONE)
    seeds = runner.plan.seeds
    warm = seeds.round(Mode.ALONE, 0, WARMUP)
    assert built["sprig"].runs[0] == ("random", warm, 16)
    counted = [r for r in runner.data["runs"] if r["system"] == "sprig"]
    assert len(counted) == 2 and all(r["round"] == 0 for r in counted)


def test_seeds_never_repeat_across_rounds_warmups_modes_and_sweep(tok):
    runner, _, built = _runner(tok, rounds=3, rates=(1.0, 2.0))
    runner.run(Mode.BOTH)
    for system in built.values():
        seeds = [seed for _, seed, _ in system.runs]
        assert len(seeds) == len(set(seeds)), system.name
    # every system of a mode sees the same prompts in the same round
    assert [s for _, s, _ in built["sprig"].runs[:8]] == [s for _, s, _ in built["llama.cpp"].runs[:8]]
    plan = SeedPlan(0, workloads=3, rounds=4, rates=5)
    every = [plan.round(m, w, r) for m in (Mode.ALONE, Mode.ALTERNATING) for w in range(3)
             for r in range(WARMUP, 4)] + [plan.sweep(m, i) for m in (Mode.ALONE, Mode.ALTERNATING) for i in range(5)]
    assert len(every) == len(set(every))


def test_alternating_starts_every_system_first_and_reverses_the_order(tok):
    runner, log, _ = _runner(tok)
    runner.run(Mode.ALTERNATING)
    assert [e[0] for e in log[:3]] == ["start"] * 3 and [e[0] for e in log[-3:]] == ["stop"] * 3
    order = [e[1] for e in log if e[0] == "run"]
    names = [k.value for k in KINDS]
    assert order[:6] == names + names[::-1]
    assert {r["mode"] for r in runner.data["runs"]} == {"alternating"}


def test_both_runs_alone_then_alternating_and_skips_what_cannot_start(tok):
    runner, log, built = _runner(tok, rounds=1, broken=SystemKind.LLAMA_CPP)
    runner.run(Mode.BOTH)
    modes = [r["mode"] for r in runner.data["runs"]]
    assert modes == sorted(modes) and set(modes) == {"alone", "alternating"}  # alone first
    assert "llama.cpp" in runner.data["skipped"] and not built["llama.cpp"].runs
    assert ("stop", "transformers") in log and not any(e[1] == "llama.cpp" for e in log)


def test_batch1_runs_one_request_at_a_time_whatever_the_flag(tok):
    runner, _, built = _runner(tok, rounds=1)
    runner.run(Mode.ALTERNATING)
    bounds = {kind: conc for kind, _, conc in built["sprig"].runs}
    assert bounds == {"random": 16, "batch1": 1}
    assert DatasetKind.BATCH1.max_concurrency == 1 and DatasetKind.RANDOM.max_concurrency is None
    args = argparse.Namespace(dataset="batch1", request_rate=float("inf"), arrival="poisson", max_concurrency=8,
                              seed=0)
    assert load_of(args).max_concurrency == 1


def _run(mode: str | None, system: str, wl: str, tok_s: float, tpot_mean: float = 5.0) -> dict[str, Any]:
    stat = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p99": 3.0}
    summary = {"duration_s": 1.0, "output_tok_s": tok_s, "request_throughput": 1.0, "ttft_ms": stat,
               "tpot_ms": {**stat, "mean": tpot_mean}, "itl_ms": stat, "cache_hit_rate": None,
               "json_valid_share": None}
    reqs = {"end": [0.5, 1.0], "ttft": [0.1, 0.2], "tpot": [0.01, 0.02], "prompt_tokens": [10, 10],
            "cached_tokens": [None, None]}
    run = {"workload": wl, "round": 0, "system": system, "summary": summary, "requests": reqs, "profile": None}
    return run if mode is None else {**run, "mode": mode}


def _data(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"started": "now", "machine": "test box", "load_before": "1", "load_after": "1", "skipped": {},
            "setup": {"model": "m", "dtype": "bf16", "threads": 2, "num_prompts": 4, "concurrency": 16,
                      "input_len": 128, "output_len": 64, "prefix_len": 512, "num_groups": 4, "rounds": 1,
                      "batch1_prompts": 4, "batch1_input_len": 128, "batch1_output_len": 256},
            "cpu": {"model": "Test CPU", "flags": ["avx2", "amx_tile"]}, "kernel_env": {"SPRIG_AMX": "0"},
            "kernels": {"sprig": {"linear kernels": "vec avx2", "attention backend": "native"}},
            "runs": runs, "sweep": []}


def test_report_shows_both_modes_batch1_and_quantized_peers_side_by_side():
    runs = [_run(mode, s, wl, v * (2 if mode == "alone" else 1), tpot)
            for mode in ("alone", "alternating") for wl in ("random", "batch1")
            for s, v, tpot in (("sprig", 300.0, 4.0), ("llama.cpp", 100.0, 8.0), ("sprig-int8", 200.0, 3.0),
                               ("llama.cpp-q8_0", 100.0, 6.0))]
    runs = [r for r in runs if not (r["mode"] == "alone" and r["system"] == "llama.cpp")] + [
        _run("alone", "llama.cpp", wl, 300.0) for wl in ("random", "batch1")]
    page = markdown(with_modes(_data(runs)), [])
    assert "## Results, alone" in page and "## Results, alternating" in page
    assert "| workload | ratio | metric | alone | alternating | target | status |" in page
    assert "| random | sprig / llama.cpp | output_tok_s | 2.00x | 3.00x | ≥ 1.5x | met |" in page
    assert "| random | sprig-int8 / llama.cpp-q8_0 | output_tok_s | 2.00x | 2.00x |" in page
    assert "| batch1 | sprig / llama.cpp | output_tok_s | 2.00x | 3.00x | ≥ 1x | met |" in page
    assert "| sprig | 600.0 | 4.0 | 300.0 | 4.0 |" in page  # batch1: tok/s and mean TPOT per mode
    assert "ISA flags: avx2 amx_tile" in page and "SPRIG_AMX=0" in page and "linear kernels: vec avx2" in page
    assert "**alone**: each system by itself" in page


def test_report_of_an_old_compare_json_without_modes_is_alternating(tmp_path: Path):
    pytest.importorskip("matplotlib")
    data = _data([_run(None, "sprig", "random", 150.0), _run(None, "llama.cpp", "random", 100.0)])
    for key in ("cpu", "kernel_env", "kernels"):
        data.pop(key)
    page = render(data, tmp_path).read_text()
    assert "## Results, alternating" in page and "## Results, alone" not in page
    assert "| random | sprig / llama.cpp | output_tok_s | 1.50x | ≥ 1.5x | met |" in page
    assert "sprig-int8" not in page  # quantized targets appear only when measured


def test_cpu_flags_and_model_from_cpuinfo_text():
    x86 = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse avx2 fma f16c avx512f "
           "avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8 avx_vnni\n\nprocessor\t: 1\n"
           "model name\t: other\nflags\t\t: fpu\n")
    cpu = parse_cpuinfo(x86)
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.flags == ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
                         "amx_tile", "amx_bf16", "amx_int8")
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve sve2 bf16 i8mm svebf16\nCPU part\t: 0xd4f\n"
    assert parse_cpuinfo(arm, "aarch64") == CpuInfo("aarch64", ("asimd", "sve", "sve2", "bf16", "i8mm"))
    assert parse_cpuinfo("", "box").flags == ()
    assert kernel_env({"SPRIG_AMX": "0", "PATH": "/bin", "ONEDNN_MAX_CPU_ISA": "AVX2"}) == {
        "SPRIG_AMX": "0", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_kernel_lines_from_a_sprig_startup_block():
    log = ("INFO: loading\nsprig: serving default at http://127.0.0.1:1 (OpenAI API: http://127.0.0.1:1/v1)\n"
           "  model:             /m (llama, 2 layers, context 256)\n"
           "  attention backend: native (C kernels)\n"
           "  linear kernels:    AMX bf16 (oneDNN off)  \n"
           "  threads:           2 (--num-threads)\n")
    assert parse_facts(log, ("linear kernels", "attention backend")) == {
        "linear kernels": "AMX bf16 (oneDNN off)", "attention backend": "native (C kernels)"}
    assert parse_facts("nothing yet", ("linear kernels",)) == {}


def test_a_gguf_file_is_served_as_stored_by_sprig_and_llama_server_and_dequantized_by_sprig_bf16(tmp_path: Path):
    gguf = tmp_path / "model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    binary = tmp_path / "llama-server"
    binary.write_text("")
    setup = Setup(model_dir=gguf, log_dir=tmp_path, llama_server=str(binary))
    native = make_system(SystemKind.SPRIG, setup, 0)
    dequantized = make_system(SystemKind.SPRIG_BF16, setup, 1)
    llama = make_system(SystemKind.LLAMA_CPP, setup, 2)
    assert isinstance(native, ServerSystem) and isinstance(dequantized, ServerSystem)
    assert isinstance(llama, ServerSystem)
    assert "--gguf-dequantize" not in native.command and str(gguf) in native.command
    assert dequantized.name == "sprig-bf16" and "--gguf-dequantize" in dequantized.command
    assert dequantized.command[dequantized.command.index("--dtype") + 1] == "bfloat16"
    assert llama.command[llama.command.index("-m") + 1] == str(gguf)  # the same file, not a conversion
    with pytest.raises(SystemUnavailable):
        make_system(SystemKind.LLAMA_CPP_Q8, setup, 3)
    with pytest.raises(SystemUnavailable):
        make_system(SystemKind.SPRIG_BF16, Setup(model_dir=tmp_path), 4)


def test_resident_memory_of_a_live_process_and_of_none():
    import os

    mine = resident_of(os.getpid())
    assert mine is not None and 0 < mine["rss_mib"] <= mine["peak_mib"]
    assert resident_of(2**22 + 12345) is None


def test_gguf_report_holds_sprig_to_the_gguf_targets_and_shows_resident_memory():
    runs = [_run("alone", s, wl, v) for wl, pairs in (("batch1", (("sprig", 110.0), ("llama.cpp", 100.0))),
                                                     ("random", (("sprig", 300.0), ("llama.cpp", 100.0))))
            for s, v in pairs]
    data = _data(runs)
    data["setup"]["gguf"] = True
    data["memory"] = {"sprig": {"rss_mib": 480.2, "peak_mib": 512.9}, "llama.cpp": {"rss_mib": 150.0, "peak_mib": 151}}
    page = markdown(with_modes(data), [])
    assert "| batch1 | sprig / llama.cpp | output_tok_s | 1.10x | ≥ 1.2x | missed by 1.09x |" in page
    assert "| random | sprig / llama.cpp | output_tok_s | 3.00x | ≥ 2x | met |" in page
    assert "| shared-prefix | sprig / llama.cpp | output_tok_s | – | ≥ 3x | not measured |" in page
    assert "sprig / transformers" not in page  # the checkpoint-folder targets are not this run's
    assert "| sprig | 480 | 513 |" in page and "| llama.cpp | 150 | 151 |" in page

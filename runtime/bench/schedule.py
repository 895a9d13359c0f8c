"""How `benchmarks/compare.py` runs its systems, and the seeds that keep every round's prompts fresh.

`alone`: one system at a time, every other one stopped, so no idle server shares the cores (llama.cpp's threads
spin at barriers and collapse when another server process is alive): an unmeasured warm-up round per workload,
then the measured rounds, then the rate sweep, then the system is stopped before the next one starts.
`alternating`: every system up at once, each round run on every system in turn, the order reversed on odd rounds,
so slow drifts in machine load hit every system alike.
Every round (warm-up included) of a mode and workload has its own seed: no server sees a prompt twice, so a
prompt cache cannot flatter repeats; the systems of a mode see the same prompts in the same round.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sprig.runtime.bench.cli import BenchResult
from sprig.runtime.bench.client import Arrival, LoadSpec
from sprig.runtime.bench.datasets import DatasetKind, WorkloadSpec, build_workload
from sprig.runtime.bench.metrics import format_summary
from sprig.runtime.bench.systems import System, SystemKind, SystemUnavailable
from sprig.runtime.model.tokenizer import Tokenizer


class Mode(str, Enum):
    """How systems share the machine during a comparison."""

    ALONE = "alone"
    ALTERNATING = "alternating"
    BOTH = "both"

    @property
    def phases(self) -> list[Mode]:
        """The modes actually run, in order (both: alone first)."""
        return [Mode.ALONE, Mode.ALTERNATING] if self is Mode.BOTH else [self]


WARMUP = -1  # round number of the unmeasured warm-up round
PHASE_INDEX = {Mode.ALONE: 0, Mode.ALTERNATING: 1}


@dataclass(frozen=True)
class SeedPlan:
    """Dataset seeds, all distinct: one per (mode, workload, warm-up or round) and one per (mode, sweep rate)."""

    base: int
    workloads: int
    rounds: int
    rates: int = 0

    def round(self, mode: Mode, workload: int, rnd: int) -> int:
        """Seed of round `rnd` (WARMUP for the warm-up) of the `workload`-th workload."""
        return self.base + (PHASE_INDEX[mode] * self.workloads + workload) * (self.rounds + 1) + rnd + 1

    def sweep(self, mode: Mode, i: int) -> int:
        """Seed of the `i`-th rate of the sweep (after every round seed of both modes)."""
        return self.base + len(PHASE_INDEX) * self.workloads * (self.rounds + 1) + PHASE_INDEX[mode] * self.rates + i


@dataclass(frozen=True)
class Plan:
    """What to run: systems, workloads, rounds, seeds and load."""

    kinds: list[SystemKind]
    workloads: list[DatasetKind]
    rounds: int
    seeds: SeedPlan
    spec_of: Callable[[DatasetKind, int], WorkloadSpec]  # the workload at a seed
    max_concurrency: int
    baseline_prompts: int  # transformers runs the first N requests only
    sweep_rates: tuple[float, ...] = ()
    arrival_seed: int = 0


def load_for(kind: DatasetKind, max_concurrency: int) -> LoadSpec:
    """The load of a round: the workload's own bound on requests in flight (batch1: one) wins over the flag."""
    return LoadSpec(max_concurrency=kind.max_concurrency or max_concurrency)


def compact(result: BenchResult) -> dict[str, list[Any]]:
    """Per-request figures the plots need, column by column (small JSON: no texts, no chunk times)."""
    recs = [r for r in result.records if r.ok]

    def col(values: list[float | None], digits: int = 4) -> list[float | None]:
        return [None if v is None else round(v, digits) for v in values]

    return {"end": col([r.end for r in recs], 3), "ttft": col([r.ttft for r in recs]),
            "tpot": col([r.tpot for r in recs], 5), "prompt_tokens": [r.prompt_tokens for r in recs],
            "cached_tokens": [r.cached_tokens for r in recs]}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Runner:
    """Runs a plan in one or both modes, appending runs, sweep points and skips to `data` (compare.json)."""

    plan: Plan
    tok: Tokenizer
    make: Callable[[SystemKind, int], System]  # build, not start (may raise SystemUnavailable)
    data: dict[str, Any]
    on_start: Callable[[System], None] = field(default=lambda system: None)  # e.g. read its start-up log

    def run(self, mode: Mode) -> None:
        for phase in mode.phases:
            self.alone() if phase is Mode.ALONE else self.alternating()

    def alone(self) -> None:
        """Each system by itself: warm-up round, measured rounds and sweep, then stopped before the next starts."""
        for index, kind in enumerate(self.plan.kinds):
            systems = self._start([(index, kind)])
            try:
                for wl in range(len(self.plan.workloads)):
                    for rnd in range(WARMUP, self.plan.rounds):
                        self._round(Mode.ALONE, systems, wl, rnd)
                self._sweep(Mode.ALONE, systems)
            finally:
                self._stop(systems)

    def alternating(self) -> None:
        """Every system up at once; each round on every system in turn, the order reversed on odd rounds."""
        systems = self._start(list(enumerate(self.plan.kinds)))
        try:
            for wl in range(len(self.plan.workloads)):
                for rnd in range(self.plan.rounds):
                    self._round(Mode.ALTERNATING, systems if rnd % 2 == 0 else systems[::-1], wl, rnd)
            self._sweep(Mode.ALTERNATING, systems)
        finally:
            self._stop(systems)

    def _start(self, kinds: list[tuple[int, SystemKind]]) -> list[System]:
        """Build and start the systems that can run here; the others go to data["skipped"] with the reason."""
        systems: list[System] = []
        for index, kind in kinds:
            try:
                system = self.make(kind, index)
                _say(f"starting {kind.value} ...")
                system.start()
            except SystemUnavailable as e:
                self.data["skipped"][kind.value] = str(e)
                _say(f"skipping {kind.value}: {e}")
                continue
            systems.append(system)
            self.data["commands"][system.name] = getattr(system, "command", None)
            self.on_start(system)
        return systems

    def _stop(self, systems: list[System]) -> None:
        for system in systems:
            system.stop()

    def _round(self, mode: Mode, systems: list[System], wl: int, rnd: int) -> None:
        """One round of a workload on the systems, with fresh prompts; the warm-up round is not recorded."""
        kind = self.plan.workloads[wl]
        spec = self.plan.spec_of(kind, self.plan.seeds.round(mode, wl, rnd))
        sessions = build_workload(spec, self.tok)
        load = load_for(kind, self.plan.max_concurrency)
        for system in systems:
            baseline = system.name == SystemKind.TRANSFORMERS.value
            mine = sessions[: self.plan.baseline_prompts] if baseline else sessions
            try:
                result = system.run(spec, mine, load, self.tok)
            except SystemUnavailable as e:
                self.data["skipped"][f"{system.name} on {kind.value}"] = str(e)
                continue
            self._record_memory(system)
            if rnd == WARMUP:
                _say(f"{mode.value} {system.name} {kind.value}: warm-up round done (not counted)")
                continue
            print(format_summary(result.summary), flush=True)
            self.data["runs"].append({"mode": mode.value, "workload": kind.value, "round": rnd,
                                      "system": system.name, "summary": result.summary.to_dict(),
                                      "profile": result.engine_stats, "requests": compact(result)})

    def _record_memory(self, system: System) -> None:
        """Keep the largest resident memory a server process has shown after any of its runs."""
        read = getattr(system, "resident_mib", None)
        now = read() if read is not None else None
        if now is None:
            return
        seen = self.data.setdefault("memory", {}).setdefault(system.name, {"rss_mib": 0.0, "peak_mib": 0.0})
        for key in seen:
            seen[key] = max(seen[key], now[key])

    def _sweep(self, mode: Mode, systems: list[System]) -> None:
        """Throughput at each offered request rate on `random` (HTTP systems only: static batches have no rate)."""
        served = [s for s in systems if s.name != SystemKind.TRANSFORMERS.value]
        for i, rate in enumerate(self.plan.sweep_rates if served else ()):
            spec = self.plan.spec_of(DatasetKind.RANDOM, self.plan.seeds.sweep(mode, i))
            sessions = build_workload(spec, self.tok)
            load = LoadSpec(rate, Arrival.POISSON, self.plan.max_concurrency, self.plan.arrival_seed)
            for system in served if i % 2 == 0 else served[::-1]:
                result = system.run(spec, sessions, load, self.tok)
                print(f"sweep ({mode.value}) {system.name} @ {rate:g} req/s: "
                      f"{result.summary.output_tok_s:.1f} output tok/s", flush=True)
                self.data["sweep"].append({"mode": mode.value, "workload": "random", "rate": rate,
                                           "system": system.name, "summary": result.summary.to_dict()})

"""Engine-thread time per step outside the forward, early and late in a long stream: it must not grow with length.

    python benchmarks/step_overhead.py [--tokens 4000] [--threads 1] [--concurrent 64]

Streams one generation of --tokens tokens (logprobs off, then on) through `Engine.generate(stream=True)` with a
reader consuming every chunk, and times each engine-loop iteration: `EngineCore.step` + `EngineCore.notify`
(scheduling, batch building, sampling, grammar, stop checks, detokenizing, reporting) minus the model forward.
Prints the median overhead over the steps around token ~100 (of the long stream and of a short one run right after
it, so drift of the machine's speed cancels) and over the last 100 tokens, and their ratio; then
the same per-step overhead for --concurrent streams at once. Demo model (4,096-token context), greedy, ignore_eos.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

WINDOW = 100  # steps per window


@dataclass
class StepTimes:
    """Per loop iteration: engine time outside the forward (wall clock and the engine thread's CPU time, which a
    busy machine or a reader holding the GIL does not inflate), and the forward, in seconds."""

    overhead: list[float] = field(default_factory=list)
    overhead_cpu: list[float] = field(default_factory=list)
    forward: list[float] = field(default_factory=list)
    _fwd: tuple[float, float] = (0.0, 0.0)
    _busy: tuple[float, float] = (0.0, 0.0)


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _since(t0: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _now()
    return wall - t0[0], cpu - t0[1]


def instrument(engine: Any) -> StepTimes:
    """Wrap the loop's step, the core's notify and the runner's forward on this engine instance (engine thread
    only)."""
    core, loop, times = engine.core, engine.loop, StepTimes()
    step, notify, forward = loop.step, core.notify, core.runner.forward

    def timed_forward(seqs: Any) -> Any:
        t0 = _now()
        out = forward(seqs)
        wall, cpu = _since(t0)
        times._fwd = (times._fwd[0] + wall, times._fwd[1] + cpu)
        return out

    def timed_step() -> Any:
        times._fwd = (0.0, 0.0)
        t0 = _now()
        updated = step()
        times._busy = _since(t0)
        return updated

    def timed_notify(updated: Any) -> None:
        t0 = _now()
        notify(updated)
        wall, cpu = _since(t0)
        if updated:
            times.overhead.append(times._busy[0] + wall - times._fwd[0])
            times.overhead_cpu.append(times._busy[1] + cpu - times._fwd[1])
            times.forward.append(times._fwd[0])

    loop.step, core.notify, core.runner.forward = timed_step, timed_notify, timed_forward
    return times


def one_long_stream(engine: Any, tokens: int, logprobs: bool, reader: str) -> StepTimes:
    """Stream one generation; `reader` "cumulative" folds every chunk into the result dict (the Python API),
    "deltas" takes the engine's deltas as they come (what an incremental client reads)."""
    times = instrument(engine)
    params = {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}
    stream = engine.generate("Tell me a very long story about a sprig.", params, stream=True,
                             return_logprob=logprobs)
    received = 0
    if reader == "cumulative":
        for chunk in stream:
            received = len(chunk["output_ids"])
    else:
        finished = False
        while not finished:
            for delta in engine.next_deltas(stream.channel):
                received += len(delta.ids)
                finished = delta.finished
        stream.close()
    assert received == tokens, received
    return times


def concurrent_streams(engine: Any, n: int, tokens: int) -> StepTimes:
    times = instrument(engine)
    params = {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}

    def read(k: int) -> None:
        for _ in engine.generate(f"Stream number {k} starts here.", params, stream=True):
            pass

    readers = [threading.Thread(target=read, args=(k,)) for k in range(n)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    return times


def ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--concurrent-tokens", type=int, default=256)
    ap.add_argument("--reader", choices=["cumulative", "deltas"], default="cumulative",
                    help="how the reader of the long stream consumes it")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from sprig import Engine

    rows = []
    with Engine(None, num_threads=args.threads, random_seed=0) as engine:
        engine.generate("warm up", {"max_new_tokens": 32, "temperature": 0})
        for logprobs in (False, True):
            t = one_long_stream(engine, args.tokens, logprobs, args.reader)
            # A short stream right after: its early steps bracket the long one's late steps in time, so a
            # machine whose speed drifts during the minute-long stream does not read as growth.
            after = one_long_stream(engine, 200, logprobs, args.reader)
            early = slice(100 - WINDOW // 2, 100 + WINDOW // 2)  # step 0 is the prefill; step k samples token k+1
            late = slice(-WINDOW, None)
            rows.append((f"1 stream, logprobs {'on' if logprobs else 'off'}",
                         ms(t.overhead[early] + after.overhead[early]), ms(t.overhead[late]),
                         ms(t.overhead_cpu[early] + after.overhead_cpu[early]), ms(t.overhead_cpu[late]),
                         ms(t.forward)))
        t = concurrent_streams(engine, args.concurrent, args.concurrent_tokens)
        steady = slice(len(t.overhead) // 4, 3 * len(t.overhead) // 4)
        nan = float("nan")
        rows.append((f"{args.concurrent} streams x {args.concurrent_tokens}", ms(t.overhead[steady]), nan,
                     ms(t.overhead_cpu[steady]), nan, ms(t.forward)))

    print(f"engine-thread time per step outside the forward, ms (demo model, {args.threads} thread(s), medians; "
          f"'early' = {WINDOW} steps around token 100 of the long stream and of a short one run right after it, "
          f"'late' = its last {WINDOW} of {args.tokens}; {args.reader} reader)")
    print(f"{'case':28s} {'wall early':>10s} {'wall late':>10s} {'ratio':>6s} {'cpu early':>10s} {'cpu late':>10s} "
          f"{'ratio':>6s} {'forward':>8s}")
    for name, we, wl, ce, cl, fwd in rows:
        print(f"{name:28s} {we:10.3f} {wl:10.3f} {wl / we:6.3f} {ce:10.3f} {cl:10.3f} {cl / ce:6.3f} {fwd:8.3f}")


if __name__ == "__main__":
    main()

"""sprig.lang benchmark: programs with shared prefixes, run by sprig vs the same calls sent one by one.

(a) RAG-style: 64 questions over one ~1,000-token few-shot prefix, via `run_batch`.
(b) Tree of thought: a full tree with branching 4 and depth 3 (84 steps, each rated with `select`).

sprig: radix cache on, the batch's traced prefix and each fork's prefix cached once, programs and branches
concurrent. Baseline: the same programs and calls on an engine with the radix cache disabled, one call at a
time (a client that sends each request by itself), with no prefix priming. Prints a table and saves JSON to
results/lang_bench.json.

    python benchmarks/lang_bench.py [--model PATH] [--questions 64] [--quick]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sprig
from sprig.lang.backends.base import Backend, ChoiceLogprobs, GenOutput, Prompt, StreamChunk
from sprig.lang.chat import ChatFormatter

RESULTS = Path(__file__).resolve().parent.parent / "results" / "lang_bench.json"


class SerialBackend(Backend):
    """The baseline client: every call waits for the previous one; no prefix priming."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    @property
    def chat_formatter(self) -> ChatFormatter:
        return self.inner.chat_formatter

    def generate(self, prompt: Prompt, sampling_params: dict[str, Any]) -> GenOutput:
        with self.lock:
            return self.inner.generate(prompt, sampling_params)

    def stream(self, prompt: Prompt, sampling_params: dict[str, Any]) -> Iterator[StreamChunk]:
        yield StreamChunk(self.generate(prompt, sampling_params).text)

    def score_choices(self, prompt: Prompt, choices: tuple[str, ...], unconditional: bool) -> list[ChoiceLogprobs]:
        with self.lock:
            return self.inner.score_choices(prompt, choices, unconditional)

    def cache_prefix(self, prompt: Prompt) -> dict[str, Any]:
        return {}


# --- the programs -------------------------------------------------------------------------------------
FEW_SHOT = "".join(
    f"Example {i}: The record lists item {i} with status {'open' if i % 3 else 'closed'} and owner team "
    f"{chr(65 + i % 26)}. Question: who owns item {i}? Answer: team {chr(65 + i % 26)}.\n" for i in range(20))


@sprig.function
def qa(s: sprig.ProgramState, question: str) -> None:
    s += sprig.system("Answer like the examples.\n" + FEW_SHOT)
    s += sprig.user(question)
    s += sprig.assistant(sprig.gen("answer", max_tokens=16, ignore_eos=True))


@sprig.function
def tree(s: sprig.ProgramState, branching: int, depth: int) -> float:
    s += "Problem: arrange the numbers 3, 5, 7 and 11 to reach 100 using + - * /.\n" + FEW_SHOT[:1500]
    frontier = [s]
    for level in range(depth):
        children = []
        for node in frontier:
            forks = node.fork(branching)
            forks += f"Step {level + 1}:" + sprig.gen("step", max_tokens=12, ignore_eos=True)
            forks += " Promising?" + sprig.select("rating", [" yes", " no"])
            children.extend(forks)
        frontier = children
    return max(max(leaf.get_meta_info("rating")["scores"]) for leaf in frontier)


# --- measuring ----------------------------------------------------------------------------------------
@dataclass
class Measure:
    workload: str
    system: str
    seconds: float
    programs: int
    model_calls: int
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def measure(engine: Any, workload: str, system: str, run: Callable[[], int]) -> Measure:
    engine.flush_cache()
    before = engine.stats()
    t0 = time.perf_counter()
    programs = run()
    seconds = time.perf_counter() - t0
    after = engine.stats()
    delta = {k: after[k] - before[k] for k in ("prompt_tokens", "cached_tokens", "computed_tokens",
                                                "finished_requests")}
    return Measure(workload, system, seconds, programs, delta["finished_requests"], delta["prompt_tokens"],
                   delta["cached_tokens"], delta["computed_tokens"])


def rag_runs(questions: int) -> dict[str, Callable[[Any, Backend], int]]:
    batch = [{"question": f"Who owns item {i * 7 % 101}?"} for i in range(questions)]

    def with_sprig(engine: Any, backend: Backend) -> int:
        states = qa.run_batch(batch, backend=backend, temperature=0)
        assert all(st.error is None for st in states)
        return len(states)

    def one_by_one(engine: Any, backend: Backend) -> int:
        for kwargs in batch:
            qa.run(**kwargs, backend=backend, temperature=0)
        return len(batch)

    return {"sprig": with_sprig, "baseline": one_by_one}


def tree_run(branching: int, depth: int) -> Callable[[Any, Backend], int]:
    def go(engine: Any, backend: Backend) -> int:
        tree.run(branching=branching, depth=depth, backend=backend, temperature=0.8, seed=0)
        return 1

    return go


def run_all(model: str | None, questions: int, branching: int, depth: int) -> list[Measure]:
    opts = {"num_threads": None, "random_seed": 0}
    fast = sprig.Engine(model, **opts)
    slow = sprig.Engine(model, disable_radix_cache=True, **opts)
    try:
        fast_b, slow_b = sprig.LocalBackend(fast), SerialBackend(sprig.LocalBackend(slow))
        qa.run(question="warm-up", backend=fast, max_new_tokens=2)
        qa.run(question="warm-up", backend=slow, max_new_tokens=2)
        runs = rag_runs(questions)
        tree_go = tree_run(branching, depth)
        rag_name = f"(a) {questions} questions, shared few-shot prefix"
        tree_name = f"(b) tree of thought, branching {branching}, depth {depth}"
        return [
            measure(fast, rag_name, "sprig", lambda: runs["sprig"](fast, fast_b)),
            measure(slow, rag_name, "one by one, no radix cache", lambda: runs["baseline"](slow, slow_b)),
            measure(fast, tree_name, "sprig", lambda: tree_go(fast, fast_b)),
            measure(slow, tree_name, "one by one, no radix cache", lambda: tree_go(slow, slow_b)),
        ]
    finally:
        fast.shutdown()
        slow.shutdown()


def table(rows: list[Measure]) -> str:
    head = f"{'workload':<48} {'system':<28} {'seconds':>8} {'calls/s':>8} {'hit rate':>8} {'computed':>9} {'speedup':>8}"
    lines = [head, "-" * len(head)]
    base = {r.workload: r.seconds for r in rows if r.system != "sprig"}
    for r in rows:
        speed = f"{base[r.workload] / r.seconds:.2f}x" if r.system == "sprig" else ""
        lines.append(f"{r.workload:<48} {r.system:<28} {r.seconds:>8.2f} {r.model_calls / r.seconds:>8.1f} "
                     f"{r.cache_hit_rate:>8.1%} {r.computed_tokens:>9} {speed:>8}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the demo model)")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--branching", type=int, default=4)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="8 questions, depth 2 (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.questions, args.depth = 8, 2
    rows = run_all(args.model, args.questions, args.branching, args.depth)
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([{**asdict(r), "cache_hit_rate": r.cache_hit_rate} for r in rows], indent=2))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()

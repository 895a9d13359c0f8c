"""The engine's step with pipeline parallelism: up to `pp_size` steps in flight, on disjoint requests.

As in SGLang, micro-batches are formed across steps: each step schedules only requests without a step in flight
(`Scheduler.schedule(exclude=...)`), at most a `1 / pp_size` share of the active requests, and launches it
(rank 0 runs stage 0 and hands it on); once `pp_size` steps are in flight, or nothing new could be scheduled, the
oldest is collected and processed like any step (the core's phases from `EngineCore.advance` on). An in-flight request is never
re-scheduled, preempted or counted out: its KV length and pages stay as they were when its step was launched
until that step is collected.

Aborts: an in-flight request that is aborted is retired at once (its pages freed) and its row of the collected
step is dropped. Reusing those pages in a later micro-batch is safe: each stage runs its micro-batches in launch
order and owns only its own layers' KV, so on every stage the aborted step has written and read those pages before
the later step writes them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.scheduler import ScheduledSeq
from sprig.runtime.model.runner import StepHandle, StepOutput


@dataclass(frozen=True)
class _Launched:
    plan: list[ScheduledSeq]
    handle: StepHandle
    launch_s: float  # the time launching took (stage 0's forward on rank 0)


class PipelineLoop:
    """Drives `core`'s scheduler and runner with up to `depth` steps in flight."""

    def __init__(self, core: EngineCore, depth: int) -> None:
        self.core = core
        self.depth = depth
        self.in_flight: deque[_Launched] = deque()
        self.busy: set[Request] = set()  # requests with a step in flight
        self.peak_in_flight = 0  # most steps ever in flight together (tests, benchmarks)
        self.dropped_rows = 0  # rows of requests aborted while their step was in flight

    def has_work(self) -> bool:
        return self.core.has_work() or bool(self.in_flight)

    def step(self) -> list[Request]:
        """Launch a micro-batch if there is room and work; collect the oldest when full or out of work."""
        plan = self._schedule() if len(self.in_flight) < self.depth else []
        if plan:
            self._launch(plan)
        if self.in_flight and (len(self.in_flight) >= self.depth or not plan):
            return self._collect()
        return []

    def _schedule(self) -> list[ScheduledSeq]:
        sched = self.core.scheduler
        active = len(sched.running) + len(sched.waiting)
        # why: a share of the requests per micro-batch, so the next launch finds requests for the next stage
        limit = max(1, -(-active // self.depth))
        return sched.schedule(exclude=self.busy, limit=limit)

    def _launch(self, plan: list[ScheduledSeq]) -> None:
        t0 = time.perf_counter()
        handle = self.core.runner.launch([self.core.seq_input(s) for s in plan])
        self.in_flight.append(_Launched(plan, handle, time.perf_counter() - t0))
        self.busy.update(s.req for s in plan)
        self.peak_in_flight = max(self.peak_in_flight, len(self.in_flight))

    def _collect(self) -> list[Request]:
        core = self.core
        launched = self.in_flight.popleft()
        t0 = time.perf_counter()
        out = core.runner.collect(launched.handle)
        self.busy.difference_update(s.req for s in launched.plan)
        # Requests aborted while in flight were retired already: drop their rows.
        kept = [i for i, s in enumerate(launched.plan) if not s.req.finished]
        plan = [launched.plan[i] for i in kept]
        self.dropped_rows += len(launched.plan) - len(kept)
        out = StepOutput(out.logits, [out.row_start[i] for i in kept], [out.row_count[i] for i in kept])
        elapsed = launched.launch_s + time.perf_counter() - t0
        core.counters.model_time += elapsed
        if not plan:
            return []
        masks = core.start_masks(plan)
        rows = core.plan_rows(plan)  # why: KV lengths advance only now, when the step's output is in
        core.advance(rows)
        core.take_prompt_logprobs(rows, out)
        updated = core.append_sampled(core.sample(core.sampling_rows(rows), out, masks))
        core.retire_finished(rows)
        core.count_step(plan, time.perf_counter() - t0 + launched.launch_s)
        return updated

    def shutdown(self) -> None:
        """Nothing of its own to release (the ranks belong to the core)."""

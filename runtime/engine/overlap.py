"""The overlap schedule: a step's forward runs on the engine thread while a side thread (`sprig-overlap`) does
the last step's stop checks, detokenizing, retiring and reports, then schedules the next step.

The next step is planned before the running step's tokens are known: each of its sampling rows counts one token
of `Request.lag`, so the scheduler sees the request's true length, and the sampled token goes into the fill as soon
as it is drawn (its output, logprob and stop checks follow one step later, beside the next forward). A request that
those stop checks finish still rides in the planned step; its row is dropped unsampled (one wasted row per finished
request, as in SGLang). Grammar rows are appended at once, since jump-forward changes the fill. The side thread
owns the scheduler only while the engine thread waits for the forward, which touches no scheduler state.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

from sprig.runtime.engine.request import Request
from sprig.runtime.engine.scheduler import ScheduledSeq
from sprig.runtime.engine.steps import Sampled, StepHost


class OverlapSteps:
    """Drives `host` with each step's stop checks and the next step's scheduling beside its forward."""

    def __init__(self, host: StepHost) -> None:
        self.host = host
        self.side = ThreadPoolExecutor(1, "sprig-overlap")
        self.next_plan: list[ScheduledSeq] | None = None  # scheduled beside the last forward

    def step(self) -> list[Request]:
        """One step; returns the requests appended to at once (the others are reported from the side thread)."""
        host = self.host
        t0 = time.perf_counter()
        plan = [s for s in self.next_plan or () if not s.req.finished]  # finished or aborted since planned
        self.next_plan = None
        updated: list[Request] = []
        if not plan:
            updated = host.check_sampled(host.take_deferred())  # nothing to run beside them
            plan = host.scheduler.schedule()
            if not plan:
                host.mark_idle()
                return updated
        rows = host.plan_rows(plan)
        seqs = [host.seq_input(s) for s in plan]
        masks = host.start_masks(plan, {})
        host.advance(rows, lag=True)
        side = self._beside(host.take_deferred())
        try:
            out = host.forward(seqs)
        finally:
            self.next_plan = side.result()  # why: the side thread owns the scheduler until it is done
        updated += host.finish_rows(rows, out, masks, {}, defer=True)
        host.count_step(plan, time.perf_counter() - t0)
        return updated

    def _beside(self, sampled: list[Sampled]) -> Future[list[ScheduledSeq]]:
        """The last step's stop checks and reports, then the next step's plan, on the side thread."""

        def work() -> list[ScheduledSeq]:
            self.host.notify(self.host.check_sampled(sampled))  # why: streaming callers are woken from here too
            return self.host.scheduler.schedule()

        return self.side.submit(work)

    def shutdown(self) -> None:
        self.side.shutdown(wait=True)

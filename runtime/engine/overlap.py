"""The overlap schedule: a step's forward runs on the engine thread while a side thread (`sprig-overlap`) does
the last step's stop checks, detokenizing, retiring and reports, then schedules the next step.

The next step is planned before the running step's tokens are known: a request whose token is coming is planned
as a one-token decode (one that this plan preempts is not resumed by it: `Scheduler.schedule`'s `coming`), and the
sampled token goes into the fill as soon as it is drawn (its output, logprob and stop checks follow one step later,
beside the next forward). A request that those stop checks finish still rides in the planned step; its row is
dropped unsampled (one wasted row per finished request, as in SGLang). Grammar rows are appended at once, since jump-forward changes the fill. The side thread
owns the scheduler only while the engine thread waits for the forward, which touches no scheduler state.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

from sprig.runtime.engine.constraints import PendingMasks
from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.scheduler import ScheduledSeq
from sprig.runtime.engine.steps import Row, Sampled
from sprig.runtime.model.runner import StepOutput


class OverlapLoop:
    """Drives `core` with each step's stop checks and the next step's scheduling beside its forward."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.side = ThreadPoolExecutor(1, "sprig-overlap")
        self.next_plan: list[ScheduledSeq] | None = None  # scheduled beside the last forward
        self.deferred: list[Sampled] = []  # fed to the next step by the last one, stop checks pending

    def has_work(self) -> bool:
        return self.core.has_work() or bool(self.deferred)

    def step(self) -> list[Request]:
        """One step; returns the requests appended to at once (the others are reported from the side thread)."""
        core = self.core
        t0 = time.perf_counter()
        plan = [s for s in self.next_plan or () if not s.req.finished]  # finished or aborted since planned
        self.next_plan = None
        updated: list[Request] = []
        if not plan:
            updated = self._check_deferred(self._take_deferred())  # nothing to run beside them
            plan = core.scheduler.schedule()
            if not plan:
                core.mark_idle()
                return updated
        rows = core.plan_rows(plan)
        seqs = [core.seq_input(s) for s in plan]
        masks = core.start_masks(plan)
        core.advance(rows)
        side = self._beside(self._take_deferred(), self._coming_tokens(rows))
        try:
            out = core.forward(seqs)
        finally:
            self.next_plan = side.result()  # why: the side thread owns the scheduler until it is done
        updated += self._sample_and_defer(rows, out, masks)
        core.retire_finished(rows)
        core.count_step(plan, time.perf_counter() - t0)
        return updated

    @staticmethod
    def _coming_tokens(rows: list[Row]) -> frozenset[Request]:
        """The requests whose next token this step samples, which the plan made beside its forward cannot see yet."""
        return frozenset(row.req for row in rows
                         if row.completes and not row.req.finished and row.req.params.max_new_tokens != 0)

    def _sample_and_defer(self, rows: list[Row], out: StepOutput, masks: PendingMasks) -> list[Request]:
        """Sample; an unconstrained row's token goes into its fill now and its stop checks wait for the next step
        (a grammar's jump-forward changes the fill: those rows are appended now). Returns the rows appended to."""
        core = self.core
        core.take_prompt_logprobs(rows, out)
        now: list[Request] = []
        for s in core.sample(core.sampling_rows(rows), out, masks):
            if s.req.matcher is None:
                self._defer(s)
            else:
                now += core.append_sampled([s])
        return now

    def _defer(self, s: Sampled) -> None:
        """Feed the token to the next step now; its output, logprob and stop checks follow beside that step."""
        if s.req.first_token_time is None:
            s.req.first_token_time = time.monotonic()
        s.req.fill_ids.append(s.token)
        self.deferred.append(s)

    def _take_deferred(self) -> list[Sampled]:
        taken, self.deferred = self.deferred, []
        return taken

    def _check_deferred(self, sampled: list[Sampled]) -> list[Request]:
        """The deferred half of appending tokens (see `_defer`); retires the requests that finish."""
        core = self.core
        checked: list[Request] = []
        for s in sampled:
            if s.req.finished:
                continue  # aborted since it was sampled
            core.guard(s.req, core.append_token, s.req, s.token, s.logprob, True)
            checked.append(s.req)
            if s.req.finished:
                core.retire(s.req)
        return checked

    def _beside(self, sampled: list[Sampled], coming: frozenset[Request]) -> Future[list[ScheduledSeq]]:
        """The last step's stop checks and reports, then the next step's plan, on the side thread."""

        def work() -> list[ScheduledSeq]:
            self.core.notify(self._check_deferred(sampled))  # why: streaming callers are woken from here too
            return self.core.scheduler.schedule(coming=coming)

        return self.side.submit(work)

    def shutdown(self) -> None:
        self.side.shutdown(wait=True)

"""The serial schedule: steps one after another (schedule → forward → sample → stop checks), the CPU's default
and the only schedule that speculates (its next step's input depends on how many drafts were accepted)."""

from __future__ import annotations

import time

from sprig.runtime.engine.constraints import PendingMasks
from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.spec.speculator import Draft
from sprig.runtime.engine.steps import Row
from sprig.runtime.model.runner import StepOutput


class SerialLoop:
    """Drives `core` one step at a time."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def has_work(self) -> bool:
        return self.core.has_work()

    def step(self) -> list[Request]:
        """Run one step; returns the requests whose output changed."""
        core = self.core
        t0 = time.perf_counter()
        plan = core.scheduler.schedule()
        if not plan:
            core.mark_idle()
            return []
        drafts = core.propose(plan)
        rows = core.plan_rows(plan)
        masks = core.start_masks([s for s in plan if s.req not in drafts])
        out = core.forward([core.seq_input(s) if s.req not in drafts else core.verify_input(s, drafts[s.req])
                            for s in plan])
        core.advance(rows)
        updated = self._sample_or_verify(rows, out, masks, drafts)
        core.retire_finished(rows)
        core.count_step(plan, time.perf_counter() - t0)
        core.counters.computed_tokens += sum(len(d.tokens) for d in drafts.values())
        return updated

    def _sample_or_verify(self, rows: list[Row], out: StepOutput, masks: PendingMasks,
                          drafts: dict[Request, Draft]) -> list[Request]:
        """Prompt logprobs, then sample the rows that carried no drafts and verify those that did."""
        core = self.core
        core.take_prompt_logprobs(rows, out)
        picked = core.sampling_rows(rows)
        updated = core.append_sampled(core.sample([(i, r) for i, r in picked if r not in drafts], out, masks))
        return updated + core.verify([(i, r) for i, r in picked if r in drafts], out, drafts)

    def shutdown(self) -> None:
        """Nothing of its own to release."""

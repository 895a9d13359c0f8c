"""How many draft tokens a request proposes next: more while the target keeps them, none for a while when it does not.

Speculation that keeps failing only adds verify work, so a request whose whole proposal is rejected pauses
proposing for a number of steps that grows fourfold with every further full rejection (up to `MAX_PAUSE`), and any
kept draft token ends the pause. Fourfold rather than doubling: a 96-token request whose drafts are all rejected
verifies 5 times instead of 7 (each failed verification costs a draft proposal and an eager forward). With
near-zero acceptance the engine then verifies drafts on a vanishing fraction of steps and runs at the speed of
plain decoding.

A new request has no history of its own, so it starts from the engine's (`AcceptanceHistory`): when none of the
last `HISTORY` verifications across requests kept a draft token, it proposes one token at first and its first full
rejection pauses as a request's third would. Against a draft model that never agrees (a draft and a target from
different families) a 96-token request then verifies 3 times instead of 5; one kept token anywhere ends it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_PAUSE = 64  # steps without proposals after repeated full rejections
PAUSE_GROWTH = 4  # each further full rejection multiplies the pause by this
HISTORY = 16  # verifications across requests that decide how a new request starts


@dataclass
class DraftLength:
    """One request's draft length controller."""

    max_k: int
    adaptive: bool = True
    k: int = 0  # the next proposal's length; starts at max_k
    pause: int = 0  # steps left without proposing
    next_pause: int = 1  # the pause after the next full rejection

    def __post_init__(self) -> None:
        self.k = self.k or self.max_k

    def next_k(self) -> int:
        """Draft tokens to propose this step (0: pausing)."""
        if not self.adaptive:
            return self.max_k
        if self.pause > 0:
            self.pause -= 1
            return 0
        return self.k

    def record(self, proposed: int, accepted: int) -> None:
        """The target kept `accepted` of `proposed` draft tokens."""
        if not self.adaptive or proposed == 0:
            return
        if accepted == 0:
            self.k = max(1, self.k // 2)
            self.pause = self.next_pause
            self.next_pause = min(PAUSE_GROWTH * self.next_pause, MAX_PAUSE)
            return
        self.next_pause = 1
        self.k = min(self.max_k, self.k + 1) if accepted == proposed else max(1, accepted + 1)


@dataclass
class AcceptanceHistory:
    """Whether the engine's last `HISTORY` verifications, across requests, kept any draft token."""

    _kept: deque[bool] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def record(self, accepted: int) -> None:
        self._kept.append(accepted > 0)

    @property
    def rejecting(self) -> bool:
        """Every one of the last `HISTORY` verifications kept nothing."""
        return len(self._kept) == HISTORY and not any(self._kept)

    def start(self, max_k: int, adaptive: bool) -> DraftLength:
        """A new request's controller: where a request that was fully rejected twice would be, while the engine
        keeps nothing; else at full length."""
        if adaptive and self.rejecting:
            return DraftLength(max_k, adaptive, k=1, next_pause=PAUSE_GROWTH**2)
        return DraftLength(max_k, adaptive)

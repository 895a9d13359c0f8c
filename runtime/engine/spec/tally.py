"""A speculating request's own figures (the speculator keeps them; its meta_info reports them, SGLang's names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecTally:
    verify_ct: int = 0  # forwards that verified this request's drafts
    emitted_tokens: int = 0  # tokens those verifications appended

    @property
    def accept_length(self) -> float:
        """`spec_accept_length`: tokens added per verify forward."""
        return self.emitted_tokens / self.verify_ct if self.verify_ct else 0.0

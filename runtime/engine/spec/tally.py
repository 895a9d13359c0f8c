"""A speculating request's own figures (the speculator keeps them; its meta_info reports them, SGLang's names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecTally:
    verify_ct: int = 0  # forwards that verified this request's drafts
    emitted_tokens: int = 0  # tokens those verifications appended

    def meta(self) -> dict[str, float]:
        """`spec_verify_ct`, and `spec_accept_length`: tokens added per verify forward."""
        accept = self.emitted_tokens / self.verify_ct if self.verify_ct else 0.0
        return {"spec_verify_ct": self.verify_ct, "spec_accept_length": accept}

"""`matcher_for(compiled)`: a new per-request matcher of the compiled grammar's backend.

The backend's matcher module is imported on first use, so the default (llguidance) path never loads
outlines-core, and compile workers, which never build matchers, never load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sprig.grammar.backend import Backend, Compiled

if TYPE_CHECKING:  # why: the interface imports torch; this module must not at import time
    from sprig.grammar.matcher import GrammarMatcher


def matcher_for(compiled: Compiled, max_rollback: int = 64) -> GrammarMatcher:
    """One request's matcher over `compiled` (cheap; the compiled grammar is shared and read-only)."""
    if compiled.backend is Backend.OUTLINES:
        from sprig.grammar.outlines.matcher import OutlinesMatcher

        return OutlinesMatcher(compiled, max_rollback)  # type: ignore[arg-type]
    if compiled.backend is Backend.LLGUIDANCE:
        from sprig.grammar.llg.matcher import LlgMatcher

        return LlgMatcher(compiled, max_rollback)  # type: ignore[arg-type]
    raise ValueError(f"no matcher for backend {compiled.backend!r}")

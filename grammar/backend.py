"""The grammar backends, and what a compiled grammar of either offers the compiler and `matcher_for`."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from sprig.grammar.spec import GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo


class Backend(str, Enum):
    """Which engine turns a constraint into token masks."""

    LLGUIDANCE = "llguidance"  # the default: a context-free grammar, masks computed lazily per reached state
    OUTLINES = "outlines"  # one regex, an eager token automaton (outlines-core); imported only when chosen

    def __str__(self) -> str:  # why: f-strings print the name the CLI takes, on every Python version
        return self.value

    @classmethod
    def parse(cls, name: Backend | str) -> Backend:
        """The backend named `name`; a ValueError naming the choices otherwise."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"backend must be one of {', '.join(b.value for b in cls)} (got {name!r})") from None


class Compiled(Protocol):
    """A constraint compiled for one tokenizer by either backend; shared, read-only, by its matchers."""

    spec: GrammarSpec
    tokenizer_info: TokenizerInfo
    compile_time_s: float
    nbytes: int

    @property
    def backend(self) -> Backend: ...

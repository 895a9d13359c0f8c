"""Spec → regex → token automaton (outlines backend), or spec → Lark text (llguidance backend).

Runs inside a compile worker (see `pool.py`) and imports no torch. The regex trees and their budgets, checked
before outlines-core (whose native compile cannot be interrupted) starts, are in `regex_specs.py`.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass

from sprig.grammar.errors import GrammarError, too_complex
from sprig.grammar.llg.lark import LarkBuild, build_lark
from sprig.grammar.outlines.automaton import build_index, outlines_vocabulary
from sprig.grammar.regex.constraints import regex_tree
from sprig.grammar.schema.formats import SUPPORTED_FORMATS, format_language
from sprig.grammar.schema.json_text import json_string
from sprig.grammar.schema.strings import determinized
from sprig.grammar.spec import GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo


@dataclass
class BuildResult:
    """What a worker sends back: the regex and the serialized automaton."""

    regex: str
    index_binary: bytes
    seconds: float


def spec_to_regex(spec: GrammarSpec) -> str:
    """The Rust-syntax regex (full-match semantics) for any kind of spec."""
    try:
        return regex_tree(spec).render()
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    except RecursionError:
        raise too_complex("constraint nested too deeply").with_param(spec.param) from None


_VOCABULARIES: dict[str, object] = {}  # per worker process: tokenizer fingerprint -> outlines Vocabulary


def build(spec: GrammarSpec, info: TokenizerInfo, backend: str = "outlines") -> BuildResult | LarkBuild:
    """Spec → regex → outlines-core Index, serialized, or spec → Lark text (what a compile worker runs)."""
    if backend == "llguidance":
        return build_lark(spec)
    start = time.perf_counter()
    regex = spec_to_regex(spec)
    vocabulary = _VOCABULARIES.get(info.fingerprint)
    if vocabulary is None:
        vocabulary = _VOCABULARIES[info.fingerprint] = outlines_vocabulary(info)
    try:
        index = build_index(regex, vocabulary)  # type: ignore[arg-type]
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    return BuildResult(regex, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL), time.perf_counter() - start)


_WORKER_INFO: list[TokenizerInfo] = []


def init_worker(info: TokenizerInfo, backend: str = "outlines") -> None:
    """Runs once in each compile worker process: remember the tokenizer, build its vocabulary."""
    _WORKER_INFO[:] = [info]
    for name in SUPPORTED_FORMATS:  # why: parsing the format regexes once here keeps them out of compile times
        json_string(format_language(name))
        determinized(format_language(name))  # why: a format with a length is checked for emptiness on these
    import numpy  # noqa: F401  # why: multipleOf minimizes with it; its import (~0.3 s) is start-up, not a compile

    from sprig.grammar.llg import ebnf  # noqa: F401  # why: the first schema or grammar pays no imports
    from sprig.grammar.schema import to_cfg  # noqa: F401
    if backend == "outlines":
        _VOCABULARIES[info.fingerprint] = outlines_vocabulary(info)


def build_in_worker(spec: GrammarSpec, backend: str = "outlines") -> BuildResult | LarkBuild:
    return build(spec, _WORKER_INFO[0], backend)

"""What a compile worker runs, per backend, and what the compiler's process makes of its result.

Runs inside a compile worker (see `pool.py`) and imports no torch. The llguidance backend's half
(`llg/lark.py`) is the default; the outlines backend's (`outlines/build.py`) is imported only when chosen,
so the default path never loads outlines-core.
"""

from __future__ import annotations

import gc
from typing import Any

from sprig.grammar.backend import Backend, Compiled
from sprig.grammar.llg import lark
from sprig.grammar.regex.char_classes import shorthand
from sprig.grammar.schema import spellings
from sprig.grammar.schema.formats import SUPPORTED_FORMATS, format_language
from sprig.grammar.schema.json_text import json_string
from sprig.grammar.schema.strings import determinized
from sprig.grammar.spec import GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo


def build(spec: GrammarSpec, info: TokenizerInfo, backend: Backend = Backend.LLGUIDANCE) -> Any:
    """Spec → Lark text (llguidance) or → regex → serialized outlines-core Index (what a worker runs)."""
    if backend is Backend.OUTLINES:
        from sprig.grammar.outlines.build import build_automaton

        return build_automaton(spec, info)
    return lark.build_lark(spec)


def finish(spec: GrammarSpec, built: Any, info: TokenizerInfo, backend: Backend) -> Compiled:
    """A worker's result → the compiled grammar matchers share (in the compiler's process)."""
    if backend is Backend.OUTLINES:
        from sprig.grammar.outlines import build as outlines_build

        return outlines_build.finish(spec, built, info)
    return lark.finish(spec, built, info)


_WORKER_INFO: list[TokenizerInfo] = []


def init_worker(info: TokenizerInfo, backend: Backend = Backend.LLGUIDANCE) -> None:
    """Runs once in each compile worker process: remember the tokenizer, warm what every compile needs."""
    _WORKER_INFO[:] = [info]
    for name in SUPPORTED_FORMATS:  # why: parsing the format regexes once here keeps them out of compile times
        json_string(format_language(name))
        determinized(format_language(name))  # why: a format with a length is checked for emptiness on these
    for kind in ("digit", "word", "space"):  # why: \D, \W, \S read Unicode's classes once (a scan of every code point)
        shorthand(kind, excluded=True)
    if backend is Backend.LLGUIDANCE:  # why: only its numbers take every spelling; outlines keeps literals
        spellings.warm()  # why: `integer`, `minimum: 0`, int32/int64 ranges recur in most schemas
    import numpy  # noqa: F401  # why: multipleOf minimizes with it; its import (~0.3 s) is start-up, not a compile

    from sprig.grammar.llg import ebnf  # noqa: F401  # why: the first schema or grammar pays no imports
    from sprig.grammar.schema import to_cfg  # noqa: F401
    if backend is Backend.OUTLINES:
        from sprig.grammar.outlines.build import prepare_worker

        prepare_worker(info)
    gc.freeze()  # why: the warmed tables stay out of every later collection (translation p99 on the corpus: 37 -> 23 ms)


def build_in_worker(spec: GrammarSpec, backend: Backend = Backend.LLGUIDANCE) -> Any:
    return build(spec, _WORKER_INFO[0], backend)

"""The backends stand apart: the default (llguidance) path never imports outlines-core, and the outlines
backend still compiles and matches when it is chosen. Matchers come from `matcher_for`, by backend."""

from __future__ import annotations

import json
import subprocess
import sys

from sprig.grammar import Backend, GrammarCompiler, GrammarSpec, matcher_for
from sprig.grammar.llg.matcher import LlgMatcher
from sprig.grammar.matcher import GrammarMatcher, allocate_token_bitmask

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0}}, "required": ["name"]}
INSTANCE = '{"name":"Ada","age":36}'

# Runs in a fresh interpreter: the engine's grammar imports, a compile through a worker process, the same
# build in-process (what a worker imports), a matcher, a mask and a walk; then reports what got imported.
DEFAULT_PATH = r"""
import json, sys
import sprig.runtime.engine.constraints, sprig.runtime.engine.engine
from sprig.grammar import GrammarCompiler, GrammarSpec, TokenizerInfo, allocate_token_bitmask, matcher_for
from sprig.grammar.compile import worker

path, schema, text = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
info = TokenizerInfo.from_tokenizer(path, eos_token_ids=[2], vocab_size=2100)
spec = GrammarSpec.json_schema(schema)
with GrammarCompiler(info, max_workers=1) as compiler:
    compiled = compiler.compile(spec)
worker.init_worker(info)
worker.build(spec, info)
matcher = matcher_for(compiled)
matcher.fill_bitmask(allocate_token_bitmask(1, info.vocab_size), 0)
ids = info.tokenizer.encode(text, add_special_tokens=False).ids
walked = matcher.accept_tokens(ids) and matcher.can_finish()
loaded = sorted(m for m in sys.modules if m.startswith(("outlines_core", "sprig.grammar.outlines")))
print(json.dumps({"matcher": type(matcher).__name__, "walked": walked, "loaded": loaded}))
"""


def test_the_default_path_never_imports_outlines_core(tiny_paths) -> None:
    out = subprocess.run([sys.executable, "-c", DEFAULT_PATH, str(tiny_paths["tiny-llama"]), json.dumps(SCHEMA),
                          INSTANCE], capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"matcher": "LlgMatcher", "walked": True, "loaded": []}


def test_the_outlines_backend_still_compiles_and_matches(info) -> None:
    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp:
        compiled = comp.compile(GrammarSpec.json_schema(SCHEMA))
    assert compiled.backend is Backend.OUTLINES
    matcher = matcher_for(compiled)
    assert type(matcher).__name__ == "OutlinesMatcher" and isinstance(matcher, GrammarMatcher)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_bitmask(bitmask, 0)
    ids = info.tokenizer.encode(INSTANCE, add_special_tokens=False).ids
    assert matcher.accept_tokens(ids) and matcher.can_finish()
    assert not matcher_for(compiled).accept_tokens(info.tokenizer.encode('{"age":1}', add_special_tokens=False).ids
                                                   + [2])


def test_the_llguidance_matcher_stands_on_the_interface_alone() -> None:
    from sprig.grammar.outlines.matcher import OutlinesMatcher

    assert LlgMatcher.__mro__[1] is GrammarMatcher and not issubclass(LlgMatcher, OutlinesMatcher)
    assert "__new__" not in vars(GrammarMatcher)

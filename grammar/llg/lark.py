"""The llguidance backend: every constraint becomes a Lark grammar over regex lexemes, masked lazily.

A compile worker turns the spec into Lark text (`spec_to_lark`: pure Python, killable, no tokenizer); the
compiler's process then builds one llguidance `LLMatcher` from it (`finish`), which checks the grammar and
prepares its lexer, and every request gets a `deep_copy` of that template. llguidance computes a token
mask only for the parser states a request reaches (an Earley parser over a lazily built lexer DFA), so
compile time does not grow with states × vocabulary the way the eager outlines-core index does.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sprig.grammar.backend import Backend
from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.llg.cfg import Grammar, lex
from sprig.grammar.regex import ir
from sprig.grammar.regex.constraints import constraint_tree
from sprig.grammar.spec import GrammarKind, GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo

MAX_LARK_CHARS = 8_000_000  # why: the grammar text handed to llguidance; larger is a denial of service
_TOKENIZERS: dict[str, Any] = {}  # tokenizer fingerprint -> LLTokenizer (built once per process)
_TOKENIZERS_LOCK = threading.Lock()


@dataclass(frozen=True)
class LarkBuild:
    """What a compile worker sends back for the llguidance backend."""

    lark: str
    seconds: float


@dataclass
class CompiledLark:
    """A constraint compiled for llguidance: the Lark text and a template matcher for one tokenizer."""

    spec: GrammarSpec
    lark: str
    tokenizer_info: TokenizerInfo
    compile_time_s: float
    nbytes: int
    template: Any = field(repr=False)  # llguidance.LLMatcher in its initial state; copied per request
    backend: Backend = Backend.LLGUIDANCE
    translate_time_s: float = 0.0  # the worker's spec -> Lark part of compile_time_s (the rest: llguidance's build)

    @property
    def regex(self) -> str:
        """The grammar text (what `labels.rules_for` looks into for host-name A-labels)."""
        return self.lark

    def new_matcher(self) -> Any:
        return self.template.deep_copy()


def spec_to_lark(spec: GrammarSpec) -> str:
    """The Lark grammar text for any kind of spec; raises GrammarError with the spec's param."""
    try:
        if spec.kind is GrammarKind.JSON_SCHEMA:
            from sprig.grammar.schema.to_cfg import schema_to_grammar

            text = schema_to_grammar(str(spec.spec), spec.options).to_lark()
        elif spec.kind is GrammarKind.JSON_OBJECT:
            from sprig.grammar.schema.to_cfg import json_object_grammar

            text = json_object_grammar(spec.options).to_lark()
        elif spec.kind is GrammarKind.STRUCTURAL_TAG:
            from sprig.grammar.llg.structural import structural_grammar
            from sprig.grammar.structural import StructuralTag

            text = structural_grammar(StructuralTag.from_json(str(spec.spec)), spec.options).to_lark()
        elif spec.kind is GrammarKind.EBNF:
            from sprig.grammar.llg.ebnf import ebnf_to_lark

            text = ebnf_to_lark(str(spec.spec))
        else:
            text = _single_lexeme(constraint_tree(spec))
    except GrammarError as exc:
        raise exc.with_param(exc.param or spec.param) from None
    except RecursionError:
        raise too_complex("constraint nested too deeply").with_param(spec.param) from None
    if len(text) > MAX_LARK_CHARS:
        raise too_complex(f"grammar text longer than {MAX_LARK_CHARS} characters").with_param(spec.param)
    return text


def _single_lexeme(node: ir.Node) -> str:
    """A regex or choices constraint: one lexeme (llguidance matches it exactly, lazily)."""
    grammar = Grammar()
    term = lex(node)
    grammar.add("start", term)
    if not grammar.prune():
        raise GrammarError("the regex matches no text", GrammarErrorCode.INVALID_REGEX)
    if node.min_len == 0 and node.max_len != 0:  # why: a lexeme never matches the empty string
        return grammar.to_lark().replace("start: L0", 'start: L0 | ""', 1)
    return grammar.to_lark()


def build_lark(spec: GrammarSpec) -> LarkBuild:
    """Spec → Lark text (the function a compile worker runs for this backend)."""
    start = time.perf_counter()
    return LarkBuild(spec_to_lark(spec), time.perf_counter() - start)


def finish(spec: GrammarSpec, build: LarkBuild, info: TokenizerInfo) -> CompiledLark:
    """Build the template matcher (checks the grammar, prepares the lexer) in the compiler's process."""
    import llguidance

    start = time.perf_counter()
    try:
        matcher = llguidance.LLMatcher(tokenizer(info), llguidance.LLMatcher.grammar_from_lark(build.lark),
                                       log_level=0)
    except BaseException as exc:  # why: llguidance panics (a BaseException) on some oversized grammars
        if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
            raise
        raise too_complex("the grammar engine refused the grammar (size)").with_param(spec.param) from None
    if matcher.is_error():
        raise _grammar_error(spec, matcher.get_error())
    seconds = build.seconds + time.perf_counter() - start
    return CompiledLark(spec, build.lark, info, seconds, len(build.lark), matcher, translate_time_s=build.seconds)


def _grammar_error(spec: GrammarSpec, message: str) -> GrammarError:
    first = message.strip().splitlines()[0] if message.strip() else "grammar refused"
    if any(word in message for word in ("limit", "fuel", "too large", "too many", "size")):
        return too_complex(first[:200]).with_param(spec.param)
    if spec.kind is GrammarKind.EBNF:
        from sprig.grammar.llg.ebnf import llguidance_error

        return llguidance_error(message)
    code = GrammarErrorCode.INVALID_GRAMMAR if spec.kind is GrammarKind.EBNF else GrammarErrorCode.INVALID_REGEX
    return GrammarError(f"invalid grammar: {first[:200]}", code, param=spec.param)


def tokenizer(info: TokenizerInfo) -> Any:
    """The llguidance tokenizer for `info` (cached per process by fingerprint)."""
    with _TOKENIZERS_LOCK:
        cached = _TOKENIZERS.get(info.fingerprint)
        if cached is None:
            import llguidance

            if len(_TOKENIZERS) >= 8:
                _TOKENIZERS.pop(next(iter(_TOKENIZERS)))
            cached = _TOKENIZERS[info.fingerprint] = llguidance.LLTokenizer(
                _Wrapper(info),  # type: ignore[arg-type]  # why: duck-typed, as llguidance documents
                n_vocab=info.vocab_size, eos_token=list(info.eos_token_ids))
        return cached


class _Wrapper:
    """What `llguidance.LLTokenizer` reads: every id's bytes, the special ids and a tokenize function.

    Special tokens, EOS ids and padded ids have no text; they are marked special so no grammar allows them
    as text (EOS is allowed by llguidance exactly where the grammar is complete).
    """

    def __init__(self, info: TokenizerInfo) -> None:
        self.eos_token_id = info.eos_token_ids[0]
        self.bos_token_id = None
        eos = set(info.eos_token_ids)
        raw = list(info.token_bytes) + [None] * (info.vocab_size - len(info.token_bytes))
        self.special_token_ids = [i for i, t in enumerate(raw) if t is None or i in eos]
        self.tokens = [b"\xff[special_%d]" % i if t is None or i in eos else t for i, t in enumerate(raw)]
        self.is_tokenizer_wrapper = True
        self._tokenizer = info.tokenizer
        self._by_bytes = {t: i for i, t in enumerate(raw) if t and i not in eos}
        self._longest = max((len(t) for t in self._by_bytes), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else text
        return list(self._tokenize(data))

    @functools.lru_cache(maxsize=8192)  # noqa: B019  # why: llguidance re-tokenizes the same lexeme text while masking
    def _tokenize(self, data: bytes) -> tuple[int, ...]:
        return tuple(self._encode(data))

    def _encode(self, data: bytes) -> list[int]:
        if self._tokenizer is not None:
            try:
                return list(self._tokenizer.encode(data.decode("utf-8"), add_special_tokens=False).ids)
            except UnicodeDecodeError:
                pass
        return self._greedy(data)

    def _greedy(self, data: bytes) -> list[int]:
        """Longest-match tokenization (for a TokenizerInfo built without a tokenizer, and partial UTF-8)."""
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                tok = self._by_bytes.get(data[i:i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                i += 1  # why: a byte no token spells cannot be produced anyway
        return out

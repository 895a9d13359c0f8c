"""Grammar constraints: GBNF (llama.cpp) / xgrammar-style EBNF (`root ::= ...`), or Lark (`start: ...`).

GBNF is read by a small recursive-descent parser here and rewritten as a `cfg.Grammar`: every string
literal and character class is one fixed-length lexeme and every repetition is a rule-level repetition, so
the language is exactly the GBNF's (llguidance's lexemes are greedy, which only matters for lexemes of
varying length). Supported: rules `name ::= body` (names of letters, digits, `-`, `_`; `root` is the start),
alternation `|`, grouping `( )`, postfix `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, string literals with
`\\n \\r \\t \\\\ \\" \\xHH \\uHHHH \\UHHHHHHHH` escapes, character classes `[a-z]`, `[^...]`, `.` (any
character) and `#` comments. Lark text (no `::=`) goes to llguidance as it is (its lexer semantics).
Errors are `GrammarError(code="invalid_grammar", param="ebnf")` naming the line and column.
"""

from __future__ import annotations

import re

from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.llg.cfg import EMPTY, Cat, Choice, Grammar, Repeat, Sym, Term, cat, choice, lex, repeat
from sprig.grammar.regex import charset, ir

MAX_GRAMMAR_CHARS = 1_000_000
MAX_REPEAT = 100_000  # why: counted repetitions beyond this are a size attack, not a grammar
MAX_TERMS = 10_000  # why: literals, classes and references; keeps a 10^5-way alternation under a second
MAX_LARK_PIECES = 50_000
_LARK_PIECE = re.compile(r'"(?:\\.|[^"\\])*"|/(?:\\.|[^/\\\n])+/|[A-Za-z_][A-Za-z0-9_]*|[|()*+?~]')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_RULE_START = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)[ \t]*::=")
_LLG_POSITION = re.compile(r"^(?:at )?(\d+)\((\d+)\):\s*(.*)$", re.S)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^",
            "/": "/", "'": "'", ".": "."}


def invalid(message: str, text: str = "", pos: int | None = None) -> GrammarError:
    """An invalid-grammar error; with a position, the message names its line and column."""
    if pos is not None:
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        message = f"line {line}, column {column}: {message}"
    return GrammarError(f"invalid grammar at {message}" if pos is not None else f"invalid grammar: {message}",
                        GrammarErrorCode.INVALID_GRAMMAR, param="ebnf")


def llguidance_error(message: str) -> GrammarError:
    """llguidance's grammar error ("at 3(7): unknown name ...") as an invalid-grammar error with the position."""
    first = message.strip().split("\n", 1)[0]
    match = _LLG_POSITION.match(first)
    if match:
        where, what = f"line {match.group(1)}, column {match.group(2)}", match.group(3)
        return GrammarError(f"invalid grammar at {where}: {what[:200]}", GrammarErrorCode.INVALID_GRAMMAR,
                            param="ebnf")
    return invalid(first[:200] or "refused by the grammar compiler")


def ebnf_to_lark(text: str) -> str:
    """The Lark text llguidance compiles for a GBNF/EBNF or Lark grammar; raises GrammarError."""
    if not isinstance(text, str) or not text.strip():
        raise invalid("the grammar is empty")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise too_complex(f"grammar longer than {MAX_GRAMMAR_CHARS} characters").with_param("ebnf")
    if "::=" not in text:
        return _checked_lark(text)
    return _Parser(text).grammar().to_lark()


def _checked_lark(text: str) -> str:
    import llguidance

    pieces = len(_LARK_PIECE.findall(text))
    if pieces > MAX_LARK_PIECES:  # why: llguidance takes seconds, then panics, on ~10^5 symbols
        raise too_complex(f"about {pieces} grammar pieces (limit {MAX_LARK_PIECES})").with_param("ebnf")

    try:
        error = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(text))
    except BaseException as exc:  # why: llguidance panics (a BaseException) on some oversized grammars
        if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
            raise
        raise too_complex("the grammar compiler refused the grammar (size)").with_param("ebnf") from None
    if error:
        raise llguidance_error(error)
    return text


class _Parser:
    """Recursive descent over GBNF text; `pos` is an index into `text`."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0
        self.rules: dict[str, Term] = {}
        self.used: dict[str, int] = {}  # rule name -> first position it is referenced at
        self.terms = 0

    def grammar(self) -> Grammar:
        self._skip()
        while self.pos < len(self.text):
            match = _RULE_START.match(self.text, self.pos)
            if match is None:
                raise invalid("expected a rule 'name ::= ...'", self.text, self.pos)
            name, start = match.group(1), self.pos
            self.pos = match.end()
            body = self._alternatives(top=True)
            if name in self.rules:
                raise invalid(f"rule '{name[:40]}' is defined twice", self.text, start)
            self.rules[name] = body
            self._skip()
        if "root" not in self.rules:
            raise invalid("no 'root' rule (the start of the grammar)")
        for name, pos in self.used.items():
            if name not in self.rules:
                raise invalid(f"undefined rule '{name[:40]}'", self.text, pos)
        names = {name: "start" if name == "root" else f"g{i}_{re.sub('[^a-z0-9_]', '_', name.lower())}"
                 for i, name in enumerate(self.rules)}
        grammar = Grammar()
        for name, body in self.rules.items():
            grammar.add(names[name], _renamed(body, names))
        if not grammar.prune():
            raise invalid("the 'root' rule derives no finite string")
        return grammar

    def _skip(self, newlines: bool = True) -> None:
        """Skip blanks and comments (newlines too, unless a newline may end the current rule)."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif c in " \t\r" or (c == "\n" and newlines):
                self.pos += 1
            else:
                return

    def _at_rule_end(self) -> bool:
        if self.pos >= len(self.text):
            return True
        return _RULE_START.match(self.text, self.pos) is not None

    def _alternatives(self, top: bool = False) -> Term:
        options = [self._sequence(top)]
        while True:
            self._skip()
            if self.pos < len(self.text) and self.text[self.pos] == "|":
                self.pos += 1
                options.append(self._sequence(top))
            else:
                return choice(*options)

    def _sequence(self, top: bool) -> Term:
        items: list[Term] = []
        while True:
            self._skip()
            if self.pos >= len(self.text) or self.text[self.pos] in "|)" or (top and self._at_rule_end()):
                return cat(*items) if items else EMPTY
            items.append(self._postfix(self._primary()))

    def _primary(self) -> Term:
        c, start = self.text[self.pos], self.pos
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise too_complex(f"more than {MAX_TERMS} terms in the grammar").with_param("ebnf")
        if c == '"':
            return lex(ir.lit(self._literal()))
        if c == "[":
            return lex(ir.chars(self._class()))
        if c == ".":
            self.pos += 1
            return lex(ir.chars(charset.ALL_CHARS))
        if c == "(":
            self.pos += 1
            inner = self._alternatives()
            self._skip()
            if self.pos >= len(self.text) or self.text[self.pos] != ")":
                raise invalid("expected ')'", self.text, start if self.pos >= len(self.text) else self.pos)
            self.pos += 1
            return inner
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise invalid(f"unexpected character {c!r}", self.text, self.pos)
        self.pos = match.end()
        self.used.setdefault(match.group(0), start)
        return _Ref(match.group(0))

    def _postfix(self, term: Term) -> Term:
        while self.pos < len(self.text) and self.text[self.pos] in "*+?{":
            c = self.text[self.pos]
            if c == "{":
                lo, hi = self._braces()
                term = repeat(term, lo, hi)
                continue
            self.pos += 1
            term = repeat(term, 0 if c in "*?" else 1, 1 if c == "?" else None)
        return term

    def _braces(self) -> tuple[int, int | None]:
        start = self.pos
        end = self.text.find("}", start)
        match = re.fullmatch(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}", self.text[start:end + 1]) if end > 0 else None
        if match is None:
            raise invalid("expected a repetition {m}, {m,} or {m,n}", self.text, start)
        lo = int(match.group(1))
        hi = lo if match.group(2) is None else (int(match.group(3)) if match.group(3) else None)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise too_complex(f"a repetition count over {MAX_REPEAT}").with_param("ebnf")
        if hi is not None and hi < lo:
            raise invalid("a repetition {m,n} with n < m", self.text, start)
        self.pos = end + 1
        return lo, hi

    def _literal(self) -> str:
        start, out = self.pos, list[str]()
        self.pos += 1
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] == "\n":
                raise invalid("unterminated string literal", self.text, start)
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            out.append(chr(self._char()))

    def _class(self) -> charset.Ranges:
        start = self.pos
        self.pos += 1
        negate = self.text.startswith("^", self.pos)
        self.pos += negate
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] == "\n":
                raise invalid("unterminated character class", self.text, start)
            if self.text[self.pos] == "]":
                self.pos += 1
                break
            lo = self._char()
            hi = lo
            if self.text.startswith("-", self.pos) and not self.text.startswith("-]", self.pos):
                self.pos += 1
                hi = self._char()
                if hi < lo:
                    raise invalid("a character range whose end is before its start", self.text, start)
            ranges.append((lo, hi))
        result = charset.normalize(ranges)
        return charset.complement(result) if negate else result

    def _char(self) -> int:
        """One (possibly escaped) character of a literal or class, as a code point."""
        c = self.text[self.pos]
        if c != "\\":
            self.pos += 1
            return ord(c)
        esc = self.text[self.pos + 1:self.pos + 2]
        if esc in _ESCAPES:
            self.pos += 2
            return ord(_ESCAPES[esc])
        width = {"x": 2, "u": 4, "U": 8}.get(esc)
        digits = self.text[self.pos + 2:self.pos + 2 + width] if width else ""
        if not width or not re.fullmatch(r"[0-9A-Fa-f]+", digits or "-") or len(digits) != width:
            raise invalid(f"invalid escape '\\{esc}'", self.text, self.pos)
        cp = int(digits, 16)
        if cp > charset.MAX_CP or charset.SURROGATES[0] <= cp <= charset.SURROGATES[1]:
            raise invalid("an escape that is not a Unicode scalar value", self.text, self.pos)
        self.pos += 2 + width
        return cp


class _Ref(Sym):
    """A GBNF rule reference, renamed to its Lark name once every rule is known."""


def _renamed(term: Term, names: dict[str, str]) -> Term:
    """`term` with GBNF rule names replaced by their (unique, lower-case) grammar names."""
    if isinstance(term, _Ref):
        return Sym(names[term.name])
    if isinstance(term, Cat):
        return cat(*(_renamed(i, names) for i in term.items))
    if isinstance(term, Choice):
        return choice(*(_renamed(i, names) for i in term.items))
    if isinstance(term, Repeat):
        return repeat(_renamed(term.item, names), term.lo, term.hi)
    return term

"""A small context-free grammar over regex lexemes, rendered as a Lark grammar for llguidance.

The JSON-schema and EBNF front ends build `Grammar`s: named rules whose bodies are terms over lexemes
(`Lex`, an `ir.Node` regex), rule references (`Sym`), sequences, choices and counted repetitions. Before
rendering, `Grammar.prune` drops what can never derive a finite string (a required property whose schema
allows nothing, a recursion without a base case), so every prefix the mask allows can still be completed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from sprig.grammar.errors import too_complex
from sprig.grammar.regex import ir

MAX_RULES = 50_000  # why: keeps a pathological schema from producing an unbounded grammar
MAX_SYMBOLS = 50_000  # why: llguidance numbers its symbols with u16 and panics past 65,535 (after seconds)
MAX_LEXEME_CHARS = 4_000_000  # why: one regex text past this is a denial of service, not a schema
MAX_REQUIRED_COUNT = 100_000  # why: a minimum no generation reaches (minItems: 10^6) is refused, not compiled


class Term:
    __slots__ = ()


@dataclass(frozen=True)
class Lex(Term):
    regex: ir.Node  # one lexeme: the lexer matches it greedily


@dataclass(frozen=True)
class LexAnd(Term):
    """One lexeme matching every part and none of `excluded` (llguidance intersects and negates lazily)."""

    parts: tuple[ir.Node, ...]
    excluded: tuple[ir.Node, ...] = ()


@dataclass(frozen=True)
class Lazy(Term):
    """A lexeme that ends at its shortest match (llguidance's lazy lexemes: text up to a trigger)."""

    regex: ir.Node


@dataclass(frozen=True)
class TokenRef(Term):
    """One special token by id (a token with no text, as Mistral's [TOOL_CALLS]); llguidance's `<[id]>`."""

    token_id: int


@dataclass(frozen=True)
class Sym(Term):
    name: str  # a rule, by name


@dataclass(frozen=True)
class Cat(Term):
    items: tuple[Term, ...]


@dataclass(frozen=True)
class Choice(Term):
    items: tuple[Term, ...]


@dataclass(frozen=True)
class Repeat(Term):
    item: Term
    lo: int
    hi: int | None


EMPTY: Term = Cat(())
NEVER: Term = Choice(())


def lex(node: ir.Node) -> Term:
    """A lexeme, or EMPTY/NEVER where the regex matches only the empty string / nothing."""
    if ir.is_never(node):
        return NEVER
    if node.max_len == 0:
        return EMPTY
    return Lex(node)


def cat(*items: Term) -> Term:
    flat: list[Term] = []
    for item in items:
        if item == NEVER:
            return NEVER
        flat.extend(item.items if isinstance(item, Cat) else (item,))
    return flat[0] if len(flat) == 1 else Cat(tuple(flat))


def choice(*items: Term) -> Term:
    flat: dict[Term, None] = {}  # why: ordered and deduplicated in linear time (10^5-way alternations)
    for item in items:
        for part in item.items if isinstance(item, Choice) else (item,):
            flat[part] = None
    return next(iter(flat)) if len(flat) == 1 else Choice(tuple(flat))


def repeat(item: Term, lo: int, hi: int | None) -> Term:
    if hi is not None and lo > hi:
        return NEVER
    if hi == 0 or item == EMPTY:
        return EMPTY
    if item == NEVER:
        return EMPTY if lo == 0 else NEVER
    if lo == hi == 1:
        return item
    return Repeat(item, lo, hi)


def opt(item: Term) -> Term:
    return repeat(item, 0, 1)


@dataclass
class Grammar:
    """Rules by name; `start` derives the whole output."""

    rules: dict[str, Term] = field(default_factory=dict)
    start: str = "start"

    def add(self, name: str, body: Term) -> None:
        if len(self.rules) >= MAX_RULES:
            raise too_complex(f"more than {MAX_RULES} grammar rules")
        self.rules[name] = body

    def embed(self, other: Grammar, prefix: str) -> Sym:
        """Copy `other`'s rules in under `prefix` (names kept apart); the symbol of its start rule."""
        for name, body in other.rules.items():
            self.add(prefix + name, _renamed(body, prefix))
        return Sym(prefix + other.start)

    def prune(self) -> bool:
        """Drop everything that derives no finite string; False if the start rule itself derives none."""
        users: dict[str, list[str]] = {}  # rule -> the rules whose bodies refer to it
        for name, body in self.rules.items():
            for used in _refs(body):
                users.setdefault(used, []).append(name)
        live: set[str] = set()
        todo = list(self.rules)
        while todo:  # why: least fixpoint of "some alternative has only productive parts", by worklist
            name = todo.pop()
            if name not in live and _productive(self.rules[name], live):
                live.add(name)
                todo.extend(user for user in users.get(name, ()) if user not in live)
        self.rules = {name: _pruned(body, live) for name, body in self.rules.items() if name in live}
        return self.start in live

    def to_lark(self) -> str:
        """The Lark text llguidance compiles: `start` first, lexemes as named terminals."""
        symbols = len(self.rules) + sum(_composites(body) for body in self.rules.values())
        if symbols > MAX_SYMBOLS:
            raise too_complex(f"about {symbols} grammar symbols (limit {MAX_SYMBOLS})")
        lexemes: dict[str, str] = {}
        lines = [f"{_rule_name(self.start)}: {_render(self.rules[self.start], lexemes)}"]
        lines += [f"{_rule_name(n)}: {_render(b, lexemes)}" for n, b in self.rules.items() if n != self.start]
        lines += [f"{name}[lazy]: {text[5:]}" if name.startswith("lazy") else f"{name}: {text}"
                  for text, name in lexemes.items()]
        return "\n".join(lines) + "\n"


def _rule_name(name: str) -> str:
    return "start" if name == "start" else f"r_{name}"


def _renamed(term: Term, prefix: str) -> Term:
    if isinstance(term, Sym):
        return Sym(prefix + term.name)
    if isinstance(term, Cat):
        return Cat(tuple(_renamed(i, prefix) for i in term.items))
    if isinstance(term, Choice):
        return Choice(tuple(_renamed(i, prefix) for i in term.items))
    if isinstance(term, Repeat):
        return Repeat(_renamed(term.item, prefix), term.lo, term.hi)
    return term


def _refs(term: Term) -> set[str]:
    """The rules `term` refers to."""
    if isinstance(term, Sym):
        return {term.name}
    if isinstance(term, Cat | Choice):
        return set().union(*(_refs(i) for i in term.items))
    if isinstance(term, Repeat):
        return _refs(term.item)
    return set()


def _productive(term: Term, live: set[str]) -> bool:
    if isinstance(term, Lex | LexAnd | Lazy | TokenRef):
        return True  # why: the emitters only build LexAnd over a non-empty language
    if isinstance(term, Sym):
        return term.name in live
    if isinstance(term, Cat):
        return all(_productive(i, live) for i in term.items)
    if isinstance(term, Choice):
        return any(_productive(i, live) for i in term.items)
    assert isinstance(term, Repeat)
    return term.lo == 0 or _productive(term.item, live)


def _pruned(term: Term, live: set[str]) -> Term:
    if isinstance(term, Sym):
        return term if term.name in live else NEVER
    if isinstance(term, Cat):
        return cat(*(_pruned(i, live) for i in term.items))
    if isinstance(term, Choice):
        return choice(*(p for p in (_pruned(i, live) for i in term.items) if p != NEVER))
    if isinstance(term, Repeat):
        return repeat(_pruned(term.item, live), term.lo, term.hi)
    return term


def _composites(term: Term) -> int:
    """Symbols llguidance will make for `term`: one per lexeme reference, group and repetition (an upper bound)."""
    if isinstance(term, Lex | LexAnd | Lazy | TokenRef):
        return 1
    if isinstance(term, Cat | Choice):
        return 1 + sum(_composites(i) for i in term.items)
    if isinstance(term, Repeat):
        return 1 + _composites(term.item)
    return 0


def _render(term: Term, lexemes: dict[str, str]) -> str:
    if isinstance(term, TokenRef):
        return f"<[{term.token_id}]>"
    if isinstance(term, Lazy):  # why: llguidance takes [lazy] only on a lower-case rule over one lexeme
        key = f"lazy:/{_lexeme_text(term.regex)}/"
        return lexemes.setdefault(key, f"lazy{len(lexemes)}")
    if isinstance(term, Lex | LexAnd):
        nodes = (term.regex,) if isinstance(term, Lex) else term.parts
        if max(n.min_len for n in nodes) > MAX_REQUIRED_COUNT:
            raise too_complex(f"a value of at least {max(n.min_len for n in nodes)} characters")
        excluded = term.excluded if isinstance(term, LexAnd) else ()
        text = " & ".join([f"/{_lexeme_text(n)}/" for n in nodes] + [f"~/{_lexeme_text(n)}/" for n in excluded])
        if len(text) > MAX_LEXEME_CHARS:
            raise too_complex(f"a lexeme of more than {MAX_LEXEME_CHARS} regex characters")
        return lexemes.setdefault(text, f"L{len(lexemes)}")
    if isinstance(term, Sym):
        return _rule_name(term.name)
    if isinstance(term, Cat):
        return " ".join(_atom(i, lexemes) for i in term.items) if term.items else '""'
    if isinstance(term, Choice):
        if not term.items:
            raise AssertionError("NEVER survives only in unpruned grammars")
        return " | ".join(_render(i, lexemes) for i in term.items)
    assert isinstance(term, Repeat)
    inner = _atom(term.item, lexemes)
    lo, hi = term.lo, term.hi
    if lo > MAX_REQUIRED_COUNT:
        raise too_complex(f"at least {lo} repetitions (limit {MAX_REQUIRED_COUNT})")
    if hi is None:
        return f"{inner}*" if lo == 0 else f"{inner}+" if lo == 1 else f"{inner}~{lo} {inner}*"
    if lo == 0 and hi == 1:
        return f"{inner}?"
    return f"{inner}~{lo}" if lo == hi else f"{inner}~{lo}..{hi}"


@functools.lru_cache(maxsize=4096)  # why: formats, keys and "any value" recur in every object and schema
def _lexeme_text(node: ir.Node) -> str:
    return node.render().replace("/", "\\/")


def _atom(term: Term, lexemes: dict[str, str]) -> str:
    text = _render(term, lexemes)
    return text if isinstance(term, Lex | LexAnd | Lazy | TokenRef | Sym) else f"({text})"

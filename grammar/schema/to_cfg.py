"""JSON Schema → context-free grammar (rules over regex lexemes) for the llguidance backend.

The meaning of each subschema comes from the same `Evaluator` the regex backend uses; only the shape of the
output differs. Every instance location's expression becomes one rule, so a `$ref` back into itself is
real recursion (no depth bound), an unconstrained value is a recursive `value` rule (any depth), and
`maxItems: 10` of an object is ten references to one rule, not ten copies of its automaton. Leaves
(strings with their patterns and formats, bounded numbers, literals) stay sprig's exact regexes, each one
lexeme. Objects are written with declared keys first, in schema order, then other keys, as before.
Longer than 450 lines: one emitter, whose per-keyword methods share its rule table and names.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from sprig.grammar.errors import GrammarTooComplex, invalid_schema, too_complex, unsupported
from sprig.grammar.llg.cfg import EMPTY, NEVER, Grammar, LexAnd, Sym, Term, cat, choice, lex, opt, repeat
from sprig.grammar.regex import ir
from sprig.grammar.schema import intsteps, strings
from sprig.grammar.schema.domains import MAX_UNIQUE_DOMAIN, unique_domain
from sprig.grammar.schema.evaluator import Evaluator
from sprig.grammar.schema.json_text import ANY_STRING, FALSE, NULL, TRUE, Punctuation, dumps, json_string
from sprig.grammar.schema.load import load_schema
from sprig.grammar.schema.refs import RECURSIVE_ANCHOR, SchemaDocument, check_schema_shape
from sprig.grammar.schema.spellings import (
    JSON_NUMBER_ZEROS,
    Spelling,
    integer_suffixes,
    number_spellings,
    zero_spellings,
)
from sprig.grammar.schema.values import (
    S_ALL,
    ArrShape,
    Bound,
    Expr,
    Node,
    ObjShape,
    Ref,
    SLits,
    ValueSet,
    and_,
    not_,
    s_and,
    s_not,
)
from sprig.grammar.spec import JsonOptions

BALANCED_AFTER = 24  # why: a long run of optional properties is joined as a balanced tree (shallow terms)
ZERO = Decimal(0)
ANY = "any"  # the rule name of "any JSON value"
LOCATING_KEYWORDS = ("oneOf", "anyOf", "allOf", "not", "if", "$ref", "format", "pattern", "propertyNames")
MAX_COUNT_RULES = 20_000  # why: minProperties/maxProperties make one rule per (property, count)


class FlatEvaluator(Evaluator):
    """An `Evaluator` whose `$ref`s do not count depth: the grammar recurses, so no bound is needed.

    The path of an expression is not the `$ref`s entered but the dynamic scope: the `$dynamicAnchor`s bound
    by the schema resources entered so far, outermost first (usually empty). So the lazy child expressions
    of a recursive schema repeat exactly and become one rule each, and a `$dynamicRef` resolves as JSON
    Schema says. An evaluation that needs itself (a `oneOf`/`not` overlap test through a recursive `$ref`)
    is refused with the `$ref` that closed the loop.
    """

    key_witnesses = True

    def __init__(self, doc: SchemaDocument, options: JsonOptions) -> None:
        super().__init__(doc, options)
        self._active: dict[tuple[Expr, tuple[str, ...]], int] = {}  # in evaluation -> instance depth
        self._depth = 0

    def eval(self, expr: Expr, path: tuple[str, ...]) -> ValueSet:
        key = (expr, path)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            origin = expr.origin if isinstance(expr, Ref) else getattr(expr, "pointer", "")
            if self._active[key] == self._depth:  # why: back at the same instance location: nothing consumed
                raise invalid_schema("$ref cycle that never reaches a value", origin)
            raise unsupported("$ref", origin, "a recursive reference that an overlap test would unfold forever")
        self._active[key] = self._depth
        try:
            value = self._memo[key] = self._eval(expr, path)
        finally:
            del self._active[key]
        return value

    def eval_child(self, expr: Expr, path: tuple[str, ...]) -> ValueSet:
        self._depth += 1
        try:
            return super().eval_child(expr, ())
        finally:
            self._depth -= 1

    def _eval_ref(self, ref: Ref, path: tuple[str, ...]) -> ValueSet:
        if ref.pointer in self._local:
            raise invalid_schema("$ref cycle that never reaches a value", ref.origin)
        self._local.append(ref.pointer)
        try:
            return self.eval(Node(ref.pointer), path)
        finally:
            self._local.pop()

    def _eval_schema(self, pointer: str, path: tuple[str, ...]) -> ValueSet:
        bound = dict(zip(path[::2], path[1::2], strict=True))
        resource = self.doc.resources.get(self.doc.base_of.get(pointer, ""), "")
        for name, anchor in self.doc.dynamic_scope.get(resource, {}).items():  # within a resource: in scope
            if name not in bound:
                bound[name] = anchor
                path = path + (name, anchor)
        return super()._eval_schema(pointer, path)

    def _dynamic_ref(self, ref: str, pointer: str, path: tuple[str, ...]) -> str:
        """The outermost dynamic anchor of the name in scope, where the static target is one (JSON Schema)."""
        target = self.doc.resolve(ref, pointer)
        name = ref.partition("#")[2]
        node = self.doc.lookup(target)
        if isinstance(node, dict) and node.get("$dynamicAnchor") == name:
            return dict(zip(path[::2], path[1::2], strict=True)).get(name, target)
        return target

    def _recursive_ref(self, pointer: str, path: tuple[str, ...]) -> str:
        """The outermost `$recursiveAnchor` resource in scope, where the static target is one (2019-09)."""
        target = self.doc.resolve("#", pointer)
        if target in self.doc.recursive:
            return dict(zip(path[::2], path[1::2], strict=True)).get(RECURSIVE_ANCHOR, target)
        return target


class CfgEmitter:
    """Builds the grammar of one schema document: one rule per distinct child expression."""

    def __init__(self, evaluator: Evaluator, options: JsonOptions) -> None:
        self.ev, self.options = evaluator, options
        self.spelling = Spelling.for_draft(evaluator.doc.draft)
        self.p = Punctuation(options)
        self.grammar = Grammar()
        self._names: dict[Expr, str] = {}
        self._todo: list[tuple[str, Expr]] = []

    def build(self, root: Expr) -> Grammar:
        """The grammar whose start rule derives the instances of `root`, pruned."""
        self._names[root] = "start"
        self._todo.append(("start", root))
        self.drain()
        return self.grammar

    def drain(self) -> None:
        """Write the rules of every expression referenced so far (and of the ones they reference)."""
        while self._todo:  # why: a worklist, not recursion: deep schemas must not exhaust the Python stack
            name, expr = self._todo.pop()
            try:
                self.grammar.add(name, self.value_set(self.ev.eval_child(expr, ())))
            except GrammarTooComplex as err:
                if err.pointer is not None:
                    raise
                raise self._located(err, expr) from None

    def _located(self, err: GrammarTooComplex, expr: Expr) -> GrammarTooComplex:
        """A budget error from emitting `expr`, naming the keyword and pointer of the schema it came from."""
        while isinstance(expr, Bound):
            expr = expr.item
        pointer = expr.pointer if isinstance(expr, Node | Ref) else ""
        node = self.ev.doc.lookup(pointer) if isinstance(expr, Node | Ref) else None
        keys = [k for k in LOCATING_KEYWORDS if isinstance(node, dict) and k in node]
        keyword = keys[0] if keys else pointer.rsplit("/", 1)[-1] or "$schema"
        where = f"{pointer}/{keyword}" if keys else pointer
        return too_complex(f"'{keyword}' at '{where or '/'}': {err.message.removeprefix('grammar too complex: ')}",
                           where or "/")

    def rule(self, expr: Expr) -> Term:
        name = self._names.get(expr)
        if name is None:
            name = self._names[expr] = str(len(self._names))
            self._todo.append((name, expr))
        return Sym(name)

    def value_set(self, vs: ValueSet) -> Term:
        if vs.is_top():
            return self.any_value()
        scalars = [NULL] if vs.null else []
        scalars += [TRUE] if True in vs.bools else []
        scalars += [FALSE] if False in vs.bools else []
        scalars.append(number_spellings(vs.ints, vs.fracs, self.spelling))
        together = strings.intersection_parts(vs.strings)
        clauses: list[tuple[list[ir.Node], list[ir.Node]]] = []
        if together is None:
            try:
                scalars.append(json_string(strings.string_language(vs.strings)))
            except GrammarTooComplex:  # why: a format beside its complement: one lazy lexeme per clause instead
                clauses = strings.lazy_clauses(vs.strings)
        elif not strings.intersection_is_empty(together):  # why: lazily, not as one DFA
            clauses = [(together, [])]
        parts = [lex(ir.alt(*scalars))]
        parts += [LexAnd(tuple(json_string(p) for p in pos), tuple(json_string(n) for n in neg)) for pos, neg in clauses]
        any_spelling = self.spelling is Spelling.ANY  # why: `10.0` and `10e0` are multiples of 5 too
        suffix = opt(lex(integer_suffixes())) if any_spelling else EMPTY
        parts += [cat(intsteps.piece_grammar(self.grammar, f"m{len(self.grammar.rules)}_{i}", interval, step), suffix)
                  for i, (interval, step) in enumerate(vs.steps)]
        if vs.steps and intsteps.contains(vs.ints, vs.steps, 0) and not vs.ints.contains(ZERO):
            parts.append(lex(zero_spellings(any_spelling)))  # why: -0 and 0e5 are zero, a multiple of every step
        parts += [self.array(shape) for shape in vs.arrays]
        parts += [self.object(shape) for shape in vs.objects]
        return choice(*(p for p in parts if p != NEVER)) if any(p != NEVER for p in parts) else NEVER

    def any_value(self) -> Term:
        """Any JSON value, at any depth: three mutually recursive rules."""
        if ANY not in self.grammar.rules:
            p, value = self.p, Sym(ANY)
            items = cat(value, repeat(cat(lex(p.comma), value), 0, None))
            pair = cat(lex(ir.seq(ANY_STRING, p.colon)), value)
            pairs = cat(pair, repeat(cat(lex(p.comma), pair), 0, None))
            self.grammar.add(ANY, choice(
                lex(ir.alt(NULL, TRUE, FALSE, JSON_NUMBER_ZEROS, ANY_STRING)),
                cat(lex(p.open_array), opt(items), lex(p.close_array)),
                cat(lex(p.open_object), opt(pairs), lex(p.close_object))))
        return Sym(ANY)

    def array(self, shape: ArrShape) -> Term:
        if shape.unique:
            return self._unique(shape)
        if shape.contains:
            return self._contains(shape)
        prefix = [self.rule(e) for e in shape.prefix]
        tail = self.rule(shape.items)
        if shape.max_items is not None and shape.min_items > shape.max_items:
            return NEVER
        body = self._array_body(prefix, tail, 0, shape.min_items, shape.max_items)
        return cat(lex(self.p.open_array), body, lex(self.p.close_array))

    def _unique(self, shape: ArrShape) -> Term:
        """uniqueItems over a small finite domain: one rule per set of values used so far (distinct items, so
        the set's size is the position, which picks the prefixItems entry or the items rule)."""
        if shape.contains:
            raise unsupported("uniqueItems", shape.unique, "only without contains")
        domains = [unique_domain(self.ev, self.p, self.ev.eval_child(e, ())) for e in (*shape.prefix, shape.items)]
        values = dict(kv for d in domains for kv in d or ())
        if any(d is None for d in domains) or len(values) > MAX_UNIQUE_DOMAIN:
            raise unsupported("uniqueItems", shape.unique, f"items with more than {MAX_UNIQUE_DOMAIN} possible values")
        keys = list(values)
        at = [[keys.index(k) for k, _ in d or ()] for d in domains]  # why: per position; the last one repeats
        items = [lex(node) for node in values.values()]
        lo, hi = shape.min_items, len(values) if shape.max_items is None else min(shape.max_items, len(values))
        base, comma = f"u{len(self._names)}_{len(self.grammar.rules)}", lex(self.p.comma)

        def next_items(mask: int, sep: Term) -> list[Term]:
            n = bin(mask).count("1")
            return [cat(sep, items[i], used(mask | 1 << i)) for i in at[min(n, len(at) - 1)]
                    if not mask >> i & 1 and n < hi]

        def used(mask: int) -> Term:
            name = f"{base}_{mask}"
            if name not in self.grammar.rules:
                self.grammar.add(name, NEVER)
                self.grammar.rules[name] = choice(EMPTY if bin(mask).count("1") >= lo else NEVER,
                                                  *next_items(mask, comma))
            return Sym(name)

        first = choice(EMPTY if lo == 0 else NEVER, *next_items(0, EMPTY))
        return cat(lex(self.p.open_array), first, lex(self.p.close_array))

    def _contains(self, shape: ArrShape) -> Term:
        """Arrays with between lo and hi items matching C: rules that count the matches so far."""
        if len(shape.contains) > 1 or shape.prefix or shape.min_items or shape.max_items is not None:
            where = next((e.item.pointer for e, _, _ in shape.contains
                          if isinstance(e, Bound) and isinstance(e.item, Node)), "")
            raise unsupported("contains", where, "only one contains, without prefixItems, minItems or maxItems")
        expr, lo, hi = shape.contains[0]
        match = self.rule(and_(shape.items, expr))
        # why: with no maximum, any item may fill the gaps; with one, the gaps must not match
        other = self.rule(shape.items if hi is None else and_(shape.items, not_(expr)))
        cap, base, comma = hi if hi is not None else lo, f"c{len(self._names)}_{len(self.grammar.rules)}", lex(self.p.comma)
        if cap > MAX_COUNT_RULES:
            raise too_complex(f"counting {cap} matching items")

        def after(c: int) -> Term:  # at least one item written, c of them matching (capped when hi is None)
            name = f"{base}_{c}"
            if name not in self.grammar.rules:
                self.grammar.add(name, NEVER)
                nxt = c + 1 if hi is not None else min(c + 1, cap)
                self.grammar.rules[name] = choice(
                    EMPTY if c >= lo else NEVER, cat(comma, other, after(c)),
                    cat(comma, match, after(nxt)) if hi is None or c + 1 <= hi else NEVER)
            return Sym(name)

        first = choice(EMPTY if lo == 0 else NEVER, cat(other, after(0)),
                       cat(match, after(1 if hi is not None else min(1, cap))) if hi is None or hi >= 1 else NEVER)
        return cat(lex(self.p.open_array), first, lex(self.p.close_array))

    def _array_body(self, prefix: list[Term], tail: Term, i: int, lo: int, hi: int | None) -> Term:
        comma = lex(self.p.comma)
        if hi is not None and i >= hi:
            return EMPTY
        if i == len(prefix):  # the remaining items all match `tail`
            need, room = max(lo - i, 0), None if hi is None else hi - i
            if i > 0:
                return repeat(cat(comma, tail), need, room)
            more = repeat(cat(comma, tail), max(need - 1, 0), None if room is None else room - 1)
            some = cat(tail, more)
            return some if need > 0 else opt(some)
        step = cat(comma if i > 0 else EMPTY, prefix[i], self._array_body(prefix, tail, i + 1, lo, hi))
        return step if i < lo else opt(step)

    def object(self, shape: ObjShape) -> Term:
        if shape.some:
            return self._witnessed(shape)
        if shape.counted():
            return self._counted_object(shape)
        found = self._entries(shape)
        if found is None:
            return NEVER
        entries, pair = found
        if pair is not None:
            entries.append((cat(pair, repeat(cat(lex(self.p.comma), pair), 0, None)), False))
        return cat(lex(self.p.open_object), self._join(entries), lex(self.p.close_object))

    def _witnessed(self, shape: ObjShape) -> Term:
        """Objects where some key of the first witness's language has a value it allows: that key is a
        declared one (one alternative each: required, its value narrowed) or one of the other keys."""
        w, rest = shape.some[0], shape.some[1:]
        alts = [self.object(replace(shape, entries=shape.entries[:i] + ((key, and_(expr, w.value), True),)
                                    + shape.entries[i + 1:], some=rest))
                for i, (key, expr, _) in enumerate(shape.entries) if strings.member(w.keys, key)]
        declared = s_not(SLits(frozenset(k for k, _, _ in shape.entries))) if shape.entries else S_ALL
        witnesses = [(keys, and_(expr, w.value)) for lang, expr in shape.regions()
                     if not strings.is_empty(keys := s_and(lang, shape.names, declared, w.keys))]
        witnesses = [(k, e) for k, e in witnesses if self.ev.eval_child(e, ()) != ValueSet.bottom()]
        if not witnesses:
            return choice(*alts) if alts else NEVER
        if rest or shape.counted():
            keyword = w.origin.rsplit("/", 1)[-1] or "not"
            raise unsupported(keyword, w.origin, "a negated key rule together with another one or a key count")
        found = self._entries(replace(shape, some=()))
        if found is None:
            return choice(*alts) if alts else NEVER
        entries, pair = found
        comma = lex(self.p.comma)
        hit = choice(*(cat(lex(ir.seq(json_string(strings.string_language(keys)), self.p.colon)), self.rule(e))
                       for keys, e in witnesses))
        others = [hit] if pair is None else [repeat(cat(pair, comma), 0, None), hit, repeat(cat(comma, pair), 0, None)]
        entries.append((cat(*others), True))
        alts.append(cat(lex(self.p.open_object), self._join(entries), lex(self.p.close_object)))
        return choice(*alts)

    def _entries(self, shape: ObjShape) -> tuple[list[tuple[Term, bool]], Term | None] | None:
        """Declared entries (key lexeme + value rule, required) and the pair for other keys; None: no object."""
        entries: list[tuple[Term, bool]] = []
        for key, expr, required in shape.entries:
            if self.ev.eval_child(expr, ()) == ValueSet.bottom():
                if required:
                    return None
                continue  # why: a forbidden key (false schema) is simply never written
            entries.append((cat(lex(ir.seq(ir.lit(dumps(key)), self.p.colon)), self.rule(expr)), required))
        return entries, self._other_keys(shape)

    def _other_keys(self, shape: ObjShape) -> Term | None:
        """Key-value pairs for the keys `properties` does not declare, or None where there can be none."""
        declared = [k for k, _, _ in shape.entries]
        if declared and not shape.patterns and shape.names == S_ALL:  # why: the common open object
            if self.ev.eval_child(shape.additional, ()) == ValueSet.bottom():
                return None
            # why: "any key but these" as llguidance's lazy negation, not a complemented trie built here
            key = LexAnd((ir.seq(ANY_STRING, self.p.colon),),
                         (ir.seq(ir.alt(*(json_string(ir.lit(k)) for k in declared)), self.p.colon),))
            return cat(key, self.rule(shape.additional))
        pairs = [cat(lex(ir.seq(json_string(keys), self.p.colon)), self.rule(expr))
                 for keys, expr in strings.undeclared_keys(shape) if self.ev.eval_child(expr, ()) != ValueSet.bottom()]
        return choice(*pairs) if pairs else None

    def _counted_object(self, shape: ObjShape) -> Term:
        """An object with minProperties/maxProperties: one rule per (entry, keys written so far)."""
        found = self._entries(shape)
        if found is None:
            return NEVER
        entries, pair = found
        lo, hi = shape.min_props, shape.max_props
        cap = hi if hi is not None else lo  # why: without a maximum, counts past the minimum behave alike
        if (len(entries) + 1) * (cap + 1) > MAX_COUNT_RULES:
            raise too_complex(f"counting up to {cap} keys over {len(entries)} properties", shape.origin)
        base, comma = f"n{len(self._names)}_{len(self.grammar.rules)}", lex(self.p.comma)

        def state(i: int, c: int) -> Term:
            name = f"{base}_{i}_{c}"
            if name in self.grammar.rules:
                return Sym(name)
            self.grammar.add(name, NEVER)  # why: reserve the name; the body below may refer back to it
            sep = comma if c > 0 else EMPTY
            if i == len(entries):  # other keys: enough to reach lo, at most hi
                need, room = max(lo - c, 0), None if hi is None else hi - c
                if pair is None:
                    body = EMPTY if need == 0 else NEVER
                elif c > 0:
                    body = repeat(cat(comma, pair), need, room)
                else:
                    more = repeat(cat(comma, pair), max(need - 1, 0), None if room is None else room - 1)
                    body = cat(pair, more) if need > 0 else opt(cat(pair, more)) if room != 0 else EMPTY
            else:
                entry, required = entries[i]
                nxt = c + 1 if hi is not None else min(c + 1, cap)
                take = NEVER if hi is not None and c + 1 > hi else cat(sep, entry, state(i + 1, nxt))
                body = choice(take, NEVER if required else state(i + 1, c))
            self.grammar.rules[name] = body
            return Sym(name)

        return cat(lex(self.p.open_object), state(0, 0), lex(self.p.close_object))

    def _join(self, entries: list[tuple[Term, bool]]) -> Term:
        """Comma-separated entries in order; optional ones may be missing (no leading or double commas)."""
        comma = lex(self.p.comma)
        some, empty_ok = NEVER, True  # some: non-empty selections so far; empty_ok: may select nothing
        i = 0
        while i < len(entries):
            run = 0
            while empty_ok and i + run < len(entries) and not entries[i + run][1]:
                run += 1
            if run > BALANCED_AFTER:
                some = self._balanced([e for e, _ in entries[i:i + run]])
                i += run
                continue
            node, required = entries[i]
            first = node if empty_ok else NEVER
            if required:
                before = cat(some, comma)
                some, empty_ok = cat(opt(before) if empty_ok else before, node), False
            else:
                some = choice(cat(some, opt(cat(comma, node))), first)
            i += 1
        return choice(some, EMPTY) if empty_ok else some

    def _balanced(self, nodes: list[Term]) -> Term:
        if len(nodes) == 1:
            return nodes[0]
        left, right = self._balanced(nodes[: len(nodes) // 2]), self._balanced(nodes[len(nodes) // 2:])
        return choice(cat(left, opt(cat(lex(self.p.comma), right))), right)


def schema_to_grammar(schema: str, options: JsonOptions) -> Grammar:
    """The grammar of the JSON texts that are valid instances of `schema` (in sprig's spelling)."""
    root = load_schema(schema)
    check_schema_shape(root, "")
    doc = SchemaDocument.index(root, dict(options.documents))
    try:
        grammar = CfgEmitter(FlatEvaluator(doc, options), options).build(Node(""))
    except RecursionError:
        raise too_complex("schema nested too deeply") from None
    if not grammar.prune():
        raise invalid_schema("the schema accepts no JSON value", "")
    return grammar


def json_object_grammar(options: JsonOptions) -> Grammar:
    """Any JSON object (response_format {"type": "json_object"}), at any depth."""
    emitter = CfgEmitter(FlatEvaluator(SchemaDocument.index(True), options), options)
    emitter.grammar.add("start", emitter.object(ObjShape()))
    emitter.drain()
    emitter.grammar.prune()
    return emitter.grammar

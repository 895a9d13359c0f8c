"""Value sets → regex trees over JSON text.

Objects are written with their declared keys first, in schema order (optional ones may be left out), then
any additional keys (never a declared one); arrays with their prefix items, then the rest. Where a schema
leaves a value unconstrained, any JSON value is allowed as long as its arrays and objects do not nest deeper
than `any_value_depth` levels below the top of the document (a regex cannot match brackets unboundedly).
"""

from __future__ import annotations

from sprig.grammar.errors import unsupported
from sprig.grammar.regex import ir
from sprig.grammar.schema import strings
from sprig.grammar.schema.evaluator import Evaluator
from sprig.grammar.schema.json_text import ANY_STRING, FALSE, NULL, TRUE, Punctuation, dumps, json_string
from sprig.grammar.schema.numbers import JSON_NUMBER, numbers_regex
from sprig.grammar.schema.values import ArrShape, Bound, Expr, Node, ObjShape, ValueSet
from sprig.grammar.spec import JsonOptions

BALANCED_AFTER = 24  # why: a long run of optional properties is joined as a balanced tree (shallow nesting)


class Emitter:
    """Writes the regex tree for expressions of one evaluated schema document."""

    def __init__(self, evaluator: Evaluator, options: JsonOptions) -> None:
        self.ev, self.options = evaluator, options
        self.p = Punctuation(options)
        self._memo: dict[tuple[Expr, tuple[str, ...], int], ir.Node] = {}
        self._any: dict[int, ir.Node] = {}

    def expr(self, expr: Expr, path: tuple[str, ...], depth: int) -> ir.Node:
        """The JSON text of values allowed by `expr` at document depth `depth`, reached through `path`."""
        key = (expr, path, depth)
        if key not in self._memo:
            self._memo[key] = self.value_set(self.ev.eval_child(expr, path), path, depth)
        return self._memo[key]

    def value_set(self, vs: ValueSet, path: tuple[str, ...], depth: int) -> ir.Node:
        if vs.is_top():
            return self.any_value(max(self.options.any_value_depth - depth, 0))
        if vs.steps:  # why: remainders are counted by grammar rules (the llguidance backend)
            raise unsupported("multipleOf", vs.steps[0][1].origin, "needs the llguidance backend")
        parts = [NULL] if vs.null else []
        parts += [TRUE] if True in vs.bools else []
        parts += [FALSE] if False in vs.bools else []
        parts.append(numbers_regex(vs.ints, vs.fracs))
        parts.append(json_string(strings.string_language(vs.strings)))
        parts += [self.array(shape, path, depth + 1) for shape in vs.arrays]
        parts += [self.object(shape, path, depth + 1) for shape in vs.objects]
        return ir.alt(*parts)

    def any_value(self, depth: int) -> ir.Node:
        """Any JSON value with arrays and objects nested at most `depth` levels."""
        if depth not in self._any:
            scalars = [NULL, TRUE, FALSE, JSON_NUMBER, ANY_STRING]
            if depth > 0:
                inner = self.any_value(depth - 1)
                items = ir.seq(inner, ir.star(ir.seq(self.p.comma, inner)))
                pair = ir.seq(ANY_STRING, self.p.colon, inner)
                pairs = ir.seq(pair, ir.star(ir.seq(self.p.comma, pair)))
                scalars += [ir.seq(self.p.open_array, ir.opt(items), self.p.close_array),
                            ir.seq(self.p.open_object, ir.opt(pairs), self.p.close_object)]
            self._any[depth] = ir.alt(*scalars)
        return self._any[depth]

    def array(self, shape: ArrShape, path: tuple[str, ...], depth: int) -> ir.Node:
        if shape.unique:
            raise unsupported("uniqueItems", shape.unique, "needs the llguidance backend")
        if shape.contains:  # why: counting matching items is a grammar's job (the llguidance backend)
            expr = shape.contains[0][0]
            where = expr.item.pointer if isinstance(expr, Bound) and isinstance(expr.item, Node) else ""
            raise unsupported("contains", where, "counting matching items needs the llguidance backend")
        prefix = [self.expr(e, path, depth) for e in shape.prefix]
        tail = self.expr(shape.items, path, depth)
        hi = shape.max_items
        for i, item in enumerate(prefix):  # an impossible item caps the length before it
            if ir.is_never(item):
                hi = i if hi is None else min(hi, i)
                prefix = prefix[:i]
                break
        if ir.is_never(tail):
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and shape.min_items > hi:
            return ir.NEVER
        body = self._array_body(prefix, tail, 0, shape.min_items, hi)
        return ir.seq(self.p.open_array, body, self.p.close_array)

    def _array_body(self, prefix: list[ir.Node], tail: ir.Node, i: int, lo: int, hi: int | None) -> ir.Node:
        comma = self.p.comma if i > 0 else ir.EMPTY
        if hi is not None and i >= hi:
            return ir.EMPTY
        if i == len(prefix):  # the remaining items all match `tail`
            need, room = max(lo - i, 0), None if hi is None else hi - i
            if i > 0:
                return ir.rep(ir.seq(comma, tail), need, room)
            more = ir.rep(ir.seq(self.p.comma, tail), max(need - 1, 0), None if room is None else room - 1)
            some = ir.seq(tail, more)
            return some if need > 0 else ir.opt(some)
        step = ir.seq(comma, prefix[i], self._array_body(prefix, tail, i + 1, lo, hi))
        return step if i < lo else ir.opt(step)

    def object(self, shape: ObjShape, path: tuple[str, ...], depth: int) -> ir.Node:
        if shape.counted():  # why: a regex over optional entries cannot count them (the grammar backend can)
            keyword = shape.origin.rsplit("/", 1)[-1] or "minProperties"
            raise unsupported(keyword, shape.origin, "counting keys needs the llguidance backend")
        if shape.some:  # why: "some key has such a value" is a grammar over the other keys (llguidance backend)
            origin = shape.some[0].origin
            raise unsupported(origin.rsplit("/", 1)[-1] or "not", origin, "a negated key rule needs the llguidance backend")
        entries: list[tuple[ir.Node, bool]] = []
        for key, expr, required in shape.entries:
            value = self.expr(expr, path, depth)
            if ir.is_never(value):
                if required:
                    return ir.NEVER
                continue
            entries.append((ir.seq(ir.lit(dumps(key)), self.p.colon, value), required))
        pair = ir.alt(*(ir.seq(json_string(keys), self.p.colon, self.expr(expr, path, depth))
                        for keys, expr in strings.undeclared_keys(shape)))
        if not ir.is_never(pair):
            entries.append((ir.seq(pair, ir.star(ir.seq(self.p.comma, pair))), False))
        return ir.seq(self.p.open_object, self._join(entries), self.p.close_object)

    def _join(self, entries: list[tuple[ir.Node, bool]]) -> ir.Node:
        """Comma-separated entries in order; optional ones may be missing (no leading or double commas)."""
        some, empty_ok = ir.NEVER, True  # some: non-empty selections so far; empty_ok: may select nothing
        i = 0
        while i < len(entries):
            run = 0
            while empty_ok and i + run < len(entries) and not entries[i + run][1]:
                run += 1
            if run > BALANCED_AFTER:  # a long leading run of optional entries
                some = self._balanced([e for e, _ in entries[i:i + run]])
                i += run
                continue
            node, required = entries[i]
            first = node if empty_ok else ir.NEVER
            if required:
                before = ir.seq(some, self.p.comma)
                some, empty_ok = ir.seq(ir.opt(before) if empty_ok else before, node), False
            else:
                some = ir.alt(ir.seq(some, ir.opt(ir.seq(self.p.comma, node))), first)
            i += 1
        return ir.alt(some, ir.EMPTY) if empty_ok else some

    def _balanced(self, nodes: list[ir.Node]) -> ir.Node:
        """Non-empty ordered selections of optional entries, halving recursively."""
        if len(nodes) == 1:
            return nodes[0]
        left, right = self._balanced(nodes[: len(nodes) // 2]), self._balanced(nodes[len(nodes) // 2:])
        return ir.alt(ir.seq(left, ir.opt(ir.seq(self.p.comma, right))), right)

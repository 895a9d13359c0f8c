"""Serialize a value the way a grammar for its schema spells it: compact, keys in the schema's order.

The grammar writes declared properties first, in the order the schema declares them, then any other keys.
`schema_ordered_dumps` produces that spelling for a given instance (the first object shape that admits the
instance decides the order), which is what a grammar walk, a few-shot example or a cache key wants.
Values the schema does not admit are written with their own key order.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from sprig.grammar.schema import intsteps, strings
from sprig.grammar.schema.evaluator import canonical
from sprig.grammar.schema.json_text import Punctuation
from sprig.grammar.schema.load import load_schema, parse_json
from sprig.grammar.schema.refs import SchemaDocument
from sprig.grammar.schema.spellings import Spelling
from sprig.grammar.schema.to_cfg import FlatEvaluator
from sprig.grammar.schema.values import Node, ValueSet, and_, not_
from sprig.grammar.spec import JsonOptions


class SchemaOrderer:
    """Reusable for many instances of one schema."""

    def __init__(self, schema: str | dict[str, Any] | bool, options: JsonOptions | None = None,
                 spelling: Spelling | None = None) -> None:
        """spelling: the grammar's number spellings (default: the llguidance backend's for the schema's draft;
        `Spelling.CANONICAL` for the outlines backend)."""
        self.options = options or JsonOptions()
        self.ev = FlatEvaluator(SchemaDocument.index(load_schema(schema), dict(self.options.documents)),
                                 self.options)  # why: no depth bound
        self.item_sep, self.key_sep = Punctuation(self.options).separator_text()
        # why: drafts 6+ accept every spelling of a number (spellings.py), so a float keeps json.dumps's `2.0`
        self.floats_as_written = (spelling or Spelling.for_draft(self.ev.doc.draft)) is Spelling.ANY

    def dumps(self, value: Any) -> str:
        text = self._value(value, self.ev.eval(Node(""), ()), ())
        return text if text is not None else self._plain(value)

    def admits(self, value: Any) -> bool:
        """Whether the grammar's value set (recursion and nesting bounds aside) contains `value`."""
        return self._value(value, self.ev.eval(Node(""), ()), ()) is not None

    def _plain(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(self.item_sep, self.key_sep))

    def _value(self, value: Any, vs: ValueSet, path: tuple[str, ...]) -> str | None:
        if vs.is_top():
            return self._plain(value)
        if value is None:
            return "null" if vs.null else None
        if isinstance(value, bool):
            return self._plain(value) if value in vs.bools else None
        if isinstance(value, int | float):
            d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
            integral = d == d.to_integral_value()
            if not (intsteps.contains(vs.ints, vs.steps, int(d)) if integral else vs.fracs.contains(d)):
                return None
            if integral and not (isinstance(value, float) and self.floats_as_written):
                return str(int(d))  # why: an int (or any integral value under draft 4) is an integer literal
            return self._plain(value)
        if isinstance(value, str):
            return self._plain(value) if strings.member(vs.strings, value) else None
        if isinstance(value, list):
            return next((t for t in (self._array(value, s, path) for s in vs.arrays) if t is not None), None)
        return next((t for t in (self._object(value, s, path) for s in vs.objects) if t is not None), None)

    def _array(self, value: list[Any], shape, path: tuple[str, ...]) -> str | None:
        if len(value) < shape.min_items or (shape.max_items is not None and len(value) > shape.max_items):
            return None
        exprs = [shape.at(i) for i in range(len(value))]
        if len(shape.contains) == 1:  # why: spell each item as the grammar's matching / other-item rule does
            expr, _, hi = shape.contains[0]
            for i, v in enumerate(value):
                matches = self._value(v, self.ev.eval_child(expr, path), path) is not None
                exprs[i] = and_(exprs[i], expr) if matches else exprs[i] if hi is None else and_(exprs[i], not_(expr))
        parts = [self._value(v, self.ev.eval_child(e, path), path) for e, v in zip(exprs, value, strict=True)]
        if shape.unique and len({canonical(parse_json(json.dumps(v))) for v in value}) < len(value):
            return None  # why: equal as JSON values (1 == 1.0), as uniqueItems compares
        for expr, lo, hi in shape.contains:
            matched = sum(self._value(v, self.ev.eval_child(expr, path), path) is not None for v in value)
            if matched < lo or (hi is not None and matched > hi):
                return None
        return None if any(p is None for p in parts) else "[" + self.item_sep.join(parts) + "]"  # type: ignore[arg-type]

    def _object(self, value: dict[str, Any], shape, path: tuple[str, ...]) -> str | None:
        declared = [k for k, _, _ in shape.entries]
        if any(req and k not in value for k, _, req in shape.entries):
            return None
        if len(value) < shape.min_props or (shape.max_props is not None and len(value) > shape.max_props):
            return None
        for w in shape.some:  # why: a complemented key rule holds only with a key of its language valued so
            if not any(strings.member(w.keys, k) and self._value(
                    value[k], self.ev.eval_child(and_(shape.value_for(k), w.value), path), path) is not None
                    for k in value):
                return None
        keys = [k for k in declared if k in value] + [k for k in value if k not in declared]
        parts = []
        for key in keys:
            text = self._value(value[key], self.ev.eval_child(shape.value_for(key), path), path)
            if text is None:
                return None
            parts.append(json.dumps(key, ensure_ascii=False) + self.key_sep + text)
        return "{" + self.item_sep.join(parts) + "}"


def schema_ordered_dumps(schema: str | dict[str, Any] | bool, value: Any, options: JsonOptions | None = None) -> str:
    """`value` as JSON text with object keys in the order the schema's grammar writes them."""
    return SchemaOrderer(schema, options).dumps(value)

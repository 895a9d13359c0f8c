"""Where every subschema of a JSON Schema document is, and what each `$ref` points to.

Resolution follows JSON Schema 2020-12 for references inside one document: `$id` sets the base URI of a
schema resource (relative ids resolve against the enclosing one), `$anchor` names a location, and a `$ref`
is resolved against the base in effect, then looked up as a resource plus a JSON-pointer or anchor fragment.
A `$ref` to another document finds it among the caller's documents by URI (`JsonOptions.documents`), then
among the official meta-schemas (the `jsonschema_specifications` package); it is indexed when first named,
its locations written `@N/...` (N: the order documents were loaded in). Any other document is refused.
Drafts 4 to 7 (by the root's `$schema`) differ in three ways handled here: the id keyword is `id` in draft 4,
an id may be a plain-name fragment (`"$id": "#foo"`, an anchor), and a `$ref` makes its sibling keywords
(its sibling id included) be ignored (`ref_overrides`; the evaluator reads only the `$ref` there). Draft
2019-09's `$recursiveAnchor: true` (at a resource root) binds a dynamic anchor of its own name, which
`$recursiveRef: "#"` follows where its static target has one, like 2020-12's `$dynamicRef`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin

from sprig.grammar.errors import GrammarError, invalid_schema, too_complex, unsupported
from sprig.grammar.schema.load import load_schema

DEFAULT_BASE = "https://sprig.invalid/schema.json"
RECURSIVE_ANCHOR = "#recursive"  # the dynamic-scope name of $recursiveAnchor (no $dynamicAnchor has a "#")
MAX_SCHEMA_DEPTH = 200  # why: deeper documents are rejected before anything recursive runs on them
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_SINGLES = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
                   "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def child_pointer(pointer: str, *tokens: str | int) -> str:
    return pointer + "".join("/" + escape_token(str(t)) for t in tokens)


def join_uri(base: str, ref: str) -> str:
    if _SCHEME.match(ref):
        return ref
    if ref.startswith("#"):
        return base.split("#", 1)[0] + ref
    return urljoin(base, ref)


@dataclass
class SchemaDocument:
    """An indexed schema: subschemas by JSON pointer, resources by URI, anchors by URI#name."""

    root: Any
    nodes: dict[str, Any] = field(default_factory=dict)
    base_of: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    anchors: dict[str, str] = field(default_factory=dict)
    draft: int = 2020  # 4, 6, 7, 2019 or 2020, from the root's $schema
    dynamic_anchors: dict[str, int] = field(default_factory=dict)  # $dynamicAnchor name -> how many
    # resource root pointer -> {dynamic anchor name: its pointer}: what entering that resource binds
    dynamic_scope: dict[str, dict[str, str]] = field(default_factory=dict)
    recursive: set[str] = field(default_factory=set)  # draft 2019-09: resource roots with $recursiveAnchor true
    documents: Mapping[str, str] = field(default_factory=dict)  # other documents' texts by URI, parsed when named
    loaded: list[Any] = field(default_factory=list)  # the roots of the other documents indexed so far: @0, @1, ...

    @property
    def ref_overrides(self) -> bool:
        """Drafts up to 7: a schema with `$ref` is that reference alone; its other keywords are ignored."""
        return self.draft <= 7

    @classmethod
    def index(cls, root: Any, documents: Mapping[str, str] | None = None) -> SchemaDocument:
        """Index `root`; `documents` (schema texts by URI) are what a `$ref` to another document may name."""
        doc = cls(root, draft=draft_of(root), documents=documents or {})
        doc.resources[DEFAULT_BASE] = ""
        doc._walk(root, "", DEFAULT_BASE)
        return doc

    def _walk(self, root: Any, pointer: str, base: str) -> None:
        stack: list[tuple[Any, str, str, int]] = [(root, pointer, base, 0)]
        while stack:
            node, pointer, base, depth = stack.pop()
            if depth > MAX_SCHEMA_DEPTH:
                raise too_complex(f"schema nested deeper than {MAX_SCHEMA_DEPTH} levels", pointer)
            base = self._enter(node, pointer, base)
            if isinstance(node, dict):
                for key, child_ptr, child in _children(node, pointer):
                    del key
                    stack.append((child, child_ptr, base, depth + 1))

    def _load(self, uri: str, where: str) -> bool:
        """Index the document at `uri` (the caller's, else an official meta-schema); False if there is none."""
        text = self.documents.get(uri)
        root = load_schema(text) if text is not None else meta_schema(uri)
        if root is None:
            return False
        if isinstance(root, dict) and "$schema" in root and draft_of(root) != self.draft:
            raise unsupported("$ref", where, f"a document of another draft ({uri[:80]})")
        prefix = f"@{len(self.loaded)}"
        self.loaded.append(root)
        self.resources.setdefault(uri, prefix)
        self._walk(root, prefix, uri)
        return True

    def _enter(self, node: Any, pointer: str, base: str) -> str:
        self.nodes[pointer] = node
        if isinstance(node, dict):
            id_key = "id" if self.draft == 4 else "$id"
            if isinstance(node.get(id_key), str) and not (self.ref_overrides and "$ref" in node):
                target, _, name = join_uri(base, node[id_key]).partition("#")
                if target != base.split("#", 1)[0] or not name:  # why: "#foo" alone names an anchor only
                    base = target
                    self.resources.setdefault(base, pointer)
                if name and self.draft <= 7:  # why: drafts 6/7 spell an anchor as an id fragment
                    self.anchors.setdefault(f"{base}#{name}", pointer)
            if isinstance(node.get("$dynamicAnchor"), str):
                name = node["$dynamicAnchor"]
                self.dynamic_anchors[name] = self.dynamic_anchors.get(name, 0) + 1
                self.dynamic_scope.setdefault(self.resources.get(base, ""), {}).setdefault(name, pointer)
            if self.draft == 2019 and node.get("$recursiveAnchor") is True and self.resources.get(base) == pointer:
                self.recursive.add(pointer)  # why: $recursiveRef binds like a $dynamicAnchor of its own name
                self.dynamic_scope.setdefault(pointer, {}).setdefault(RECURSIVE_ANCHOR, pointer)
            for key in ("$anchor", "$dynamicAnchor"):  # a $dynamicAnchor is also a plain anchor for $ref
                if isinstance(node.get(key), str):
                    self.anchors.setdefault(f"{base}#{node[key]}", pointer)
        self.base_of[pointer] = base
        return base

    def resolve_dynamic(self, ref: str, at: str) -> str:
        """`$dynamicRef`, where it means what `$ref` means: its anchor name is not a $dynamicAnchor more than
        once in the document, so dynamic scope cannot pick another target (a remote scope is refused)."""
        name = ref.partition("#")[2]
        if name and not name.startswith("/") and self.dynamic_anchors.get(unquote(name), 0) > 1:
            raise unsupported("$dynamicRef", child_pointer(at, "$dynamicRef"),
                              "several dynamic anchors of that name: the target depends on the dynamic scope")
        return self.resolve(ref, at)

    def resolve_recursive(self, at: str) -> str:
        """Draft 2019-09's `$recursiveRef: "#"`, where it means `$ref: "#"`: at most one resource has
        `$recursiveAnchor: true`, so dynamic scope cannot pick another target."""
        target = self.resolve("#", at)
        if target in self.recursive and len(self.recursive) > 1:
            raise unsupported("$recursiveRef", child_pointer(at, "$recursiveRef"),
                              "several $recursiveAnchor resources: the target depends on the dynamic scope")
        return target

    def resolve(self, ref: str, at: str) -> str:
        """The JSON pointer (from the document root) that `$ref: ref` at location `at` refers to."""
        target = join_uri(self.base_of.get(at, DEFAULT_BASE), ref)
        uri, _, fragment = target.partition("#")
        if uri not in self.resources and not self._load(uri, child_pointer(at, "$ref")):
            raise unsupported("$ref", child_pointer(at, "$ref"), f"reference to a document outside the schema ({ref[:80]})")
        resource = self.resources[uri]
        if fragment and not fragment.startswith("/"):
            pointer = self.anchors.get(f"{uri}#{unquote(fragment)}")
            if pointer is None:
                raise invalid_schema(f"$ref to unknown anchor {fragment[:60]!r}", child_pointer(at, "$ref"))
            return pointer
        pointer = resource + unquote(fragment)
        self.lookup(pointer, child_pointer(at, "$ref"))
        return pointer

    def lookup(self, pointer: str, where: str = "") -> Any:
        """The value at a JSON pointer (indexed subschemas first, else by walking the document)."""
        if pointer in self.nodes:
            return self.nodes[pointer]
        head, slash, rest = pointer.partition("/")
        node = self.loaded[int(head[1:])] if head else self.root  # why: "@N/..." is in the N-th other document
        for raw in rest.split("/") if slash else []:
            token = raw.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(token)] if isinstance(node, list) else node[token]
            except (KeyError, IndexError, ValueError, TypeError):
                raise invalid_schema(f"$ref to a location that does not exist ({pointer[:80]})", where) from None
        if not (isinstance(node, dict | bool)):
            raise invalid_schema("$ref to something that is not a schema", where)
        self.nodes[pointer] = node
        self.base_of.setdefault(pointer, self.base_of.get(head, DEFAULT_BASE))
        return node


DRAFTS = {"http://json-schema.org/draft-04/schema": 4, "http://json-schema.org/draft-06/schema": 6,
          "http://json-schema.org/draft-07/schema": 7, "https://json-schema.org/draft/2019-09/schema": 2019,
          "https://json-schema.org/draft/2020-12/schema": 2020}


def meta_schema(uri: str) -> Any:
    """An official meta-schema (or vocabulary meta-schema) by URI, parsed with exact decimals; None if unknown."""
    import json

    from jsonschema_specifications import REGISTRY

    try:
        contents = REGISTRY.contents(uri)
    except LookupError:  # why: referencing's NoSuchResource is a KeyError
        return None
    return load_schema(json.dumps(contents))


def draft_of(root: Any) -> int:
    """The draft a document declares with `$schema` (2020-12 when it declares none or an unknown one)."""
    uri = root.get("$schema") if isinstance(root, dict) else None
    return DRAFTS.get(uri.rstrip("#"), 2020) if isinstance(uri, str) else 2020


def _children(node: dict[str, Any], pointer: str):
    for key in _SCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for name, child in value.items():
                yield key, child_pointer(pointer, key, name), child
    for key in _SCHEMA_LISTS:
        value = node.get(key)
        if isinstance(value, list):
            for i, child in enumerate(value):
                yield key, child_pointer(pointer, key, i), child
    for key in _SCHEMA_SINGLES:
        value = node.get(key)
        if isinstance(value, dict | bool):
            yield key, child_pointer(pointer, key), value


def check_schema_shape(node: Any, pointer: str) -> None:
    if not isinstance(node, dict | bool):
        raise GrammarError(f"invalid schema at '{pointer or '/'}': a schema must be an object or a boolean",
                           pointer=pointer or "/")

"""Writes corpus.json: real-world-shaped schemas written for sprig's tests (Apache-2.0, this repository)."""
import json
from pathlib import Path

import jsonschema

C = []


def add(name, schema, valid, invalid, known_issue=None):
    entry = {"name": name, "schema": schema, "valid": valid, "invalid": invalid}
    if known_issue:
        entry["known_issue"] = known_issue  # the test reports it and skips it (a sprig bug, see README)
    C.append(entry)


add("tool: get_weather", {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["location"], "additionalProperties": False},
    [{"location": "Paris, FR"}, {"location": "Oslo", "unit": "celsius", "days": 3}],
    [{"unit": "celsius"}, {"location": "x", "days": 0}, {"location": "x", "days": 2.5}])
add("tool: search with vendor keywords", {"type": "object", "title": "search", "x-openai-strict": True,
    "properties": {"query": {"type": "string", "minLength": 1, "example": "cats"},
                   "filters": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 3},
                   "page": {"type": "integer", "format": "int32", "minimum": 0, "default": 0}},
    "required": ["query"]},
    [{"query": "a"}, {"query": "b", "filters": {"lang": "en"}, "page": 2}],
    [{"query": ""}, {"query": "a", "filters": {"a": "1", "b": "2", "c": "3", "d": "4"}}, {"query": "a", "page": 2147483648}])
add("openapi: Pet (draft-4 id, readOnly, x-*)", {"$schema": "http://json-schema.org/draft-04/schema#",
    "id": "http://example.com/pet.json", "type": "object", "required": ["name"], "x-tags": ["pet"],
    "properties": {"id": {"type": "integer", "format": "int64", "readOnly": True},
                   "name": {"type": "string", "example": "doggie"},
                   "status": {"type": "string", "enum": ["available", "pending", "sold"]},
                   "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": False}}},
    [{"name": "rex"}, {"id": 7, "name": "rex", "status": "sold", "tags": ["a", "a"]}],
    [{"id": 7}, {"name": "rex", "status": "lost"}, {"name": 5}])
add("openapi: Error with definitions", {"definitions": {"code": {"type": "integer", "minimum": 100, "maximum": 599}},
    "type": "object", "properties": {"code": {"$ref": "#/definitions/code"}, "message": {"type": "string"}},
    "required": ["code", "message"]},
    [{"code": 404, "message": "not found"}, {"code": 503, "message": "", "details": [1]}], [{"code": 99, "message": "x"}, {"code": 404}])
add("kubernetes: ConfigMap-like", {"type": "object", "properties": {
    "apiVersion": {"type": "string", "const": "v1"}, "kind": {"const": "ConfigMap"},
    "metadata": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                                                  "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
                 "required": ["name"], "x-kubernetes-preserve-unknown-fields": True},
    "data": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "granular"}},
    "required": ["apiVersion", "kind", "metadata"]},
    [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"a": "1"}},
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"app": "web"}, "extra": [1]}}],
    [{"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}},
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}])
add("kubernetes: container resources (patternProperties)", {"type": "object", "properties": {
    "limits": {"type": "object", "patternProperties": {"^(cpu|memory)$": {"type": "string", "pattern": "^[0-9]+(m|Mi|Gi)?$"}},
               "additionalProperties": False}}},
    [{"limits": {"cpu": "500m", "memory": "128Mi"}}, {}], [{"limits": {"gpu": "1"}}, {"limits": {"cpu": "lots"}}])
add("geojson: Point / LineString", {"oneOf": [
    {"type": "object", "properties": {"type": {"const": "Point"}, "coordinates": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3}},
     "required": ["type", "coordinates"]},
    {"type": "object", "properties": {"type": {"const": "LineString"}, "coordinates": {"type": "array", "minItems": 2,
        "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3}}},
     "required": ["type", "coordinates"]}]},
    [{"type": "Point", "coordinates": [1.5, 2]}, {"type": "LineString", "coordinates": [[0, 0], [1, 1.25]]}],
    [{"type": "Point", "coordinates": [1]}, {"type": "LineString", "coordinates": [[0, 0]]}, {"type": "Polygon", "coordinates": []}])
add("package.json-like (dependencies map, unknown format)", {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 214, "pattern": "^(?:@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"},
    "version": {"type": "string", "format": "semver"},
    "private": {"type": "boolean"}, "dependencies": {"type": "object", "additionalProperties": {"type": "string"}},
    "scripts": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}},
    "required": ["name"]},
    [{"name": "left-pad", "version": "1.3.0"}, {"name": "@scope/pkg", "scripts": {"test": "jest"}}],
    [{"name": "Bad Name"}, {"name": "x", "scripts": {}}])
add("tsconfig-like (dependencies keyword)", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "properties": {"compilerOptions": {"type": "object", "properties": {
        "target": {"enum": ["es5", "es2015", "es2020", "esnext"]}, "strict": {"type": "boolean"},
        "outDir": {"type": "string"}, "outFile": {"type": "string"}, "module": {"type": "string"}},
        "dependencies": {"outFile": ["module"]}}}},
    [{"compilerOptions": {"target": "es5", "strict": True}}, {"compilerOptions": {"outFile": "a.js", "module": "amd"}}],
    [{"compilerOptions": {"outFile": "a.js"}}, {"compilerOptions": {"target": "es3"}}])
add("snowplow-like event (vendor self, int formats)", {"self": {"vendor": "com.acme", "name": "click", "format": "jsonschema", "version": "1-0-0"},
    "type": "object", "properties": {"element": {"type": "string", "maxLength": 255},
                                     "x": {"type": "integer", "minimum": 0, "maximum": 65535}, "ts": {"type": "string", "format": "date-time"}},
    "required": ["element"], "additionalProperties": False},
    [{"element": "button", "x": 12, "ts": "2024-01-02T03:04:05Z"}, {"element": "", "x": 65535}], [{"element": "b", "x": -1}, {"element": "b", "ts": "yesterday"}])
add("recursive tree ($ref)", {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["name"], "additionalProperties": False}},
    "$ref": "#/$defs/node"},
    [{"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [{"name": "d", "children": [{"name": "e"}]}]}]}]},
     {"name": "leaf", "children": []}],
    [{"name": "a", "children": [{"children": []}]}, {"name": "a", "extra": 1}])
add("unconstrained payload (any depth)", {"type": "object", "properties": {"event": {"type": "string"}, "payload": {}},
    "required": ["event", "payload"]},
    [{"event": "e", "payload": {"a": [{"b": {"c": [[[{"d": None}]]]}}]}}, {"event": "f", "payload": None, "more": {"x": [[]]}}], [{"event": "e"}, {"payload": 1}])
add("github issue labels (uniqueItems over an enum)", {"type": "object", "properties": {
    "labels": {"type": "array", "items": {"enum": ["bug", "docs", "feature", "question"]}, "uniqueItems": True},
    "assignees": {"type": "array", "items": {"type": "string"}, "maxItems": 10}}},
    [{"labels": ["bug", "docs"]}, {"labels": [], "assignees": ["a", "b"]}], [{"labels": ["bug", "bug"]}, {"labels": ["wontfix"]}])
add("money (integer multipleOf)", {"type": "object", "properties": {"cents": {"type": "integer", "multipleOf": 5, "minimum": 0},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["cents", "currency"]},
    [{"cents": 1995, "currency": "EUR"}, {"cents": 0, "currency": "USD"}], [{"cents": 1996, "currency": "EUR"}, {"cents": 5, "currency": "eur"}])
add("address (dependentRequired)", {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "dependentRequired": {"street": ["city"]}},
    [{"city": "X"}, {"street": "1 Main", "city": "X", "zip": "12345"}], [{"street": "1 Main"}, {"zip": "1234"}])
add("feature flags (propertyNames, min/maxProperties)", {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
    "additionalProperties": {"type": "boolean"}, "minProperties": 1, "maxProperties": 5},
    [{"dark_mode": True}, {"a": False, "b1": True}], [{}, {"Dark": True}, {"a": 1}])
add("email + length (format x maxLength)", {"type": "object", "properties": {"email": {"type": "string", "format": "email", "maxLength": 40},
    "homepage": {"type": "string", "format": "uri", "maxLength": 60}}, "required": ["email"]},
    [{"email": "ada@example.com", "homepage": "https://example.com/ada"}, {"email": "bob.smith+tag@mail.example.org"}], [{"email": "not an email"}, {"email": "a@b.co", "homepage": "no scheme"}])
add("calendar event (if/then/else)", {"type": "object", "properties": {"allDay": {"type": "boolean"},
    "start": {"type": "string"}}, "required": ["allDay", "start"],
    "if": {"properties": {"allDay": {"const": True}}}, "then": {"properties": {"start": {"format": "date"}}},
    "else": {"properties": {"start": {"format": "date-time"}}}},
    [{"allDay": True, "start": "2024-05-01"}, {"allDay": False, "start": "2024-05-01T10:00:00Z"}],
    [{"allDay": True, "start": "2024-05-01T10:00:00Z"}, {"allDay": False, "start": "2024-05-01"}])
add("chat message (discriminated anyOf)", {"type": "object", "anyOf": [
    {"properties": {"role": {"const": "user"}, "content": {"type": "string"}}, "required": ["role", "content"]},
    {"properties": {"role": {"const": "tool"}, "tool_call_id": {"type": "string"}, "content": {"type": "string"}},
     "required": ["role", "tool_call_id", "content"]}]},
    [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    [{"role": "tool", "content": "42"}, {"role": "system"}])
add("contains (at least one primary)", {"type": "object", "properties": {"emails": {"type": "array", "items": {
    "type": "object", "properties": {"address": {"type": "string"}, "primary": {"type": "boolean"}}, "required": ["address"]},
    "contains": {"properties": {"primary": {"const": True}}, "required": ["primary"]}, "maxContains": 1}}},
    [{"emails": [{"address": "a"}, {"address": "b", "primary": True}]}, {}],
    [{"emails": [{"address": "a"}]}, {"emails": [{"address": "a", "primary": True}, {"address": "b", "primary": True}]}])
add("openapi 3.1 nullable via type list", {"type": "object", "properties": {"nickname": {"type": ["string", "null"], "maxLength": 20},
    "age": {"type": ["integer", "null"], "minimum": 0}}},
    [{"nickname": None, "age": None}, {"nickname": "x", "age": 3}], [{"age": -1}, {"nickname": 5}])
add("settings with unevaluatedProperties", {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "allOf": [{"properties": {"theme": {"enum": ["light", "dark"]}}}], "properties": {"fontSize": {"type": "integer"}},
    "unevaluatedProperties": False},
    [{"theme": "dark", "fontSize": 12}, {}], [{"theme": "blue"}, {"other": 1}])
add("tuple coordinates (draft-7 items array)", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
    "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False},
    [[1, 2], [1.5], []], [[1, 2, 3], ["a"]])
add("esri-like layer (vendor keywords, links)", {"type": "object", "esriDocumentation": {"url": "https://x"},
    "links": [{"rel": "self", "href": "/layers/{id}"}], "properties": {"id": {"type": "integer", "minimum": 0},
    "geometryType": {"enum": ["esriGeometryPoint", "esriGeometryPolygon"]}, "name": {"type": "string", "version": "2"}},
    "required": ["id", "geometryType"]},
    [{"id": 0, "geometryType": "esriGeometryPoint"}, {"id": 12, "geometryType": "esriGeometryPolygon", "name": "Lakes"}], [{"id": -1, "geometryType": "esriGeometryPoint"}, {"id": 1}])


# ---- helpers for the families below ----------------------------------------------------------------------
def S(**kw):
    return {"type": "string", **kw}


def I(**kw):  # noqa: E743
    return {"type": "integer", **kw}


def N(**kw):
    return {"type": "number", **kw}


def B(**kw):
    return {"type": "boolean", **kw}


def E(*values, **kw):
    return {"enum": list(values), **kw}


def A(items, **kw):
    return {"type": "array", "items": items, **kw}


def O(props, required=(), extra=None, **kw):  # noqa: E741, E743
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    if extra is not None:
        schema["additionalProperties"] = extra
    schema.update(kw)
    return schema


WRONG = {"string": 12345, "integer": "12", "number": "1.5", "boolean": "true", "array": {"0": 1}, "object": ["x"],
         "null": 0}


def _mutants(schema, value):
    """Invalid neighbours of a valid object: a required key dropped, an unknown key, a value of a wrong type."""
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return
    for key in schema.get("required", [])[:2]:
        if key in value:
            yield {k: v for k, v in value.items() if k != key}
    if schema.get("additionalProperties") is False:
        yield {**value, "unexpected_field": True}
    for key, sub in schema.get("properties", {}).items():
        t = sub.get("type") if isinstance(sub, dict) else None
        if isinstance(t, str) and key in value:
            yield {**value, key: WRONG[t]}


def auto(name, schema, valid, invalid, want=3):
    """`add` with the invalid list topped up to `want` by mutations of the first valid instance that
    jsonschema rejects even without format assertion (so they are invalid under the test's checker too)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    invalid = list(invalid)
    for m in _mutants(schema, valid[0]):
        if len(invalid) >= want:
            break
        if m not in invalid and not validator.is_valid(m):
            invalid.append(m)
    add(name, schema, valid, invalid)


# ---- function-calling / tool parameters (OpenAI- and Anthropic-style) -------------------------------------
def tool(name, props, required, valid, invalid, strict=True, **kw):
    schema = O(props, required, False if strict else None, **kw)
    auto(f"tool: {name}", schema, valid, invalid)


tool("send_email", {"to": A(S(format="email"), minItems=1, maxItems=10), "subject": S(maxLength=120),
                    "body": S(), "cc": A(S(format="email")), "priority": E("low", "normal", "high")},
     ["to", "subject", "body"],
     [{"to": ["ann@example.com"], "subject": "Hi", "body": "Hello"},
      {"to": ["a@example.org", "b@example.org"], "subject": "Report", "body": "Attached.", "priority": "high",
       "cc": []}],
     [{"to": [], "subject": "x", "body": "y"}, {"to": ["not-an-address"], "subject": "x", "body": "y"}])
tool("create_calendar_event", {"title": S(minLength=1), "start": S(format="date-time"), "end": S(format="date-time"),
                               "attendees": A(O({"email": S(format="email"), "optional": B()}, ["email"], False)),
                               "reminder_minutes": I(minimum=0, maximum=10080)},
     ["title", "start"],
     [{"title": "Standup", "start": "2024-03-01T09:00:00Z"},
      {"title": "Review", "start": "2024-03-01T09:00:00+01:00", "end": "2024-03-01T10:00:00+01:00",
       "attendees": [{"email": "bo@example.com", "optional": True}], "reminder_minutes": 15}],
     [{"title": "x", "start": "tomorrow 9am"}, {"title": "x", "start": "2024-03-01T09:00:00Z", "reminder_minutes": -5}])
tool("get_stock_price", {"ticker": S(pattern="^[A-Z]{1,5}$"), "exchange": E("NYSE", "NASDAQ", "LSE", "TSE")},
     ["ticker"], [{"ticker": "AAPL"}, {"ticker": "T", "exchange": "NYSE"}],
     [{"ticker": "aapl"}, {"ticker": "TOOLONG"}, {"ticker": "MSFT", "exchange": "FOO"}])
tool("convert_currency", {"amount": N(exclusiveMinimum=0), "from": S(pattern="^[A-Z]{3}$"), "to": S(pattern="^[A-Z]{3}$")},
     ["amount", "from", "to"], [{"amount": 12.5, "from": "USD", "to": "EUR"}, {"amount": 1, "from": "JPY", "to": "GBP"}],
     [{"amount": 0, "from": "USD", "to": "EUR"}, {"amount": 3, "from": "US", "to": "EUR"}])
tool("run_sql_query", {"query": S(minLength=1, maxLength=2000), "database": E("analytics", "billing", "users"),
                       "limit": I(minimum=1, maximum=1000, default=100), "read_only": B(const=True)},
     ["query", "database"], [{"query": "SELECT 1", "database": "analytics"},
                             {"query": "SELECT * FROM t", "database": "users", "limit": 10, "read_only": True}],
     [{"query": "SELECT 1", "database": "analytics", "read_only": False},
      {"query": "SELECT 1", "database": "analytics", "limit": 5000}])
tool("book_flight", {"origin": S(pattern="^[A-Z]{3}$"), "destination": S(pattern="^[A-Z]{3}$"),
                     "date": S(format="date"), "passengers": I(minimum=1, maximum=9),
                     "cabin": E("economy", "premium_economy", "business", "first")},
     ["origin", "destination", "date"],
     [{"origin": "SFO", "destination": "JFK", "date": "2024-07-04"},
      {"origin": "LHR", "destination": "CDG", "date": "2024-02-29", "passengers": 2, "cabin": "business"}],
     [{"origin": "SFO", "destination": "JFK", "date": "2023-02-29"},
      {"origin": "SFO", "destination": "JFK", "date": "2024-07-04", "passengers": 0}])
tool("search_products", {"query": S(), "category": E("books", "electronics", "garden", "toys", None),
                         "price_range": O({"min": N(minimum=0), "max": N(minimum=0)}, extra=False),
                         "sort": E("relevance", "price_asc", "price_desc", "rating"), "in_stock": B()},
     ["query"], [{"query": "usb cable"}, {"query": "lamp", "category": None, "price_range": {"min": 5, "max": 49.99},
                                          "sort": "rating", "in_stock": True}],
     [{"query": "x", "price_range": {"min": -1}}, {"query": "x", "price_range": {"currency": "EUR"}}])
tool("set_thermostat", {"temperature": N(minimum=5, maximum=35), "mode": E("heat", "cool", "auto", "off"),
                        "room": S()}, ["temperature"],
     [{"temperature": 21.5}, {"temperature": 18, "mode": "heat", "room": "bedroom"}],
     [{"temperature": 40}, {"temperature": 20, "mode": "dry"}])
tool("translate_text", {"text": S(minLength=1), "source_lang": S(pattern="^[a-z]{2}(-[A-Z]{2})?$"),
                        "target_lang": S(pattern="^[a-z]{2}(-[A-Z]{2})?$"), "formality": E("default", "more", "less")},
     ["text", "target_lang"], [{"text": "Hallo", "target_lang": "en"},
                               {"text": "Bonjour", "source_lang": "fr", "target_lang": "pt-BR", "formality": "less"}],
     [{"text": "Hi", "target_lang": "english"}, {"text": "", "target_lang": "de"}])
tool("create_github_issue", {"owner": S(), "repo": S(), "title": S(minLength=1, maxLength=256), "body": S(),
                             "labels": A(S(), maxItems=10), "assignees": A(S(pattern="^[A-Za-z0-9-]+$"))},
     ["owner", "repo", "title"], [{"owner": "octo", "repo": "hello", "title": "Crash on start"},
                                  {"owner": "o", "repo": "r", "title": "t", "labels": ["bug"], "assignees": ["mona-l"]}],
     [{"owner": "o", "repo": "r", "title": "t", "assignees": ["bad name"]}, {"owner": "o", "repo": "r", "title": ""}])
tool("resize_image", {"url": S(format="uri"), "width": I(minimum=1, maximum=8192), "height": I(minimum=1, maximum=8192),
                      "fit": E("cover", "contain", "fill"), "format": E("png", "jpeg", "webp")},
     ["url", "width"], [{"url": "https://cdn.example.com/a.png", "width": 640},
                        {"url": "s3://bucket/key.jpg", "width": 100, "height": 100, "fit": "cover", "format": "webp"}],
     [{"url": "https://x.io/a.png", "width": 0}, {"url": "https://x.io/a.png", "width": 10, "format": "gif"}])
tool("schedule_reminder", {"message": S(maxLength=280), "at": S(format="date-time"),
                           "repeat": E("never", "daily", "weekly", "monthly"), "channel": E("push", "sms", "email")},
     ["message", "at"], [{"message": "Call mom", "at": "2024-05-12T18:00:00Z"},
                         {"message": "Pay rent", "at": "2024-06-01T08:00:00-05:00", "repeat": "monthly", "channel": "sms"}],
     [{"message": "x", "at": "2024-05-12 18:00"}, {"message": "x", "at": "2024-05-12T18:00:00Z", "repeat": "yearly"}])
tool("execute_python", {"code": S(minLength=1), "timeout_s": N(minimum=0.1, maximum=60),
                        "packages": A(S(pattern="^[A-Za-z0-9_.-]+(==[0-9.]+)?$"), maxItems=5)},
     ["code"], [{"code": "print(1)"}, {"code": "import numpy", "timeout_s": 2.5, "packages": ["numpy==1.26.4"]}],
     [{"code": "x", "timeout_s": 0}, {"code": "x", "packages": ["numpy>=1"]}])
tool("lookup_order", {"order_id": S(pattern="^ORD-[0-9]{8}$"), "include_items": B()}, ["order_id"],
     [{"order_id": "ORD-00012345"}, {"order_id": "ORD-99999999", "include_items": False}],
     [{"order_id": "ORD-123"}, {"order_id": "ord-00012345"}])
tool("update_crm_contact", {"contact_id": I(minimum=1), "fields": O({"first_name": S(), "last_name": S(),
                                                                    "phone": S(pattern="^\\+[1-9][0-9]{6,14}$"),
                                                                    "lifecycle": E("lead", "customer", "churned")},
                                                                   extra=False, minProperties=1)},
     ["contact_id", "fields"], [{"contact_id": 42, "fields": {"phone": "+14155550100"}},
                                {"contact_id": 7, "fields": {"first_name": "Ada", "lifecycle": "customer"}}],
     [{"contact_id": 42, "fields": {}}, {"contact_id": 42, "fields": {"phone": "555-0100"}}])
tool("get_directions", {"origin": S(), "destination": S(), "mode": E("driving", "walking", "bicycling", "transit"),
                        "waypoints": A(S(), maxItems=8), "avoid": A(E("tolls", "highways", "ferries"), uniqueItems=True)},
     ["origin", "destination"],
     [{"origin": "Berlin", "destination": "Hamburg"},
      {"origin": "A", "destination": "B", "mode": "driving", "avoid": ["tolls", "ferries"], "waypoints": ["C"]}],
     [{"origin": "A", "destination": "B", "avoid": ["tolls", "tolls"]}, {"origin": "A", "destination": "B", "mode": "fly"}])
tool("play_music", {"query": S(), "shuffle": B(), "volume": I(minimum=0, maximum=100),
                    "device": E("speaker", "phone", "tv")}, ["query"],
     [{"query": "jazz"}, {"query": "Bach", "shuffle": True, "volume": 30, "device": "speaker"}],
     [{"query": "x", "volume": 101}, {"query": "x", "volume": 55.5}])
tool("file_expense", {"amount_cents": I(minimum=1), "currency": E("USD", "EUR", "GBP", "JPY"),
                      "category": E("travel", "meals", "software", "office"), "date": S(format="date"),
                      "receipt_url": S(format="uri"), "note": S(maxLength=500)},
     ["amount_cents", "currency", "category", "date"],
     [{"amount_cents": 1250, "currency": "EUR", "category": "meals", "date": "2024-01-15"},
      {"amount_cents": 99, "currency": "USD", "category": "software", "date": "2024-12-31",
       "receipt_url": "https://r.example.com/1", "note": "IDE license"}],
     [{"amount_cents": 0, "currency": "EUR", "category": "meals", "date": "2024-01-15"},
      {"amount_cents": 5, "currency": "CHF", "category": "meals", "date": "2024-01-15"}])
tool("web_search", {"query": S(minLength=1, maxLength=400), "num_results": I(minimum=1, maximum=20),
                    "site": S(format="hostname"), "recency_days": I(minimum=1)}, ["query"],
     [{"query": "json schema"}, {"query": "llm", "num_results": 5, "site": "arxiv.org", "recency_days": 30}],
     [{"query": "x", "site": "not a host"}, {"query": "x", "num_results": 50}])
tool("create_ticket (Anthropic input_schema)", {"summary": S(maxLength=100), "severity": E("sev1", "sev2", "sev3", "sev4"),
                                                "components": A(S(), minItems=1), "customer_visible": B()},
     ["summary", "severity"], [{"summary": "Login fails", "severity": "sev2"},
                               {"summary": "Slow", "severity": "sev4", "components": ["api"], "customer_visible": False}],
     [{"summary": "x", "severity": "sev5"}, {"summary": "x", "severity": "sev1", "components": []}], strict=False)
tool("geocode", {"address": S(minLength=3), "country": S(pattern="^[A-Z]{2}$"), "limit": I(minimum=1, maximum=10)},
     ["address"], [{"address": "10 Downing St, London"}, {"address": "Rue de Rivoli", "country": "FR", "limit": 3}],
     [{"address": "ab"}, {"address": "Main St", "country": "usa"}])
tool("send_slack_message", {"channel": S(pattern="^[#@]?[a-z0-9_-]+$"), "text": S(maxLength=4000),
                            "thread_ts": S(pattern="^[0-9]+\\.[0-9]+$"), "unfurl_links": B()},
     ["channel", "text"], [{"channel": "#general", "text": "deploy done"},
                           {"channel": "ops", "text": "ack", "thread_ts": "1712345678.000100", "unfurl_links": False}],
     [{"channel": "#General", "text": "x"}, {"channel": "#x", "text": "y", "thread_ts": "abc"}])
tool("kubectl_scale", {"namespace": S(pattern="^[a-z0-9-]+$"), "deployment": S(), "replicas": I(minimum=0, maximum=100)},
     ["deployment", "replicas"], [{"deployment": "web", "replicas": 3}, {"namespace": "prod", "deployment": "api", "replicas": 0}],
     [{"deployment": "web", "replicas": -1}, {"deployment": "web", "replicas": 2, "namespace": "Prod"}])
tool("summarize_document", {"document_id": S(format="uuid"), "max_words": I(minimum=10, maximum=1000),
                            "style": E("bullets", "paragraph", "tldr"), "language": S()},
     ["document_id"], [{"document_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
                       {"document_id": "00000000-0000-0000-0000-000000000000", "max_words": 100, "style": "tldr"}],
     [{"document_id": "3fa85f64-5717-4562-b3fc"}, {"document_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6", "max_words": 5}])
tool("ping_host", {"host": {"anyOf": [S(format="ipv4"), S(format="ipv6"), S(format="hostname")]},
                   "count": I(minimum=1, maximum=10), "timeout_ms": I(minimum=100, multipleOf=100)},
     ["host"], [{"host": "192.168.1.1"}, {"host": "::1", "count": 3}, {"host": "example.com", "timeout_ms": 500}],
     [{"host": "bad_host!"}, {"host": "a.b", "timeout_ms": 250}])
tool("add_todo", {"title": S(minLength=1), "due": S(format="date"), "priority": I(minimum=1, maximum=4),
                  "tags": A(S(pattern="^[a-z]+$"), maxItems=5)}, ["title"],
     [{"title": "buy milk"}, {"title": "taxes", "due": "2025-04-15", "priority": 1, "tags": ["home", "money"]}],
     [{"title": "x", "priority": 5}, {"title": "x", "tags": ["Home"]}])
tool("query_metrics", {"metric": S(pattern="^[a-z_:]+$"), "start": S(format="date-time"), "end": S(format="date-time"),
                       "step_s": I(minimum=1, maximum=86400), "aggregation": E("avg", "sum", "max", "min", "p95")},
     ["metric", "start", "end"],
     [{"metric": "http_requests_total", "start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z"},
      {"metric": "cpu:usage", "start": "2024-01-01T00:00:00Z", "end": "2024-01-01T01:00:00Z", "step_s": 60,
       "aggregation": "p95"}],
     [{"metric": "CPU", "start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z"},
      {"metric": "m", "start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "step_s": 0}])
tool("order_pizza", {"size": E("small", "medium", "large"), "toppings": A(E("cheese", "ham", "mushroom", "olive", "pepper",
                                                                             "onion", "pineapple"), maxItems=5, uniqueItems=True),
                     "quantity": I(minimum=1, maximum=20), "address": S()},
     ["size", "address"], [{"size": "large", "address": "1 Elm St"},
                           {"size": "small", "toppings": ["ham", "pineapple"], "quantity": 2, "address": "x"}],
     [{"size": "large", "address": "a", "toppings": ["ham", "ham"]}, {"size": "huge", "address": "a"}])
tool("rate_limit_rule", {"path": S(pattern="^/"), "requests": I(minimum=1), "per": E("second", "minute", "hour"),
                         "burst": I(minimum=0, maximum=1000)}, ["path", "requests", "per"],
     [{"path": "/api", "requests": 100, "per": "minute"}, {"path": "/login", "requests": 5, "per": "second", "burst": 10}],
     [{"path": "api", "requests": 1, "per": "minute"}, {"path": "/a", "requests": 1, "per": "day"}])


# A family: the same CRUD tools over several resources, as API gateways generate them.
RESOURCES = {"customer": {"name": S(minLength=1), "email": S(format="email"), "vip": B()},
             "invoice": {"customer_id": I(minimum=1), "total_cents": I(minimum=0), "status": E("draft", "open", "paid")},
             "project": {"title": S(maxLength=80), "budget": N(minimum=0), "archived": B()},
             "employee": {"full_name": S(), "department": E("eng", "sales", "ops"), "level": I(minimum=1, maximum=10)},
             "warehouse": {"code": S(pattern="^WH[0-9]{3}$"), "capacity": I(minimum=0), "city": S()}}
SAMPLES = {"customer": ({"name": "Ada", "email": "ada@example.com"}, {"name": ""}),
           "invoice": ({"customer_id": 3, "total_cents": 1000, "status": "open"}, {"status": "void"}),
           "project": ({"title": "Apollo", "budget": 2500.5}, {"budget": -1}),
           "employee": ({"full_name": "Bo", "department": "ops", "level": 3}, {"level": 11}),
           "warehouse": ({"code": "WH007", "capacity": 500, "city": "Lyon"}, {"code": "W7"})}
for res, props in RESOURCES.items():
    good, bad = SAMPLES[res]
    first = next(iter(props))
    tool(f"create_{res}", props, list(good)[:2], [good, {k: good[k] for k in list(good)[:2]}],
         [{**good, **bad}])
    tool(f"update_{res}", {"id": I(minimum=1), "patch": O(props, extra=False, minProperties=1)}, ["id", "patch"],
         [{"id": 1, "patch": {first: good[first]}}, {"id": 9, "patch": good}],
         [{"id": 1, "patch": {}}, {"id": 1, "patch": bad}, {"id": 0, "patch": good}])
    tool(f"list_{res}s", {"page": I(minimum=1), "per_page": I(minimum=1, maximum=100),
                          "order": E("asc", "desc"), "filter": O(props, extra=False)}, [],
         [{}, {"page": 2, "per_page": 50, "order": "desc", "filter": {first: good[first]}}],
         [{"per_page": 500}, {"filter": bad}, {"order": "up"}])


# ---- OpenAPI components: Petstore-, GitHub- and Stripe-like ------------------------------------------------
D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
auto("openapi: Category (draft-4 id, x-*)", {"$schema": D4, "id": "http://example.com/category.json",
                                            "type": "object", "x-swagger-router-model": "Category",
                                            "properties": {"id": I(format="int64", example=1), "name": S(example="Dogs")},
                                            "additionalProperties": False},
     [{"id": 1, "name": "Dogs"}, {}], [{"id": "1"}, {"nm": "x"}])
auto("openapi: Order (int32, date-time, readOnly)", O({"id": I(format="int64", readOnly=True), "petId": I(format="int64"),
                                                      "quantity": I(format="int32", minimum=1),
                                                      "shipDate": S(format="date-time"),
                                                      "status": E("placed", "approved", "delivered"),
                                                      "complete": B(default=False)}, ["petId", "quantity"]),
     [{"petId": 10, "quantity": 1}, {"id": 3, "petId": 1, "quantity": 7, "shipDate": "2024-02-03T04:05:06.789Z",
                                    "status": "approved", "complete": True}],
     [{"petId": 1, "quantity": 2147483648}, {"petId": 1, "quantity": 0}, {"petId": 1, "quantity": 1, "status": "lost"}])
auto("openapi: User (x-go-name, writeOnly password)", O({
    "username": S(pattern="^[a-zA-Z0-9_]{3,30}$", **{"x-go-name": "UserName"}), "email": S(format="email"),
    "password": S(minLength=8, writeOnly=True), "phone": S(), "userStatus": I(format="int32", description="User Status")},
    ["username"]),
     [{"username": "jdoe"}, {"username": "jane_doe", "email": "jane@example.com", "password": "s3cretpass", "userStatus": 1}],
     [{"username": "jd"}, {"username": "jdoe", "password": "short"}])
auto("openapi: ApiResponse", O({"code": I(format="int32"), "type": S(), "message": S()}),
     [{"code": 200, "type": "ok", "message": "fine"}, {}], [{"code": 2.5}, {"code": -2147483649}])
auto("openapi: Problem details (RFC 7807 shape)", O({"type": S(format="uri", default="about:blank"), "title": S(),
                                                    "status": I(minimum=100, maximum=599), "detail": S(),
                                                    "instance": S(format="uri-reference")}, ["title", "status"]),
     [{"title": "Not Found", "status": 404}, {"type": "https://errors.example.com/quota", "title": "Quota",
                                             "status": 429, "detail": "slow down", "instance": "/req/1"}],
     [{"title": "x", "status": 600}, {"type": "no scheme here", "title": "x", "status": 400}])
auto("openapi: paginated list (allOf + $ref)", {"definitions": {
    "Page": O({"page": I(minimum=1), "total": I(minimum=0), "next": {"type": ["string", "null"], "format": "uri"}},
              ["page", "total"]),
    "Item": O({"id": S(format="uuid"), "label": S()}, ["id"], False)},
    "allOf": [{"$ref": "#/definitions/Page"},
              {"properties": {"items": A({"$ref": "#/definitions/Item"}, maxItems=50)}, "required": ["items"]}]},
     [{"page": 1, "total": 0, "items": [], "next": None},
      {"page": 2, "total": 1, "items": [{"id": "123e4567-e89b-12d3-a456-426614174000", "label": "a"}],
       "next": "https://api.example.com/?page=3"}],
     [{"page": 1, "total": 0}, {"page": 0, "total": 0, "items": []}, {"page": 1, "total": 1, "items": [{"label": "a"}]}])
GH_USER = O({"login": S(), "id": I(minimum=1), "node_id": S(), "avatar_url": S(format="uri"),
             "type": E("User", "Organization", "Bot"), "site_admin": B()},
            ["login", "id", "type"])
auto("github: simple user", GH_USER,
     [{"login": "octocat", "id": 1, "type": "User"},
      {"login": "acme", "id": 9, "type": "Organization", "site_admin": False, "avatar_url": "https://a.example/u/9"}],
     [{"login": "x", "id": 0, "type": "User"}, {"login": "x", "id": 1, "type": "Robot"}])
auto("github: repository", O({"id": I(), "name": S(pattern="^[A-Za-z0-9_.-]+$"), "full_name": S(pattern="^[^/]+/[^/]+$"),
                              "private": B(), "owner": GH_USER, "description": {"type": ["string", "null"]},
                              "topics": A(S(pattern="^[a-z0-9][a-z0-9-]{0,49}$"), maxItems=20),
                              "visibility": E("public", "private", "internal"),
                              "license": {"oneOf": [{"type": "null"}, O({"key": S(), "spdx_id": S()}, ["key"])]},
                              "stargazers_count": I(minimum=0)}, ["id", "name", "full_name", "private", "owner"]),
     [{"id": 1, "name": "hello", "full_name": "octo/hello", "private": False,
       "owner": {"login": "octo", "id": 2, "type": "User"}},
      {"id": 5, "name": "x.y", "full_name": "a/x.y", "private": True, "owner": {"login": "a", "id": 3, "type": "Bot"},
       "description": None, "topics": ["cli", "go"], "visibility": "internal", "license": {"key": "mit", "spdx_id": "MIT"},
       "stargazers_count": 0}],
     [{"id": 1, "name": "h", "full_name": "octo", "private": False, "owner": {"login": "o", "id": 2, "type": "User"}},
      {"id": 1, "name": "h", "full_name": "a/h", "private": False, "owner": {"login": "o", "id": 2, "type": "User"},
       "topics": ["Not-Lower"]}])
auto("github: issue (labels objects, nullable milestone)", O({
    "number": I(minimum=1), "title": S(), "state": E("open", "closed"), "state_reason": E("completed", "not_planned",
                                                                                        "reopened", None),
    "labels": A({"oneOf": [S(), O({"name": S(), "color": S(pattern="^[0-9a-fA-F]{6}$")}, ["name"])]}),
    "milestone": {"anyOf": [{"type": "null"}, O({"number": I(), "due_on": S(format="date-time")}, ["number"])]},
    "locked": B()}, ["number", "title", "state"]),
     [{"number": 1, "title": "Bug", "state": "open"},
      {"number": 2, "title": "t", "state": "closed", "state_reason": "completed", "labels": ["bug", {"name": "p1",
                                                                                                   "color": "ff0000"}],
       "milestone": {"number": 3, "due_on": "2025-01-01T00:00:00Z"}, "locked": False}],
     [{"number": 1, "title": "t", "state": "open", "labels": [{"name": "x", "color": "red"}]},
      {"number": 1, "title": "t", "state": "merged"}])
auto("github: pull_request webhook (nested)", O({
    "action": E("opened", "closed", "reopened", "synchronize", "edited"), "number": I(),
    "pull_request": O({"head": O({"ref": S(), "sha": S(pattern="^[0-9a-f]{40}$")}, ["ref", "sha"]),
                       "base": O({"ref": S(), "sha": S(pattern="^[0-9a-f]{40}$")}, ["ref", "sha"]),
                       "merged": B(), "draft": B()}, ["head", "base"]),
    "sender": GH_USER}, ["action", "number", "pull_request"]),
     [{"action": "opened", "number": 7, "pull_request": {"head": {"ref": "feat", "sha": "a" * 40},
                                                          "base": {"ref": "main", "sha": "0123456789abcdef" * 2 + "01234567"}}},
      {"action": "closed", "number": 8, "pull_request": {"head": {"ref": "f", "sha": "b" * 40},
                                                          "base": {"ref": "m", "sha": "c" * 40}, "merged": True},
       "sender": {"login": "bot", "id": 5, "type": "Bot"}}],
     [{"action": "opened", "number": 7, "pull_request": {"head": {"ref": "f", "sha": "abc"}, "base": {"ref": "m", "sha": "c" * 40}}},
      {"action": "merged", "number": 7, "pull_request": {"head": {"ref": "f", "sha": "a" * 40},
                                                          "base": {"ref": "m", "sha": "c" * 40}}}])
auto("github: commit status", O({"state": E("error", "failure", "pending", "success"), "target_url": S(format="uri"),
                                 "description": S(maxLength=140), "context": S(default="default")}, ["state"], False),
     [{"state": "success"}, {"state": "pending", "target_url": "https://ci.example.com/1", "context": "ci/test"}],
     [{"state": "ok"}, {"state": "error", "description": "x" * 141}])
auto("github: release asset list (maxItems of objects)", A(O({"name": S(), "size": I(minimum=0),
                                                              "content_type": S(pattern="^[a-z]+/[a-z0-9.+-]+$"),
                                                              "download_count": I(minimum=0)}, ["name", "size"]),
                                                            maxItems=10),
     [[], [{"name": "app.tar.gz", "size": 1024, "content_type": "application/gzip"}, {"name": "sha256", "size": 64}]],
     [[{"name": "a", "size": 1}] * 11, [{"name": "a", "size": -1}], [{"name": "a", "size": 1, "content_type": "gzip"}]])
STRIPE_META = {"type": "object", "additionalProperties": S(maxLength=500), "maxProperties": 50,
               "propertyNames": {"maxLength": 40}}
auto("stripe: customer", O({"id": S(pattern="^cus_[A-Za-z0-9]+$"), "object": {"const": "customer"},
                            "email": {"type": ["string", "null"], "format": "email"}, "balance": I(),
                            "created": I(minimum=0), "livemode": B(), "metadata": STRIPE_META,
                            "preferred_locales": A(S(), maxItems=5)}, ["id", "object", "created", "livemode"]),
     [{"id": "cus_NffrFeUfNV2Hib", "object": "customer", "created": 1680893993, "livemode": False},
      {"id": "cus_1", "object": "customer", "email": None, "balance": -500, "created": 0, "livemode": True,
       "metadata": {"order_id": "6735"}}],
     [{"id": "cust_1", "object": "customer", "created": 1, "livemode": False},
      {"id": "cus_1", "object": "customer", "created": 1, "livemode": False, "metadata": {"k": 1}}])
auto("stripe: charge (amount, currency, status)", O({"id": S(pattern="^ch_"), "amount": I(minimum=50, maximum=99999999),
                                                    "currency": S(pattern="^[a-z]{3}$"), "captured": B(),
                                                    "status": E("succeeded", "pending", "failed"),
                                                    "failure_code": {"type": ["string", "null"]},
                                                    "refunds": O({"object": {"const": "list"}, "data": A(O({"id": S()}, ["id"])),
                                                                  "has_more": B()}, ["data"])},
                                                   ["id", "amount", "currency", "status"]),
     [{"id": "ch_1", "amount": 2000, "currency": "usd", "status": "succeeded"},
      {"id": "ch_2", "amount": 50, "currency": "eur", "status": "failed", "failure_code": "card_declined",
       "refunds": {"object": "list", "data": [{"id": "re_1"}], "has_more": False}}],
     [{"id": "ch_1", "amount": 49, "currency": "usd", "status": "succeeded"},
      {"id": "ch_1", "amount": 100, "currency": "USD", "status": "succeeded"}])
auto("stripe: payment intent (oneOf on status)", {"type": "object", "required": ["id", "status", "amount"],
                                                  "properties": {"id": S(pattern="^pi_"), "amount": I(minimum=1),
                                                                 "status": S(), "last_payment_error": {}},
                                                  "oneOf": [{"properties": {"status": E("succeeded", "processing")}},
                                                            {"properties": {"status": {"const": "requires_payment_method"}},
                                                             "required": ["last_payment_error"]}]},
     [{"id": "pi_1", "amount": 100, "status": "succeeded"},
      {"id": "pi_2", "amount": 5, "status": "requires_payment_method", "last_payment_error": {"code": "card_declined",
                                                                                            "param": [1, {"a": None}]}}],
     [{"id": "pi_1", "amount": 100, "status": "requires_payment_method"}, {"id": "pi_1", "amount": 100, "status": "canceled"}])
auto("stripe: price (recurring, tiers)", O({"id": S(), "unit_amount": {"type": ["integer", "null"], "minimum": 0},
                                           "currency": S(pattern="^[a-z]{3}$"), "type": E("one_time", "recurring"),
                                           "recurring": O({"interval": E("day", "week", "month", "year"),
                                                           "interval_count": I(minimum=1, maximum=12)}, ["interval"]),
                                           "tiers": A(O({"up_to": {"type": ["integer", "null"], "minimum": 1},
                                                         "unit_amount": I(minimum=0)}, ["up_to"]), maxItems=10)},
                                          ["id", "currency", "type"],
                                          **{"if": {"properties": {"type": {"const": "recurring"}}},
                                             "then": {"required": ["recurring"]}}),
     [{"id": "price_1", "currency": "usd", "type": "one_time", "unit_amount": 999},
      {"id": "price_2", "currency": "eur", "type": "recurring", "recurring": {"interval": "month", "interval_count": 3},
       "tiers": [{"up_to": 10, "unit_amount": 500}, {"up_to": None, "unit_amount": 400}]}],
     [{"id": "p", "currency": "usd", "type": "recurring"},
      {"id": "p", "currency": "usd", "type": "recurring", "recurring": {"interval": "month", "interval_count": 13}}])
auto("stripe: invoice line items", O({"object": {"const": "list"}, "data": A(O({
    "id": S(), "amount": I(), "quantity": {"type": ["integer", "null"], "minimum": 0}, "description": {"type": ["string", "null"]},
    "period": O({"start": I(), "end": I()}, ["start", "end"], False), "proration": B()}, ["id", "amount", "period"])),
    "has_more": B(), "url": S(pattern="^/v1/")}, ["object", "data", "has_more"]),
     [{"object": "list", "data": [], "has_more": False},
      {"object": "list", "has_more": True, "url": "/v1/invoices/in_1/lines",
       "data": [{"id": "il_1", "amount": -300, "quantity": None, "period": {"start": 1, "end": 2}, "proration": True}]}],
     [{"object": "list", "data": [{"id": "il_1", "amount": 1, "period": {"start": 1}}], "has_more": False},
      {"object": "list", "data": [], "has_more": False, "url": "https://api.stripe.example/v1/x"}])
auto("stripe: event envelope (unconstrained data.object)", O({
    "id": S(pattern="^evt_"), "type": S(pattern="^[a-z_]+(\\.[a-z_]+)+$"), "api_version": S(pattern="^[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
    "data": O({"object": {"type": "object"}, "previous_attributes": {"type": "object"}}, ["object"]),
    "pending_webhooks": I(minimum=0)}, ["id", "type", "data"]),
     [{"id": "evt_1", "type": "invoice.paid", "data": {"object": {"lines": {"data": [{"period": {"start": 1}}]}}}},
      {"id": "evt_2", "type": "customer.subscription.updated", "api_version": "2024-06-20",
       "data": {"object": {"items": [[{"a": [{"b": {}}]}]]}, "previous_attributes": {}}, "pending_webhooks": 1}],
     [{"id": "evt_1", "type": "invoice", "data": {"object": {}}}, {"id": "evt_1", "type": "a.b", "data": {"object": []}}])
auto("stripe: price with fractional multipleOf (refused)", O({"unit_amount_decimal": N(multipleOf=0.01, minimum=0),
                                                             "currency": S()}, ["unit_amount_decimal"]),
     [{"unit_amount_decimal": 12.34}, {"unit_amount_decimal": 0, "currency": "usd"}],
     [{"unit_amount_decimal": 12.345}, {"unit_amount_decimal": -1}])
auto("openapi: discriminator (x-*, oneOf by petType)", {"definitions": {
    "Cat": O({"petType": {"const": "cat"}, "huntingSkill": E("clueless", "lazy", "aggressive")}, ["petType", "huntingSkill"]),
    "Dog": O({"petType": {"const": "dog"}, "packSize": I(format="int32", minimum=0)}, ["petType", "packSize"])},
    "oneOf": [{"$ref": "#/definitions/Cat"}, {"$ref": "#/definitions/Dog"}],
    "discriminator": {"propertyName": "petType"}, "x-discriminator-value": "petType"},
     [{"petType": "cat", "huntingSkill": "lazy"}, {"petType": "dog", "packSize": 3}],
     [{"petType": "dog", "huntingSkill": "lazy"}, {"petType": "cat", "huntingSkill": "sleepy"}, {"petType": "dog", "packSize": -1}])
auto("openapi 3.0: nullable keyword (annotation under 2020-12)", O({"nickname": S(nullable=True, maxLength=10),
                                                                  "age": I(minimum=0)}, ["age"]),
     [{"age": 3}, {"age": 0, "nickname": "bo"}], [{"age": 3, "nickname": "abcdefghijk"}, {"age": -3}])
auto("openapi: webhook subscription (uri, enum events, secret pattern)", O({
    "url": S(format="uri", pattern="^https://"), "events": A(E("order.created", "order.paid", "order.refunded", "*"),
                                                           minItems=1, uniqueItems=True),
    "secret": S(pattern="^whsec_[A-Za-z0-9]{16,}$"), "active": B(default=True)}, ["url", "events"], False),
     [{"url": "https://hooks.example.com/x", "events": ["*"]},
      {"url": "https://h.example.com/", "events": ["order.created", "order.paid"], "secret": "whsec_abcdefghijklmnop",
       "active": False}],
     [{"url": "http://insecure.example.com", "events": ["*"]}, {"url": "https://h.example.com", "events": ["*", "*"]},
      {"url": "https://h.example.com", "events": ["order.created"], "secret": "whsec_short"}])
auto("openapi: search request (not over additionalProperties)", O({"q": S(), "filters": {
    "type": "object", "additionalProperties": S(), "not": {"additionalProperties": S(maxLength=0)}}}, ["q"]),
     [{"q": "x"}, {"q": "x", "filters": {"a": "b"}}],
     [{"q": "x", "filters": {}}, {"q": "x", "filters": {"a": ""}}, {"q": "x", "filters": {"a": 1}}])
auto("openapi: bulk request (maxItems 10 of objects, long enum)", O({"operations": A(O({
    "op": E("add", "remove", "replace", "move", "copy", "test"), "path": S(pattern="^(/[^/]*)*$"), "value": {}},
    ["op", "path"]), minItems=1, maxItems=10)}, ["operations"]),
     [{"operations": [{"op": "add", "path": "/a/b", "value": [1, {"c": [2]}]}]},
      {"operations": [{"op": "remove", "path": "/x"}, {"op": "test", "path": "", "value": None}]}],
     [{"operations": []}, {"operations": [{"op": "patch", "path": "/x"}]},
      {"operations": [{"op": "remove", "path": "/x"}] * 11}])


# ---- Kubernetes-style objects ----------------------------------------------------------------------------
DNS1123 = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
STRMAP = {"type": "object", "additionalProperties": S()}
META = O({"name": S(pattern=DNS1123, maxLength=63), "namespace": S(pattern=DNS1123), "labels": STRMAP,
          "annotations": STRMAP, "uid": S(format="uuid"), "resourceVersion": S(), "generation": I(format="int64")},
         ["name"], **{"x-kubernetes-preserve-unknown-fields": False})
QTY = {"x-kubernetes-int-or-string": True, "anyOf": [I(minimum=0), S(pattern="^[0-9]+(\\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G)?$")]}
INT_OR_STR = {"x-kubernetes-int-or-string": True, "anyOf": [I(), S()]}
ENV = A(O({"name": S(pattern="^[A-Za-z_][A-Za-z0-9_]*$"), "value": S(),
           "valueFrom": O({"secretKeyRef": O({"name": S(), "key": S()}, ["key"]),
                           "configMapKeyRef": O({"name": S(), "key": S()}, ["key"])}, maxProperties=1)}, ["name"]),
        **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
PORT = O({"name": S(maxLength=15), "containerPort": I(format="int32", minimum=1, maximum=65535),
          "protocol": E("TCP", "UDP", "SCTP", default="TCP")}, ["containerPort"])
CONTAINER = O({"name": S(pattern=DNS1123), "image": S(minLength=1), "args": A(S()), "command": A(S()), "env": ENV,
               "ports": A(PORT, **{"x-kubernetes-list-type": "map"}),
               "resources": O({"limits": O({"cpu": QTY, "memory": QTY}, extra=False),
                               "requests": O({"cpu": QTY, "memory": QTY}, extra=False)}),
               "imagePullPolicy": E("Always", "IfNotPresent", "Never")}, ["name", "image"])
POD_SPEC = O({"containers": A(CONTAINER, minItems=1), "restartPolicy": E("Always", "OnFailure", "Never"),
              "nodeSelector": STRMAP, "serviceAccountName": S(),
              "terminationGracePeriodSeconds": I(format="int64", minimum=0)}, ["containers"])
C1 = {"name": "web", "image": "nginx:1.25"}


def k8s(kind, api, spec, valid_specs, invalid_specs, spec_required=True, **extra_props):
    props = {"apiVersion": {"const": api}, "kind": {"const": kind}, "metadata": META, "spec": spec, **extra_props}
    schema = O(props, ["apiVersion", "kind", "metadata"] + (["spec"] if spec_required else []),
               **{"x-kubernetes-group-version-kind": [{"group": api.split("/")[0] if "/" in api else "",
                                                       "kind": kind, "version": api.split("/")[-1]}]})
    wrap = [{"apiVersion": api, "kind": kind, "metadata": {"name": f"{kind.lower()}-{n}"}, "spec": s}
            for n, s in enumerate(valid_specs)]
    bad = [{"apiVersion": api, "kind": kind, "metadata": {"name": "x"}, "spec": s} for s in invalid_specs]
    bad.append({"apiVersion": api, "kind": kind, "metadata": {"name": "Upper_Case"}, "spec": valid_specs[0]})
    add(f"kubernetes: {kind}", schema, wrap, bad[:4])


k8s("Pod", "v1", POD_SPEC, [{"containers": [C1]},
                            {"containers": [{"name": "app", "image": "r/app:1", "env": [{"name": "MODE", "value": "prod"},
                                                                                      {"name": "TOKEN", "valueFrom": {
                                                                                          "secretKeyRef": {"name": "s", "key": "t"}}}],
                                             "ports": [{"containerPort": 8080}],
                                             "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                                           "requests": {"cpu": 1}}}],
                             "restartPolicy": "Never", "terminationGracePeriodSeconds": 30}],
    [{"containers": []}, {"containers": [{"name": "a", "image": "b", "ports": [{"containerPort": 70000}]}]},
     {"containers": [{"name": "a", "image": "b", "env": [{"name": "1BAD"}]}]}])
k8s("Deployment", "apps/v1", O({"replicas": I(format="int32", minimum=0), "selector": O({"matchLabels": STRMAP}, ["matchLabels"]),
                                "strategy": O({"type": E("RollingUpdate", "Recreate"),
                                               "rollingUpdate": O({"maxSurge": INT_OR_STR, "maxUnavailable": INT_OR_STR})}),
                                "template": O({"metadata": O({"labels": STRMAP}), "spec": POD_SPEC}, ["spec"]),
                                "revisionHistoryLimit": I(minimum=0)}, ["selector", "template"]),
    [{"selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"containers": [C1]}}},
     {"replicas": 3, "selector": {"matchLabels": {"app": "w"}}, "strategy": {"type": "RollingUpdate",
                                                                           "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
      "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [C1]}}}],
    [{"replicas": -1, "selector": {"matchLabels": {}}, "template": {"spec": {"containers": [C1]}}},
     {"selector": {"matchLabels": {}}, "template": {"spec": {"containers": [{"name": "x"}]}}},
     {"selector": {}, "template": {"spec": {"containers": [C1]}}}])
k8s("Service", "v1", O({"type": E("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"), "selector": STRMAP,
                        "ports": A(O({"name": S(), "port": I(minimum=1, maximum=65535), "targetPort": INT_OR_STR,
                                      "nodePort": I(minimum=30000, maximum=32767), "protocol": E("TCP", "UDP")}, ["port"]),
                                   minItems=1),
                        "clusterIP": {"anyOf": [S(format="ipv4"), {"const": "None"}, {"const": ""}]},
                        "sessionAffinity": E("None", "ClientIP")}),
    [{"ports": [{"port": 80, "targetPort": "http"}]},
     {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 443, "targetPort": 8443, "nodePort": 30443}],
      "clusterIP": "10.0.0.12"}, {"clusterIP": "None", "ports": [{"port": 53, "protocol": "UDP"}]}],
    [{"ports": [{"port": 80, "nodePort": 80}]}, {"type": "Headless", "ports": [{"port": 1}]},
     {"ports": [{"port": 1}], "clusterIP": "10.0.0.300"}])
k8s("Ingress", "networking.k8s.io/v1", O({"ingressClassName": S(), "tls": A(O({"hosts": A(S(format="hostname")),
                                                                               "secretName": S()})),
                                          "rules": A(O({"host": S(format="hostname"), "http": O({"paths": A(O({
                                              "path": S(pattern="^/"), "pathType": E("Exact", "Prefix", "ImplementationSpecific"),
                                              "backend": O({"service": O({"name": S(), "port": O({"number": I(minimum=1),
                                                                                                  "name": S()},
                                                                                                 maxProperties=1, minProperties=1)},
                                                                          ["name", "port"])}, ["service"])},
                                              ["path", "pathType", "backend"]), minItems=1)}, ["paths"])}))}),
    [{"rules": [{"host": "shop.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
     {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"], "secretName": "tls"}], "rules": []}],
    [{"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
                                     "backend": {"service": {"name": "w", "port": {"number": 80, "name": "http"}}}}]}}]},
     {"rules": [{"host": "bad host", "http": {"paths": []}}]},
     {"rules": [{"http": {"paths": [{"path": "api", "pathType": "Exact", "backend": {"service": {"name": "w", "port": {"number": 1}}}}]}}]}])
k8s("CronJob", "batch/v1", O({"schedule": S(pattern="^(@(yearly|monthly|weekly|daily|hourly)|(\\S+\\s+){4}\\S+)$"),
                              "concurrencyPolicy": E("Allow", "Forbid", "Replace"), "suspend": B(),
                              "successfulJobsHistoryLimit": I(minimum=0, maximum=100),
                              "jobTemplate": O({"spec": O({"backoffLimit": I(minimum=0), "template": O({"spec": POD_SPEC})})})},
                             ["schedule", "jobTemplate"]),
    [{"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": [C1], "restartPolicy": "OnFailure"}}}}},
     {"schedule": "@daily", "concurrencyPolicy": "Forbid", "suspend": True, "jobTemplate": {}}],
    [{"schedule": "every day", "jobTemplate": {}}, {"schedule": "@daily", "jobTemplate": {}, "concurrencyPolicy": "Queue"}])
k8s("PersistentVolumeClaim", "v1", O({"accessModes": A(E("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"),
                                                       minItems=1, uniqueItems=True),
                                      "storageClassName": {"type": ["string", "null"]},
                                      "resources": O({"requests": O({"storage": QTY}, ["storage"])}, ["requests"]),
                                      "volumeMode": E("Filesystem", "Block")}, ["accessModes", "resources"]),
    [{"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
     {"accessModes": ["ReadOnlyMany", "ReadWriteMany"], "storageClassName": None, "volumeMode": "Block",
      "resources": {"requests": {"storage": 1073741824}}}],
    [{"accessModes": ["ReadWriteOnce", "ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
     {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "lots"}}},
     {"accessModes": [], "resources": {"requests": {"storage": "1Gi"}}}])
k8s("HorizontalPodAutoscaler", "autoscaling/v2", O({
    "scaleTargetRef": O({"apiVersion": S(), "kind": S(), "name": S()}, ["kind", "name"]),
    "minReplicas": I(format="int32", minimum=1), "maxReplicas": I(format="int32", minimum=1),
    "metrics": A(O({"type": E("Resource", "Pods", "Object", "External"),
                    "resource": O({"name": S(), "target": O({"type": E("Utilization", "AverageValue"),
                                                             "averageUtilization": I(minimum=1, maximum=100)}, ["type"])},
                                  ["name", "target"])}, ["type"]), maxItems=10)}, ["scaleTargetRef", "maxReplicas"]),
    [{"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 10},
     {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 2, "maxReplicas": 5,
      "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}],
    [{"scaleTargetRef": {"kind": "Deployment", "name": "w"}, "maxReplicas": 0},
     {"scaleTargetRef": {"kind": "D", "name": "w"}, "maxReplicas": 3,
      "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 150}}}]}])
k8s("NetworkPolicy", "networking.k8s.io/v1", O({
    "podSelector": O({"matchLabels": STRMAP}), "policyTypes": A(E("Ingress", "Egress"), uniqueItems=True, maxItems=2),
    "ingress": A(O({"from": A(O({"ipBlock": O({"cidr": S(pattern="^[0-9./]+$"), "except": A(S())}, ["cidr"]),
                                 "namespaceSelector": O({"matchLabels": STRMAP})}, minProperties=1)),
                    "ports": A(O({"port": INT_OR_STR, "protocol": E("TCP", "UDP")}))}))}, ["podSelector"]),
    [{"podSelector": {}}, {"podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress"],
                           "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}}],
                                        "ports": [{"port": 5432, "protocol": "TCP"}]}]}],
    [{"podSelector": {}, "policyTypes": ["Ingress", "Ingress"]}, {"podSelector": {}, "ingress": [{"from": [{}]}]}])
k8s("Secret", "v1", None, [None], [], spec_required=False,
    type={"type": "string", "examples": ["Opaque", "kubernetes.io/tls"]},
    data={"type": "object", "additionalProperties": S(pattern="^[A-Za-z0-9+/]*={0,2}$")},
    stringData=STRMAP, immutable=B())
C[-1]["valid"] = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "type": "Opaque",
                   "data": {"password": "cGFzc3dvcmQ="}},
                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "stringData": {"a": "b"}, "immutable": True}]
C[-1]["invalid"] = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {"p": "not base64!"}},
                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "immutable": "yes"},
                    {"apiVersion": "v1", "kind": "Secrets", "metadata": {"name": "db"}}]
C[-1]["schema"]["properties"].pop("spec")
k8s("Namespace", "v1", O({"finalizers": A(S())}), [{}, {"finalizers": ["kubernetes"]}], [{"finalizers": "kubernetes"}],
    spec_required=False)
k8s("ServiceAccount", "v1", None, [None], [], spec_required=False,
    automountServiceAccountToken=B(), imagePullSecrets=A(O({"name": S()}, ["name"], False)))
C[-1]["schema"]["properties"].pop("spec")
C[-1]["valid"] = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ci"}},
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ci", "namespace": "build"},
                   "automountServiceAccountToken": False, "imagePullSecrets": [{"name": "regcred"}]}]
C[-1]["invalid"] = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ci"}, "imagePullSecrets": [{}]},
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {}}]
RULES = A(O({"apiGroups": A(S()), "resources": A(S()), "verbs": A(E("get", "list", "watch", "create", "update", "patch",
                                                                    "delete", "deletecollection", "*"), minItems=1)},
            ["verbs"]))
k8s("Role", "rbac.authorization.k8s.io/v1", None, [None], [], spec_required=False, rules=RULES)
C[-1]["schema"]["properties"].pop("spec")
C[-1]["valid"] = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
                   "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}]},
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "none"}, "rules": []}]
C[-1]["invalid"] = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
                     "rules": [{"resources": ["pods"], "verbs": ["read"]}]},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
                     "rules": [{"resources": ["pods"], "verbs": []}]}]
auto("kubernetes: CustomResourceDefinition-like (x-kubernetes-*, embedded resource)", O({
    "apiVersion": {"const": "stable.example.com/v1"}, "kind": {"const": "CronTab"}, "metadata": META,
    "spec": O({"cronSpec": S(pattern="^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"), "image": S(),
               "replicas": I(minimum=1, maximum=10, **{"x-kubernetes-validations": [{"rule": "self >= 1"}]}),
               "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                            "x-kubernetes-preserve-unknown-fields": True},
               "selector": O({"matchLabels": STRMAP}, **{"x-kubernetes-map-type": "atomic"})},
              ["cronSpec", "image"], False),
    "status": O({"conditions": A(O({"type": S(), "status": E("True", "False", "Unknown"),
                                    "lastTransitionTime": S(format="date-time"), "reason": S(), "message": S()},
                                   ["type", "status"]), **{"x-kubernetes-list-type": "map",
                                                           "x-kubernetes-list-map-keys": ["type"]})})},
    ["apiVersion", "kind", "metadata", "spec"]),
     [{"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct"},
       "spec": {"cronSpec": "* * * * */5", "image": "my-cron-image"}},
      {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct2", "labels": {"a": "b"}},
       "spec": {"cronSpec": "0 3 * * *", "image": "i", "replicas": 2,
                "template": {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "args": [["x"]]}]}}},
       "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}],
     [{"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct"},
       "spec": {"cronSpec": "whenever", "image": "i"}},
      {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct"},
       "spec": {"cronSpec": "* * * * *", "image": "i", "replicas": 11}},
      {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct"},
       "spec": {"cronSpec": "* * * * *", "image": "i"}, "status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}}])
auto("kubernetes: kustomization-like (patches, images)", O({
    "resources": A(S()), "namePrefix": S(pattern="^[a-z0-9-]*$"), "commonLabels": STRMAP,
    "images": A(O({"name": S(), "newName": S(), "newTag": S(), "digest": S(pattern="^sha256:[0-9a-f]{64}$")}, ["name"])),
    "patches": A(O({"path": S(), "patch": S(), "target": O({"kind": S(), "name": S(), "labelSelector": S()})},
                   oneOf=[{"required": ["path"]}, {"required": ["patch"]}])),
    "replicas": A(O({"name": S(), "count": I(minimum=0)}, ["name", "count"]))}),
     [{"resources": ["deployment.yaml", "service.yaml"]},
      {"namePrefix": "dev-", "images": [{"name": "nginx", "newTag": "1.25"}],
       "patches": [{"path": "patch.yaml"}, {"patch": "- op: replace", "target": {"kind": "Deployment"}}],
       "replicas": [{"name": "web", "count": 2}]}],
     [{"patches": [{"path": "a.yaml", "patch": "x"}]}, {"images": [{"name": "n", "digest": "sha256:abc"}]},
      {"namePrefix": "Dev_"}])
auto("kubernetes: Helm Chart.yaml-like (semver pattern, dependencies array)", O({
    "apiVersion": E("v1", "v2"), "name": S(pattern=DNS1123), "version": S(pattern="^v?[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?$"),
    "appVersion": S(), "type": E("application", "library"), "kubeVersion": S(),
    "dependencies": A(O({"name": S(), "version": S(), "repository": S(), "condition": S(), "alias": S(pattern=DNS1123)},
                        ["name", "version"])),
    "maintainers": A(O({"name": S(), "email": S(format="email"), "url": S(format="uri")}, ["name"]))},
    ["apiVersion", "name", "version"]),
     [{"apiVersion": "v2", "name": "web", "version": "0.1.0"},
      {"apiVersion": "v2", "name": "api", "version": "1.2.3-rc.1", "type": "application",
       "dependencies": [{"name": "redis", "version": "~17.0.0", "repository": "oci://r.example/charts", "alias": "cache"}],
       "maintainers": [{"name": "ops", "email": "ops@example.com"}]}],
     [{"apiVersion": "v2", "name": "web", "version": "1.0"}, {"apiVersion": "v3", "name": "web", "version": "1.0.0"},
      {"apiVersion": "v2", "name": "web", "version": "1.0.0", "dependencies": [{"name": "redis"}]}])


# ---- GeoJSON (RFC 7946 shapes) ---------------------------------------------------------------------------
POS = A(N(), minItems=2, maxItems=3)
BBOX = A(N(), minItems=4, maxItems=6)
LINE = A(POS, minItems=2)
RING = A(POS, minItems=4)
GEOMS = {"Point": POS, "MultiPoint": A(POS), "LineString": LINE, "MultiLineString": A(LINE),
         "Polygon": A(RING), "MultiPolygon": A(A(RING))}


def geom(kind):
    return O({"type": {"const": kind}, "coordinates": GEOMS[kind], "bbox": BBOX}, ["type", "coordinates"])


SQ = [[0, 0], [1, 0], [1, 1], [0, 0]]
GEO_SAMPLES = {"Point": ([[102.5, 0.5], [-73.985, 40.7484, 10.5]], [[1], [1, 2, 3, 4], ["1", "2"]]),
               "MultiPoint": ([[], [[100, 0], [101, 1]]], [[[1]], [1, 2]]),
               "LineString": ([[[0, 0], [1, 1]], [[0, 0, 0], [1.5, -2.25], [3, 3]]], [[[0, 0]], [0, 0]]),
               "MultiLineString": ([[], [[[0, 0], [1, 1]], [[2, 2], [3, 3]]]], [[[[0, 0]]], [[0, 0], [1, 1]]]),
               "Polygon": ([[SQ], [SQ, [[0.25, 0.25], [0.5, 0.25], [0.5, 0.5], [0.25, 0.25]]]], [[[[0, 0], [1, 1], [0, 0]]], [SQ[0]]]),
               "MultiPolygon": ([[], [[SQ], [SQ, SQ]]], [[SQ], [[[[0, 0]]]]])}
for kind, (good, bad) in GEO_SAMPLES.items():
    add(f"geojson: {kind} geometry", geom(kind),
        [{"type": kind, "coordinates": c} for c in good] + [{"type": kind, "coordinates": good[0], "bbox": [0, 0, 1, 1]}],
        [{"type": kind, "coordinates": c} for c in bad] + [{"type": "Feature", "coordinates": good[0]}])
GEOMETRY = {"oneOf": [geom(k) for k in GEOMS]}
add("geojson: GeometryCollection", O({"type": {"const": "GeometryCollection"}, "geometries": A(GEOMETRY)},
                                     ["type", "geometries"]),
    [{"type": "GeometryCollection", "geometries": []},
     {"type": "GeometryCollection", "geometries": [{"type": "Point", "coordinates": [1, 2]},
                                                   {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}]}],
    [{"type": "GeometryCollection"}, {"type": "GeometryCollection", "geometries": [{"type": "Point", "coordinates": [[1, 2]]}]}])
FEATURE = O({"type": {"const": "Feature"}, "id": {"type": ["string", "number"]}, "geometry": {"oneOf": [{"type": "null"}, GEOMETRY]},
             "properties": {"type": ["object", "null"]}, "bbox": BBOX}, ["type", "geometry", "properties"])
add("geojson: Feature (any properties)", FEATURE,
    [{"type": "Feature", "geometry": None, "properties": None},
     {"type": "Feature", "id": "a1", "geometry": {"type": "Point", "coordinates": [13.4, 52.52]},
      "properties": {"name": "Berlin", "tags": [{"k": "v", "nested": [[{"deep": True}]]}]}},
     {"type": "Feature", "id": 7, "geometry": {"type": "Polygon", "coordinates": [SQ]}, "properties": {}}],
    [{"type": "Feature", "geometry": None}, {"type": "Feature", "geometry": None, "properties": [1]},
     {"type": "Feature", "id": True, "geometry": None, "properties": None}])
add("geojson: FeatureCollection", O({"type": {"const": "FeatureCollection"}, "features": A(FEATURE), "bbox": BBOX},
                                    ["type", "features"]),
    [{"type": "FeatureCollection", "features": []},
     {"type": "FeatureCollection", "bbox": [-10, -10, 10, 10], "features": [
         {"type": "Feature", "geometry": {"type": "MultiPoint", "coordinates": [[1, 1]]}, "properties": {"pop": 12000}}]}],
    [{"type": "FeatureCollection", "features": [{"type": "Feature"}]}, {"type": "FeatureCollection", "features": {}},
     {"type": "FeatureCollection", "features": [], "bbox": [1, 2]}])
add("geojson: typed city feature (properties schema, int32 population)", O({
    "type": {"const": "Feature"}, "geometry": geom("Point"),
    "properties": O({"name": S(minLength=1), "population": I(format="int32", minimum=0), "capital": B(),
                     "country": S(pattern="^[A-Z]{2}$")}, ["name", "country"], False)}, ["type", "geometry", "properties"]),
    [{"type": "Feature", "geometry": {"type": "Point", "coordinates": [2.3522, 48.8566]},
      "properties": {"name": "Paris", "population": 2102650, "capital": True, "country": "FR"}},
     {"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}, "properties": {"name": "Null Island", "country": "XX"}}],
    [{"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]},
      "properties": {"name": "x", "country": "XX", "population": 3000000000}},
     {"type": "Feature", "geometry": {"type": "LineString", "coordinates": [[0, 0], [1, 1]]},
      "properties": {"name": "x", "country": "XX"}},
     {"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}, "properties": {"name": "x", "country": "XX", "area": 1}}])
add("geojson: WGS84 position with bounds", {"type": "array", "prefixItems": [N(minimum=-180, maximum=180),
                                                                                N(minimum=-90, maximum=90), N()],
                                             "minItems": 2, "items": False},
    [[-122.4194, 37.7749], [180, -90, 12.5]], [[181, 0], [0, 91], [0, 0, 0, 0], [0]])


# ---- configuration files: package.json, tsconfig, eslint, compose, workflows, ... -------------------------
auto("package.json-like (bin/engines/exports, person anyOf)", {"$schema": D7, "definitions": {
    "person": {"anyOf": [S(), O({"name": S(), "email": S(format="email"), "url": S(format="uri")}, ["name"])]},
    "deps": {"type": "object", "additionalProperties": S()}}, "type": "object", "properties": {
    "name": S(maxLength=214, minLength=1, pattern="^(?:@[a-z0-9-*~][a-z0-9-*._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"),
    "version": S(), "description": S(), "keywords": A(S()), "license": S(),
    "author": {"$ref": "#/definitions/person"}, "contributors": A({"$ref": "#/definitions/person"}),
    "main": S(), "type": E("commonjs", "module"), "bin": {"type": ["string", "object"], "additionalProperties": S()},
    "engines": O({"node": S(), "npm": S()}), "dependencies": {"$ref": "#/definitions/deps"},
    "devDependencies": {"$ref": "#/definitions/deps"}, "peerDependencies": {"$ref": "#/definitions/deps"},
    "exports": {"type": ["string", "object", "null"]}, "workspaces": {"anyOf": [A(S()), O({"packages": A(S())})]}},
    "required": ["name", "version"]},
     [{"name": "my-lib", "version": "1.0.0"},
      {"name": "@acme/cli", "version": "2.0.0-beta.1", "type": "module", "bin": {"acme": "./bin/acme.js"},
       "author": {"name": "Acme", "email": "dev@acme.example"}, "contributors": ["Jo <jo@x.example>"],
       "engines": {"node": ">=18"}, "exports": {".": {"import": "./index.js", "types": "./index.d.ts"}},
       "devDependencies": {"typescript": "^5.4.0"}, "workspaces": ["packages/*"]}],
     [{"name": "My-Lib", "version": "1.0.0"}, {"name": "x", "version": "1", "type": "esm"},
      {"name": "x", "version": "1", "dependencies": {"a": 1}}, {"name": "x", "version": "1", "author": {"email": "a@b.example"}}])
auto("tsconfig.json-like (compilerOptions, references, extends)", {"$schema": D7, "type": "object", "properties": {
    "extends": {"type": ["string", "array"], "items": S()}, "include": A(S()), "exclude": A(S()),
    "compilerOptions": O({"target": E("ES3", "ES5", "ES2015", "ES2016", "ES2017", "ES2018", "ES2019", "ES2020", "ES2021",
                                      "ES2022", "ESNext"),
                          "module": E("CommonJS", "AMD", "UMD", "ES2015", "ES2020", "ESNext", "Node16", "NodeNext", "None"),
                          "lib": A(S()), "strict": B(), "noEmit": B(), "declaration": B(), "outDir": S(), "rootDir": S(),
                          "baseUrl": S(), "paths": {"type": "object", "additionalProperties": A(S(), minItems=1)},
                          "jsx": E("preserve", "react", "react-jsx", "react-jsxdev", "react-native"),
                          "composite": B(), "incremental": B(), "sourceMap": B(), "declarationDir": S()},
                         dependencies={"declarationDir": ["declaration"]}),
    "references": A(O({"path": S(), "prepend": B()}, ["path"], False))}},
     [{"compilerOptions": {"target": "ES2022", "module": "NodeNext", "strict": True}},
      {"extends": ["@tsconfig/node20/tsconfig.json"], "include": ["src"], "references": [{"path": "../core"}],
       "compilerOptions": {"declaration": True, "declarationDir": "types", "paths": {"@/*": ["src/*"]}, "jsx": "react-jsx"}}],
     [{"compilerOptions": {"declarationDir": "types"}}, {"compilerOptions": {"target": "es2099"}},
      {"compilerOptions": {"paths": {"@/*": []}}}, {"references": [{"path": "a", "circular": True}]}])
auto("eslintrc-like (rule levels as enum or tuple)", {"$schema": D7, "definitions": {
    "level": {"oneOf": [E("off", "warn", "error"), I(minimum=0, maximum=2)]},
    "rule": {"oneOf": [{"$ref": "#/definitions/level"},
                       {"type": "array", "items": [{"$ref": "#/definitions/level"}], "minItems": 1}]}},
    "type": "object", "properties": {
        "root": B(), "extends": {"type": ["string", "array"], "items": S()},
        "env": {"type": "object", "additionalProperties": B()}, "parser": S(),
        "parserOptions": O({"ecmaVersion": {"anyOf": [I(minimum=3), {"const": "latest"}]},
                            "sourceType": E("script", "module", "commonjs")}),
        "rules": {"type": "object", "additionalProperties": {"$ref": "#/definitions/rule"}},
        "overrides": A(O({"files": {"type": ["string", "array"]}, "rules": {"type": "object"}}, ["files"]))},
    "additionalProperties": False},
     [{"root": True, "extends": "eslint:recommended"},
      {"env": {"browser": True, "es2022": True}, "parserOptions": {"ecmaVersion": "latest", "sourceType": "module"},
       "rules": {"semi": ["error", "always"], "no-console": "warn", "eqeqeq": 2},
       "overrides": [{"files": ["*.test.js"], "rules": {"no-unused-expressions": "off"}}]}],
     [{"rules": {"semi": "fatal"}}, {"rules": {"semi": 3}}, {"rules": {"semi": []}}, {"plugins": ["x"]}])
SERVICE = O({"image": S(), "build": {"oneOf": [S(), O({"context": S(), "dockerfile": S(), "args": STRMAP}, ["context"])]},
             "ports": A({"oneOf": [S(pattern="^([0-9.]+:)?[0-9]+(-[0-9]+)?(:[0-9]+(-[0-9]+)?)?(/(tcp|udp))?$"), I(minimum=1)]}),
             "environment": {"oneOf": [{"type": "object", "additionalProperties": {"type": ["string", "number", "boolean",
                                                                                            "null"]}},
                                       A(S(pattern="^[A-Za-z_][A-Za-z0-9_]*(=.*)?$"))]},
             "depends_on": {"oneOf": [A(S()), {"type": "object", "additionalProperties": O({
                 "condition": E("service_started", "service_healthy", "service_completed_successfully")}, ["condition"])}]},
             "restart": E("no", "always", "on-failure", "unless-stopped"), "volumes": A(S()),
             "healthcheck": O({"test": {"type": ["string", "array"]}, "interval": S(pattern="^[0-9]+(ms|s|m|h)$"),
                               "retries": I(minimum=0)})},
            extra=False, patternProperties={"^x-": {}})
auto("docker-compose-like (services, x- extensions)", O({
    "version": S(), "services": {"type": "object", "additionalProperties": SERVICE, "minProperties": 1},
    "volumes": {"type": "object", "additionalProperties": {"type": ["object", "null"]}},
    "networks": {"type": "object"}}, ["services"], False, patternProperties={"^x-": {}}),
     [{"services": {"web": {"image": "nginx", "ports": ["8080:80", 443]}}},
      {"version": "3.9", "x-common": {"anything": [1, {"a": None}]},
       "services": {"db": {"image": "postgres:16", "environment": {"POSTGRES_PASSWORD": "x", "PGPORT": 5432},
                           "healthcheck": {"test": ["CMD", "pg_isready"], "interval": "10s", "retries": 5}},
                    "app": {"build": {"context": "."}, "depends_on": {"db": {"condition": "service_healthy"}},
                            "environment": ["DEBUG=1", "TZ"], "restart": "unless-stopped", "x-note": "hi"}},
       "volumes": {"pgdata": None}}],
     [{"services": {}}, {"services": {"web": {"image": "n", "ports": ["eighty"]}}},
      {"services": {"web": {"image": "n", "restart": "sometimes"}}}, {"services": {"web": {"image": "n"}}, "secretz": {}}])
STEP = O({"name": S(), "id": S(), "uses": S(pattern="^[^@\\s]+@[^\\s]+$|^docker://|^\\./"), "run": S(),
          "with": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
          "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
          "if": {"type": ["string", "boolean"]}, "continue-on-error": B(), "timeout-minutes": N(minimum=0)},
         extra=False, oneOf=[{"required": ["uses"]}, {"required": ["run"]}])
auto("github actions workflow-like (jobs, steps, matrix)", O({
    "name": S(), "on": {"oneOf": [E("push", "pull_request", "workflow_dispatch", "release"),
                                  A(E("push", "pull_request", "workflow_dispatch", "release"), minItems=1),
                                  {"type": "object"}]},
    "permissions": {"oneOf": [E("read-all", "write-all"), {"type": "object", "additionalProperties": E("read", "write", "none")}]},
    "jobs": {"type": "object", "propertyNames": {"pattern": "^[_a-zA-Z][a-zA-Z0-9_-]*$"}, "minProperties": 1,
             "additionalProperties": O({"runs-on": {"type": ["string", "array"]}, "needs": {"type": ["string", "array"]},
                                        "strategy": O({"matrix": {"type": "object"}, "fail-fast": B(),
                                                       "max-parallel": I(minimum=1)}),
                                        "steps": A(STEP, minItems=1), "timeout-minutes": I(minimum=1, maximum=360)},
                                       ["runs-on"])}}, ["on", "jobs"]),
     [{"on": "push", "jobs": {"test": {"runs-on": "ubuntu-latest", "steps": [{"uses": "actions/checkout@v4"},
                                                                           {"run": "make test"}]}}},
      {"name": "CI", "on": {"push": {"branches": ["main"]}}, "permissions": {"contents": "read"},
       "jobs": {"build": {"runs-on": ["self-hosted", "linux"], "strategy": {"matrix": {"py": ["3.10", "3.12"]}},
                          "steps": [{"name": "setup", "uses": "actions/setup-python@v5", "with": {"python-version": 3.12}},
                                    {"run": "pytest", "env": {"CI": True}, "if": "success()"}]},
                "deploy": {"runs-on": "ubuntu-latest", "needs": "build", "timeout-minutes": 10}}}],
     [{"on": "push", "jobs": {}}, {"on": "push", "jobs": {"1bad": {"runs-on": "x"}}},
      {"on": "push", "jobs": {"t": {"runs-on": "x", "steps": [{"uses": "actions/checkout@v4", "run": "ls"}]}}},
      {"on": "cron", "jobs": {"t": {"runs-on": "x"}}}])
auto("prettierrc-like", O({"printWidth": I(minimum=1), "tabWidth": I(minimum=0), "useTabs": B(), "semi": B(),
                           "singleQuote": B(), "trailingComma": E("all", "es5", "none"), "endOfLine": E("lf", "crlf", "cr", "auto"),
                           "overrides": A(O({"files": {"type": ["string", "array"]}, "options": {"type": "object"}},
                                            ["files"]))}, extra=False),
     [{}, {"printWidth": 100, "semi": False, "trailingComma": "es5", "overrides": [{"files": "*.md", "options": {"proseWrap": "always"}}]}],
     [{"trailingComma": "some"}, {"tabWidth": -2}, {"quoteProps": "as-needed"}])
auto("renovate-like (packageRules, schedule)", O({
    "extends": A(S()), "schedule": A(S()), "timezone": S(), "automerge": B(), "prConcurrentLimit": I(minimum=0),
    "packageRules": A(O({"matchPackageNames": A(S()), "matchUpdateTypes": A(E("major", "minor", "patch", "pin", "digest"),
                                                                            uniqueItems=True),
                         "groupName": S(), "automerge": B(), "enabled": B()}, minProperties=1)),
    "labels": A(S(), maxItems=10)}),
     [{"extends": ["config:recommended"]},
      {"schedule": ["before 5am on monday"], "packageRules": [{"matchUpdateTypes": ["minor", "patch"], "automerge": True},
                                                             {"matchPackageNames": ["react"], "groupName": "react"}]}],
     [{"packageRules": [{}]}, {"packageRules": [{"matchUpdateTypes": ["patch", "patch"]}]}, {"prConcurrentLimit": -1}])
auto("dependabot.yml-like", O({"version": {"const": 2}, "updates": A(O({
    "package-ecosystem": E("npm", "pip", "docker", "github-actions", "gomod", "cargo", "maven", "gradle", "bundler", "composer",
                           "nuget", "terraform"),
    "directory": S(pattern="^/"), "schedule": O({"interval": E("daily", "weekly", "monthly"), "day": E(
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"), "time": S(pattern="^[0-2][0-9]:[0-5][0-9]$")},
        ["interval"]),
    "open-pull-requests-limit": I(minimum=0, maximum=10)}, ["package-ecosystem", "directory", "schedule"]), minItems=1)},
    ["version", "updates"]),
     [{"version": 2, "updates": [{"package-ecosystem": "pip", "directory": "/", "schedule": {"interval": "weekly"}}]},
      {"version": 2, "updates": [{"package-ecosystem": "docker", "directory": "/app", "open-pull-requests-limit": 0,
                                  "schedule": {"interval": "weekly", "day": "friday", "time": "04:30"}}]}],
     [{"version": 1, "updates": [{"package-ecosystem": "pip", "directory": "/", "schedule": {"interval": "weekly"}}]},
      {"version": 2, "updates": [{"package-ecosystem": "pip", "directory": "app", "schedule": {"interval": "weekly"}}]},
      {"version": 2, "updates": [{"package-ecosystem": "pip", "directory": "/", "schedule": {"interval": "hourly"}}]}])
auto("composer.json-like (require map with patternProperties)", O({
    "name": S(pattern="^[a-z0-9]([_.-]?[a-z0-9]+)*/[a-z0-9](([_.]?|-{0,2})[a-z0-9]+)*$"),
    "type": S(), "license": {"type": ["string", "array"]},
    "require": {"type": "object", "patternProperties": {"^php$": S(pattern="^[<>=~^ .0-9|*]+$"), "^ext-": S(),
                                                        "^[a-z0-9-]+/[a-z0-9._-]+$": S()}, "additionalProperties": False},
    "autoload": O({"psr-4": {"type": "object", "additionalProperties": {"type": ["string", "array"]}}}),
    "minimum-stability": E("dev", "alpha", "beta", "RC", "stable")}, ["name"]),
     [{"name": "acme/http-client"}, {"name": "vendor/pkg", "require": {"php": ">=8.1", "ext-json": "*", "guzzlehttp/guzzle": "^7.0"},
                                     "autoload": {"psr-4": {"Acme\\\\": "src/"}}, "minimum-stability": "stable"}],
     [{"name": "NoSlash"}, {"name": "a/b", "require": {"Guzzle": "^7"}}, {"name": "a/b", "require": {"php": "latest"}}])
auto("Cargo.toml-like (features, dependency table or string)", O({
    "package": O({"name": S(pattern="^[a-zA-Z][a-zA-Z0-9_-]*$"), "version": S(pattern="^[0-9]+\\.[0-9]+\\.[0-9]+"),
                  "edition": E("2015", "2018", "2021", "2024"), "authors": A(S()), "publish": {"type": ["boolean", "array"]}},
                 ["name"]),
    "dependencies": {"type": "object", "additionalProperties": {"anyOf": [S(), O({
        "version": S(), "path": S(), "git": S(format="uri"), "features": A(S()), "optional": B(),
        "default-features": B()}, minProperties=1)]}},
    "features": {"type": "object", "additionalProperties": A(S())}}, ["package"]),
     [{"package": {"name": "hello", "version": "0.1.0", "edition": "2021"}},
      {"package": {"name": "srv"}, "dependencies": {"serde": {"version": "1", "features": ["derive"]}, "tokio": "1.37"},
       "features": {"default": ["std"], "std": []}}],
     [{"package": {"name": "1st"}}, {"package": {"name": "a", "edition": "2020"}}, {"package": {"name": "a"}, "dependencies": {"x": {}}}])
auto("pyproject-like (PEP 621 project table)", O({"project": O({
    "name": S(pattern="^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", **{"$comment": "PEP 508 names, case-insensitive"}),
    "version": S(), "requires-python": S(), "dependencies": A(S()),
    "optional-dependencies": {"type": "object", "additionalProperties": A(S())},
    "authors": A(O({"name": S(), "email": S(format="email")}, minProperties=1)),
    "scripts": {"type": "object", "additionalProperties": S(pattern="^[A-Za-z_][\\w.]*:[A-Za-z_][\\w.]*$")},
    "dynamic": A(E("version", "description", "readme", "dependencies"), uniqueItems=True)}, ["name"]),
    "build-system": O({"requires": A(S()), "build-backend": S()}, ["requires"]), "tool": {"type": "object"}}),
     [{"project": {"name": "SPRIG", "version": "0.1"}},
      {"project": {"name": "A1", "dynamic": ["version"], "scripts": {"cli": "pkg.cli:main"},
                   "authors": [{"email": "x@y.example"}], "optional-dependencies": {"dev": ["pytest"]}},
       "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"}, "tool": {"ruff": {"line-length": 110}}}],
     [{"project": {"name": "-bad"}}, {"project": {"name": "A", "scripts": {"cli": "main"}}},
      {"project": {"name": "A", "dynamic": ["version", "version"]}}, {"build-system": {}}])
auto("jest config-like (coverageThreshold, testEnvironment)", O({
    "testEnvironment": E("node", "jsdom"), "roots": A(S()), "testMatch": A(S()), "transform": {"type": "object"},
    "moduleNameMapper": {"type": "object", "additionalProperties": {"type": ["string", "array"]}},
    "collectCoverage": B(), "coverageThreshold": O({"global": O({k: N(minimum=0, maximum=100) for k in
                                                                 ("branches", "functions", "lines", "statements")}, extra=False)}),
    "maxWorkers": {"oneOf": [I(minimum=1), S(pattern="^[0-9]+%$")]}}, extra=False),
     [{"testEnvironment": "jsdom"}, {"collectCoverage": True, "coverageThreshold": {"global": {"lines": 80, "branches": 70.5}},
                                     "maxWorkers": "50%", "moduleNameMapper": {"^@/(.*)$": "<rootDir>/src/$1"}}],
     [{"coverageThreshold": {"global": {"lines": 101}}}, {"maxWorkers": 0}, {"testEnvironment": "browser"}])
auto("VS Code launch.json-like (configurations by type)", O({"version": {"const": "0.2.0"}, "configurations": A(O({
    "type": S(), "request": E("launch", "attach"), "name": S(minLength=1), "program": S(), "args": A(S()), "port": I(minimum=1,
                                                                                                                     maximum=65535),
    "env": {"type": "object", "additionalProperties": {"type": ["string", "null"]}}, "console": E("internalConsole",
                                                                                                   "integratedTerminal",
                                                                                                   "externalTerminal")},
    ["type", "request", "name"], **{"if": {"properties": {"request": {"const": "attach"}}}, "then": {"required": ["port"]}}))},
    ["configurations"]),
     [{"configurations": []}, {"version": "0.2.0", "configurations": [
         {"type": "python", "request": "launch", "name": "Run", "program": "${file}", "console": "integratedTerminal"},
         {"type": "node", "request": "attach", "name": "Attach", "port": 9229, "env": {"A": None}}]}],
     [{"configurations": [{"type": "node", "request": "attach", "name": "A"}]},
      {"configurations": [{"type": "node", "request": "debug", "name": "A"}]}, {"version": "1.0", "configurations": []}])
auto("devcontainer.json-like", O({"name": S(), "image": S(), "build": O({"dockerfile": S(), "context": S()}),
                                  "features": {"type": "object", "additionalProperties": {"type": ["object", "string", "boolean"]}},
                                  "forwardPorts": A({"type": ["integer", "string"]}, maxItems=10),
                                  "postCreateCommand": {"type": ["string", "array"]}, "remoteUser": S(),
                                  "customizations": {"type": "object"}},
                                 anyOf=[{"required": ["image"]}, {"required": ["build"]}]),
     [{"image": "mcr.microsoft.com/devcontainers/python:3.12"},
      {"name": "dev", "build": {"dockerfile": "Dockerfile"}, "features": {"ghcr.io/devcontainers/features/node:1": {}},
       "forwardPorts": [3000, "db:5432"], "customizations": {"vscode": {"extensions": ["ms-python.python"]}}}],
     [{"name": "no image"}, {"image": "x", "forwardPorts": [True]}, {"image": "x", "postCreateCommand": 5}])
auto("terraform variables.json-like (validation by type)", O({"variable": {"type": "object", "additionalProperties": O({
    "type": S(pattern="^(string|number|bool|list\\(.+\\)|map\\(.+\\)|object\\(.*\\)|any)$"), "default": {},
    "description": S(), "sensitive": B(), "nullable": B()})}}, ["variable"]),
     [{"variable": {}}, {"variable": {"region": {"type": "string", "default": "eu-west-1"},
                                      "tags": {"type": "map(string)", "default": {"team": "core"}, "sensitive": False}}}],
     [{"variable": {"x": {"type": "str"}}}, {"variable": {"x": {"sensitive": "no"}}}, {}])
auto("serverless.yml-like (functions, events oneOf)", O({
    "service": S(pattern="^[a-zA-Z][0-9a-zA-Z-]+$"), "provider": O({"name": E("aws", "azure", "google"), "runtime": S(),
                                                                   "region": S(), "memorySize": I(minimum=128, maximum=10240,
                                                                                                  multipleOf=64)}, ["name"]),
    "functions": {"type": "object", "additionalProperties": O({"handler": S(), "timeout": I(minimum=1, maximum=900),
                                                               "events": A({"oneOf": [O({"http": O({"path": S(), "method": S()},
                                                                                                   ["path", "method"])},
                                                                                        ["http"], False),
                                                                                      O({"schedule": S()}, ["schedule"], False),
                                                                                      O({"sqs": {"type": ["string", "object"]}},
                                                                                        ["sqs"], False)]})},
                                                              ["handler"])}}, ["service", "provider"]),
     [{"service": "api", "provider": {"name": "aws"}},
      {"service": "orders-api", "provider": {"name": "aws", "runtime": "python3.12", "memorySize": 512},
       "functions": {"create": {"handler": "h.create", "timeout": 30, "events": [{"http": {"path": "/o", "method": "post"}},
                                                                                 {"schedule": "rate(5 minutes)"}]}}}],
     [{"service": "api", "provider": {"name": "aws", "memorySize": 500}},
      {"service": "api", "provider": {"name": "aws"}, "functions": {"f": {"handler": "h", "events": [{"http": {"path": "/"}}]}}},
      {"service": "api", "provider": {"name": "aws"}, "functions": {"f": {"handler": "h", "events": [{"sns": "t"}]}}}])
auto("nginx-like upstream config (ipv4/hostname servers, weights)", O({"upstreams": A(O({
    "name": S(pattern="^[a-z_]+$"), "strategy": E("round_robin", "least_conn", "ip_hash"),
    "servers": A(O({"host": {"anyOf": [S(format="ipv4"), S(format="hostname")]}, "port": I(minimum=1, maximum=65535),
                    "weight": I(minimum=1, maximum=100), "backup": B()}, ["host", "port"], False), minItems=1, maxItems=10)},
    ["name", "servers"]))}, ["upstreams"]),
     [{"upstreams": []}, {"upstreams": [{"name": "app", "strategy": "least_conn", "servers": [
         {"host": "10.0.0.5", "port": 8080, "weight": 3}, {"host": "app-2.internal", "port": 8080, "backup": True}]}]}],
     [{"upstreams": [{"name": "app", "servers": []}]}, {"upstreams": [{"name": "app", "servers": [{"host": "10.0.0.5"}]}]},
      {"upstreams": [{"name": "app", "servers": [{"host": "a b", "port": 1}]}]}])
auto("openapi document skeleton (paths patternProperties)", O({
    "openapi": S(pattern="^3\\.[01]\\.[0-9]+$"), "info": O({"title": S(), "version": S()}, ["title", "version"]),
    "paths": {"type": "object", "patternProperties": {"^/": {"type": "object", "propertyNames": {"enum": [
        "get", "put", "post", "delete", "options", "head", "patch", "trace", "parameters", "summary", "description"]}},
        "^x-": {}}, "additionalProperties": False}}, ["openapi", "info", "paths"]),
     [{"openapi": "3.1.0", "info": {"title": "Pets", "version": "1"}, "paths": {}},
      {"openapi": "3.0.3", "info": {"title": "T", "version": "2"}, "paths": {"/pets": {"get": {"responses": {"200": {}}}},
                                                                           "x-internal": True}}],
     [{"openapi": "2.0", "info": {"title": "T", "version": "1"}, "paths": {}},
      {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {"pets": {}}},
      {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {"/pets": {"fetch": {}}}}])


# ---- Snowplow-like self-describing events (vendor `self`, iglu $schema, int formats) ----------------------
IGLU = "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#"


def event(vendor, name, props, required, valid, invalid, version="1-0-0"):
    schema = {"$schema": IGLU, "self": {"vendor": vendor, "name": name, "format": "jsonschema", "version": version},
              "description": f"{name} event", **O(props, required, False)}
    schema.pop("$schema")  # why: an iglu meta-schema URI is not a draft sprig knows; real pipelines strip it
    auto(f"snowplow-like: {vendor}/{name}", schema, valid, invalid)


event("com.acme", "add_to_cart", {"sku": S(maxLength=64), "quantity": I(minimum=1, maximum=32767), "unitPrice": N(minimum=0),
                                  "currency": S(minLength=3, maxLength=3)}, ["sku", "quantity"],
      [{"sku": "SKU-1", "quantity": 1}, {"sku": "A", "quantity": 3, "unitPrice": 9.99, "currency": "EUR"}],
      [{"sku": "A", "quantity": 0}, {"sku": "A", "quantity": 1, "currency": "EURO"}])
event("com.acme", "page_ping", {"min_x": I(minimum=0, maximum=2147483647), "max_x": I(minimum=0, maximum=2147483647),
                                "min_y": I(minimum=0), "max_y": I(minimum=0)}, ["min_x", "max_x", "min_y", "max_y"],
      [{"min_x": 0, "max_x": 1280, "min_y": 0, "max_y": 4000}, {"min_x": 5, "max_x": 5, "min_y": 9, "max_y": 9}],
      [{"min_x": 0, "max_x": 2147483648, "min_y": 0, "max_y": 0}, {"min_x": -1, "max_x": 0, "min_y": 0, "max_y": 0}])
event("io.example", "link_click", {"targetUrl": S(format="uri", minLength=1), "elementId": S(), "elementClasses": A(S()),
                                   "elementTarget": S(), "elementContent": {"type": ["string", "null"], "maxLength": 4096}},
      ["targetUrl"], [{"targetUrl": "https://example.com/a?b=c"}, {"targetUrl": "mailto:x@y.example", "elementClasses": ["btn"],
                                                                  "elementContent": None}],
      [{"targetUrl": "example dot com"}, {"targetUrl": "https://e.example", "elementClasses": "btn"}])
event("io.example", "search", {"terms": A(S(), minItems=1), "filters": {"type": "object", "additionalProperties": {
    "type": ["string", "boolean"]}}, "totalResults": I(minimum=0, maximum=2147483647), "pageResults": I(minimum=0)},
      ["terms"], [{"terms": ["red", "shoes"]}, {"terms": ["x"], "filters": {"size": "9", "inStock": True}, "totalResults": 10}],
      [{"terms": []}, {"terms": ["x"], "filters": {"price": 10}}])
event("com.acme.mobile", "screen_view", {"name": S(maxLength=255), "id": S(format="uuid"), "type": S(),
                                         "previousName": S(), "transitionType": E("push", "pop", "modal", None)},
      ["name", "id"], [{"name": "Home", "id": "9b2a1f9e-1c1a-4c5e-8f3a-0b1c2d3e4f50"},
                       {"name": "Cart", "id": "9b2a1f9e-1c1a-4c5e-8f3a-0b1c2d3e4f51", "transitionType": None}],
      [{"name": "Home", "id": "not-a-uuid"}, {"name": "Home", "id": "9b2a1f9e-1c1a-4c5e-8f3a-0b1c2d3e4f50", "transitionType": "fade"}])
event("com.acme", "video_progress", {"videoId": S(), "percent": I(minimum=0, maximum=100, multipleOf=25),
                                     "positionS": N(minimum=0), "muted": B()}, ["videoId", "percent"],
      [{"videoId": "v1", "percent": 25}, {"videoId": "v2", "percent": 100, "positionS": 301.5, "muted": True}],
      [{"videoId": "v1", "percent": 30}, {"videoId": "v1", "percent": 125}])
event("com.acme", "experiment_exposure", {"experiment": S(pattern="^[a-z0-9_]+$"), "variant": E("control", "a", "b", "c"),
                                          "bucket": I(minimum=0, maximum=999)}, ["experiment", "variant"],
      [{"experiment": "new_checkout", "variant": "a"}, {"experiment": "x1", "variant": "control", "bucket": 999}],
      [{"experiment": "New Checkout", "variant": "a"}, {"experiment": "x", "variant": "d"}])
event("com.acme", "app_error", {"message": S(maxLength=2048), "stackTrace": {"type": ["string", "null"]},
                                "severity": E("debug", "info", "warn", "error", "fatal"), "lineNumber": I(minimum=0),
                                "threadId": I(format="int32")}, ["message", "severity"],
      [{"message": "boom", "severity": "error"}, {"message": "NPE", "severity": "fatal", "stackTrace": None, "lineNumber": 42}],
      [{"message": "x", "severity": "critical"}, {"message": "x", "severity": "warn", "threadId": 4294967296}])
event("com.acme", "transaction", {"orderId": S(), "revenue": N(minimum=0), "tax": N(minimum=0), "shipping": N(minimum=0),
                                  "items": A(O({"sku": S(), "price": N(minimum=0), "quantity": I(minimum=1)},
                                               ["sku", "price", "quantity"], False), maxItems=10)},
      ["orderId", "revenue"], [{"orderId": "o1", "revenue": 0}, {"orderId": "o2", "revenue": 120.5, "tax": 20.08, "items": [
          {"sku": "A", "price": 60.25, "quantity": 2}]}],
      [{"orderId": "o", "revenue": 1, "items": [{"sku": "A", "price": 1}]}, {"orderId": "o", "revenue": -0.5}])
event("com.acme", "consent_granted", {"basisForProcessing": E("consent", "contract", "legal_obligation", "vital_interests",
                                                              "public_task", "legitimate_interests"),
                                      "documentIds": A(S(), minItems=1), "expiry": S(format="date-time"),
                                      "gdprApplies": B()}, ["basisForProcessing", "documentIds"],
      [{"basisForProcessing": "consent", "documentIds": ["d1"]},
       {"basisForProcessing": "contract", "documentIds": ["a", "b"], "expiry": "2030-01-01T00:00:00Z", "gdprApplies": True}],
      [{"basisForProcessing": "because", "documentIds": ["d"]}, {"basisForProcessing": "consent", "documentIds": ["d"],
                                                                "expiry": "2030-01-01"}])


# ---- vendor keywords and the keywords issue 15 saw refused -------------------------------------------------
auto("vendor: _format and _uniqueItems (underscored keywords are annotations)", O({
    "ts": S(_format="date-time"), "tags": A(S(), _uniqueItems=True), "count": I(minimum=0)}, ["ts"]),
     [{"ts": "not a date, _format is no format"}, {"ts": "x", "tags": ["a", "a"], "count": 1}],
     [{"ts": 1}, {"ts": "x", "count": -1}])
auto("vendor: esri layer definition (esriDocumentation, links, version)", O({
    "currentVersion": N(minimum=10), "id": I(minimum=0), "name": S(), "type": E("Feature Layer", "Table", "Group Layer"),
    "geometryType": E("esriGeometryPoint", "esriGeometryMultipoint", "esriGeometryPolyline", "esriGeometryPolygon",
                      "esriGeometryEnvelope"),
    "extent": O({"xmin": N(), "ymin": N(), "xmax": N(), "ymax": N(), "spatialReference": O({"wkid": I(), "latestWkid": I()})},
                ["xmin", "ymin", "xmax", "ymax"]),
    "fields": A(O({"name": S(), "type": E("esriFieldTypeOID", "esriFieldTypeString", "esriFieldTypeInteger",
                                          "esriFieldTypeDouble", "esriFieldTypeDate"), "alias": S(),
                   "length": I(minimum=1)}, ["name", "type"]))}, ["id", "name", "type"],
    esriDocumentation={"pageType": "layer", "url": "https://developers.example.com/layer"},
    links=[{"rel": "describedby", "href": "https://example.com/layer.json"}], version="10.9"),
     [{"id": 0, "name": "Parcels", "type": "Feature Layer"},
      {"currentVersion": 11.1, "id": 3, "name": "Roads", "type": "Feature Layer", "geometryType": "esriGeometryPolyline",
       "extent": {"xmin": -180, "ymin": -90, "xmax": 180, "ymax": 90, "spatialReference": {"wkid": 4326}},
       "fields": [{"name": "OBJECTID", "type": "esriFieldTypeOID"}, {"name": "NAME", "type": "esriFieldTypeString", "length": 50}]}],
     [{"id": 0, "name": "P", "type": "Raster Layer"}, {"id": 0, "name": "P", "type": "Table", "fields": [{"name": "x",
                                                                                                           "type": "text"}]},
      {"id": 0, "name": "P", "type": "Table", "extent": {"xmin": 0}}])
auto("vendor: hyper-schema-like links and readonly (lowercase)", O({
    "id": I(minimum=1, readonly=True), "title": S(minLength=1), "done": B()}, ["title"],
    links=[{"rel": "self", "href": "/todos/{id}", "method": "GET"}, {"rel": "edit", "href": "/todos/{id}", "method": "PUT",
                                                                    "schema": {"$ref": "#"}}]),
     [{"title": "write tests"}, {"id": 3, "title": "x", "done": True}], [{"title": ""}, {"id": 0, "title": "x"}])
auto("vendor: `name` and `version` keywords on a form schema", {"name": "contact_form", "version": 3, "type": "object",
                                                                "properties": {"name": S(minLength=1, name="Full name"),
                                                                               "email": S(format="email", name="E-mail"),
                                                                               "message": S(maxLength=1000)},
                                                                "required": ["name", "email"]},
     [{"name": "Ada", "email": "ada@example.com"}, {"name": "B", "email": "b@example.org", "message": "hello"}],
     [{"name": "", "email": "a@example.com"}, {"name": "Ada", "email": "ada at example.com"}])
auto("vendor: AsyncAPI-like message with x-parser and example", O({
    "headers": O({"correlationId": S(format="uuid"), "retries": I(minimum=0, maximum=5)}, ["correlationId"]),
    "payload": O({"lumens": I(minimum=0, example=300), "sentAt": S(format="date-time")}, ["lumens"])},
    ["payload"], **{"x-parser-message-name": "lightMeasured", "example": {"payload": {"lumens": 5}}}),
     [{"payload": {"lumens": 300}}, {"headers": {"correlationId": "123e4567-e89b-12d3-a456-426614174000", "retries": 1},
                                     "payload": {"lumens": 0, "sentAt": "2024-04-01T12:00:00Z"}}],
     [{"payload": {"lumens": -5}}, {"headers": {"correlationId": "abc"}, "payload": {"lumens": 1}}])
auto("vendor: JSON Forms-like (ui hints beside constraints)", O({
    "firstName": S(minLength=3, **{"x-ui": {"widget": "text"}}), "age": I(minimum=18, maximum=120, ui={"widget": "slider"}),
    "vegetarian": B(), "birthDate": S(format="date"), "nationality": E("DE", "IT", "JP", "US", "Other", enumNames=[
        "Germany", "Italy", "Japan", "USA", "Other"])}, ["firstName"]),
     [{"firstName": "Max"}, {"firstName": "Maria", "age": 35, "vegetarian": True, "birthDate": "1989-06-01", "nationality": "IT"}],
     [{"firstName": "Mo"}, {"firstName": "Max", "age": 17}, {"firstName": "Max", "birthDate": "1989-13-01"}])


# ---- draft-4 documents (id, definitions, boolean exclusive bounds) -----------------------------------------
auto("draft-4: product with boolean exclusiveMinimum and id", {"$schema": D4, "id": "http://example.com/product.json#",
                                                                "title": "Product", "type": "object",
                                                                "properties": {"id": I(), "name": S(),
                                                                               "price": N(minimum=0, exclusiveMinimum=True),
                                                                               "tags": A(S(), minItems=1),
                                                                               "dimensions": O({"length": N(), "width": N(),
                                                                                                "height": N()},
                                                                                               ["length", "width", "height"])},
                                                                "required": ["id", "name", "price"]},
     [{"id": 1, "name": "A green door", "price": 12.5, "tags": ["home"]},
      {"id": 2, "name": "x", "price": 0.01, "dimensions": {"length": 7, "width": 12, "height": 9.5}}],
     [{"id": 1, "name": "x", "price": 0}, {"id": 1, "name": "x", "price": 1, "tags": []},
      {"id": 1, "name": "x", "price": 1, "dimensions": {"length": 1}}])
auto("draft-4: fstab-like (definitions, oneOf storage kinds, patternProperties)", {
    "$schema": D4, "id": "http://example.com/fstab#", "type": "object", "required": ["/"],
    "properties": {"/": {"$ref": "#/definitions/mntent"}},
    "patternProperties": {"^(/[^/]+)+$": {"$ref": "#/definitions/mntent"}}, "additionalProperties": False,
    "definitions": {"mntent": {"type": "object", "properties": {
        "storage": {"oneOf": [O({"type": {"enum": ["disk"]}, "device": S(pattern="^/dev/[^/]+(/[^/]+)*$")},
                                ["type", "device"], False),
                              O({"type": {"enum": ["nfs"]}, "remotePath": S(pattern="^(/[^/]+)+$"),
                                 "server": {"anyOf": [S(format="hostname"), S(format="ipv4")]}},
                                ["type", "server", "remotePath"], False),
                              O({"type": {"enum": ["tmpfs"]}, "sizeInMB": I(minimum=16, maximum=512)},
                                ["type", "sizeInMB"], False)]},
        "fstype": E("ext3", "ext4", "btrfs"), "options": A(S(), minItems=1), "readonly": B()},
        "required": ["storage"], "additionalProperties": False}}},
     [{"/": {"storage": {"type": "disk", "device": "/dev/sda1"}, "fstype": "btrfs", "readonly": True}},
      {"/": {"storage": {"type": "disk", "device": "/dev/sda1"}},
       "/var/www": {"storage": {"type": "nfs", "server": "my.nfs.server", "remotePath": "/exports/mypath"}},
       "/tmp": {"storage": {"type": "tmpfs", "sizeInMB": 64}, "options": ["nosuid"]}}],
     [{"/tmp": {"storage": {"type": "tmpfs", "sizeInMB": 64}}},
      {"/": {"storage": {"type": "tmpfs", "sizeInMB": 1024}}},
      {"/": {"storage": {"type": "disk", "device": "/dev/sda1"}}, "tmp": {"storage": {"type": "tmpfs", "sizeInMB": 64}}},
      {"/": {"storage": {"type": "nfs", "server": "x", "remotePath": "/a", "device": "/dev/x"}}}])
auto("draft-4: swagger 2.0 definitions (x-nullable, dependencies)", {
    "$schema": D4, "id": "http://example.com/swagger-order", "type": "object", "definitions": {
        "Address": O({"line1": S(), "city": S(), "postcode": S(), "country": S(pattern="^[A-Z]{2}$")}, ["line1", "city", "country"])},
    "properties": {"shipping": {"$ref": "#/definitions/Address"}, "billing": {"$ref": "#/definitions/Address",
                                                                              "x-nullable": True},
                   "gift": B(), "giftMessage": S(maxLength=200)},
    "dependencies": {"giftMessage": ["gift"], "billing": {"required": ["shipping"]}}},
     [{"shipping": {"line1": "1 Way", "city": "Oslo", "country": "NO"}},
      {"shipping": {"line1": "a", "city": "b", "country": "SE"}, "billing": {"line1": "c", "city": "d", "country": "SE"},
       "gift": True, "giftMessage": "Happy birthday"}],
     [{"giftMessage": "hi"}, {"billing": {"line1": "c", "city": "d", "country": "SE"}},
      {"shipping": {"line1": "a", "city": "b", "country": "sweden"}}])
auto("draft-4: enum-heavy config with id-based $ref", {"$schema": D4, "id": "http://example.com/root.json", "definitions": {
    "level": {"id": "#level", "enum": ["trace", "debug", "info", "warn", "error", "fatal", "off"]}},
    "type": "object", "properties": {"root": {"$ref": "#level"}, "loggers": {"type": "object",
                                                                             "additionalProperties": {"$ref": "#level"}},
                                     "appenders": A(E("console", "file", "syslog"), uniqueItems=True)}},
     [{"root": "info"}, {"root": "warn", "loggers": {"com.acme.db": "debug"}, "appenders": ["console", "file"]}],
     [{"root": "verbose"}, {"loggers": {"x": "loud"}}, {"appenders": ["file", "file"]}])
auto("draft-4: JSON Feed-like (id, author object, items)", {"$schema": D4, "id": "http://example.com/feed.json",
                                                           "type": "object", "required": ["version", "title", "items"],
                                                           "properties": {"version": S(pattern="^https://jsonfeed.org/version/1(\\.1)?$"),
                                                                          "title": S(), "home_page_url": S(format="uri"),
                                                                          "items": A(O({"id": S(), "url": S(format="uri"),
                                                                                        "content_html": S(), "content_text": S(),
                                                                                        "date_published": S(format="date-time"),
                                                                                        "tags": A(S())}, ["id"],
                                                                                       anyOf=[{"required": ["content_html"]},
                                                                                              {"required": ["content_text"]}]))}},
     [{"version": "https://jsonfeed.org/version/1.1", "title": "Blog", "items": []},
      {"version": "https://jsonfeed.org/version/1", "title": "B", "items": [
          {"id": "1", "content_text": "hi", "date_published": "2024-01-01T00:00:00Z", "tags": ["a"]}]}],
     [{"version": "1.1", "title": "B", "items": []}, {"version": "https://jsonfeed.org/version/1", "title": "B",
                                                      "items": [{"id": "1"}]}])
auto("draft-6: const and propertyNames (Web App Manifest-like)", {"$schema": "http://json-schema.org/draft-06/schema#",
                                                                  "type": "object", "properties": {
    "name": S(), "short_name": S(maxLength=12), "start_url": S(), "display": E("fullscreen", "standalone", "minimal-ui", "browser"),
    "theme_color": S(pattern="^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"),
    "icons": A(O({"src": S(), "sizes": S(pattern="^([0-9]+x[0-9]+( |$))+|any$"), "type": S(),
                  "purpose": S(pattern="^(monochrome|maskable|any)( (monochrome|maskable|any))*$")}, ["src"]))},
    "propertyNames": {"not": {"const": "manifest_version"}}},
     [{"name": "App", "display": "standalone"},
      {"name": "A", "short_name": "A", "theme_color": "#fff", "icons": [{"src": "/i.png", "sizes": "192x192 512x512",
                                                                         "purpose": "any maskable"}]}],
     [{"manifest_version": 2}, {"short_name": "way too long name"}, {"theme_color": "blue"}])


# ---- recursive trees -------------------------------------------------------------------------------------
auto("recursive: comment thread (replies, $defs)", {"$defs": {"comment": O({
    "id": I(minimum=1), "author": S(minLength=1), "body": S(maxLength=10000), "score": I(),
    "replies": A({"$ref": "#/$defs/comment"}, maxItems=50)}, ["id", "author", "body"], False)},
    "$ref": "#/$defs/comment"},
     [{"id": 1, "author": "a", "body": "top"},
      {"id": 1, "author": "a", "body": "x", "score": -2, "replies": [{"id": 2, "author": "b", "body": "y", "replies": [
          {"id": 3, "author": "c", "body": "z", "replies": [{"id": 4, "author": "d", "body": "deep"}]}]}]}],
     [{"id": 1, "author": "a", "body": "x", "replies": [{"id": 2, "author": "b", "body": "y", "replies": [{"id": 0,
                                                                                                         "author": "c",
                                                                                                         "body": "z"}]}]},
      {"id": 1, "author": "a", "body": "x", "replies": [{"id": 2, "body": "no author"}]}])
auto("recursive: file system (oneOf file | directory)", {"$defs": {"entry": {"oneOf": [
    O({"type": {"const": "file"}, "name": S(pattern="^[^/]+$"), "size": I(minimum=0), "mode": S(pattern="^[0-7]{3,4}$")},
      ["type", "name", "size"], False),
    O({"type": {"const": "dir"}, "name": S(pattern="^[^/]+$"), "children": A({"$ref": "#/$defs/entry"})},
      ["type", "name", "children"], False)]}}, "$ref": "#/$defs/entry"},
     [{"type": "file", "name": "a.txt", "size": 3},
      {"type": "dir", "name": "src", "children": [{"type": "file", "name": "main.py", "size": 120, "mode": "0644"},
                                                  {"type": "dir", "name": "pkg", "children": [
                                                      {"type": "dir", "name": "sub", "children": []}]}]}],
     [{"type": "dir", "name": "a/b", "children": []}, {"type": "dir", "name": "x", "children": [{"type": "file", "name": "f"}]},
      {"type": "file", "name": "f", "size": 1, "children": []}])
auto("recursive: arithmetic AST (anyOf of node kinds)", {"$defs": {"expr": {"anyOf": [
    O({"kind": {"const": "num"}, "value": N()}, ["kind", "value"], False),
    O({"kind": {"const": "var"}, "name": S(pattern="^[a-z_][a-z0-9_]*$")}, ["kind", "name"], False),
    O({"kind": {"const": "bin"}, "op": E("+", "-", "*", "/", "^"), "left": {"$ref": "#/$defs/expr"},
       "right": {"$ref": "#/$defs/expr"}}, ["kind", "op", "left", "right"], False),
    O({"kind": {"const": "call"}, "fn": E("sin", "cos", "sqrt", "max"), "args": A({"$ref": "#/$defs/expr"}, minItems=1,
                                                                                  maxItems=4)},
      ["kind", "fn", "args"], False)]}}, "$ref": "#/$defs/expr"},
     [{"kind": "num", "value": 2.5},
      {"kind": "bin", "op": "+", "left": {"kind": "var", "name": "x"},
       "right": {"kind": "call", "fn": "max", "args": [{"kind": "num", "value": 1},
                                                       {"kind": "bin", "op": "*", "left": {"kind": "num", "value": 2},
                                                        "right": {"kind": "var", "name": "y_1"}}]}}],
     [{"kind": "bin", "op": "%", "left": {"kind": "num", "value": 1}, "right": {"kind": "num", "value": 2}},
      {"kind": "call", "fn": "sin", "args": []}, {"kind": "var", "name": "X"},
      {"kind": "bin", "op": "+", "left": {"kind": "num", "value": 1}}])
auto("recursive: boolean filter expression (and/or/not/leaf)", {"$schema": D7, "definitions": {"filter": {"oneOf": [
    O({"and": A({"$ref": "#/definitions/filter"}, minItems=2)}, ["and"], False),
    O({"or": A({"$ref": "#/definitions/filter"}, minItems=2)}, ["or"], False),
    O({"not": {"$ref": "#/definitions/filter"}}, ["not"], False),
    O({"field": S(), "op": E("eq", "ne", "lt", "gt", "in", "contains"), "value": {"type": ["string", "number", "boolean",
                                                                                          "array"]}},
      ["field", "op", "value"], False)]}}, "$ref": "#/definitions/filter"},
     [{"field": "status", "op": "eq", "value": "open"},
      {"and": [{"field": "age", "op": "gt", "value": 18}, {"not": {"or": [{"field": "c", "op": "in", "value": ["US", "CA"]},
                                                                          {"field": "vip", "op": "eq", "value": True}]}}]}],
     [{"and": [{"field": "a", "op": "eq", "value": 1}]}, {"not": {"field": "a", "op": "like", "value": "x"}},
      {"field": "a", "op": "eq", "value": None}])
auto("recursive: navigation menu (children, maxItems)", {"$defs": {"item": O({
    "label": S(minLength=1, maxLength=40), "href": S(pattern="^(/|https?://)"), "icon": S(),
    "children": A({"$ref": "#/$defs/item"}, maxItems=10)}, ["label"], False,
    anyOf=[{"required": ["href"]}, {"required": ["children"]}])}, "type": "array", "items": {"$ref": "#/$defs/item"}},
     [[], [{"label": "Home", "href": "/"}, {"label": "Docs", "children": [{"label": "API", "href": "/api"},
                                                                          {"label": "Ext", "href": "https://x.example"}]}]],
     [[{"label": "Orphan"}], [{"label": "", "href": "/"}], [{"label": "Rel", "href": "relative/path"}]])
auto("recursive: org chart (reports, draft-4 definitions)", {"$schema": D4, "definitions": {"person": O({
    "name": S(), "title": S(), "email": S(format="email"), "reports": A({"$ref": "#/definitions/person"})},
    ["name", "title"])}, "$ref": "#/definitions/person"},
     [{"name": "CEO", "title": "Chief"}, {"name": "A", "title": "CTO", "reports": [{"name": "B", "title": "Lead", "reports": [
         {"name": "C", "title": "Eng", "email": "c@example.com"}]}]}],
     [{"name": "A", "title": "T", "reports": [{"name": "B"}]}, {"name": "A", "title": "T", "email": "nope"}])
auto("recursive: category taxonomy (propertyNames slugs, nested objects)", {"$defs": {"node": {
    "type": "object", "propertyNames": {"pattern": "^[a-z0-9-]+$"}, "maxProperties": 20,
    "additionalProperties": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}}}, "$ref": "#/$defs/node"},
     [{}, {"electronics": {"phones": {"android": None, "ios": None}, "laptops": None}, "books": {}}],
     [{"Electronics": None}, {"a": {"b": {"C": None}}}, {"a": 1}])
auto("recursive: DOM-like element tree (text or element children)", {"$defs": {"el": O({
    "tag": S(pattern="^[a-z][a-z0-9-]*$"), "attrs": {"type": "object", "additionalProperties": S()},
    "children": A({"anyOf": [S(), {"$ref": "#/$defs/el"}]})}, ["tag"], False)}, "$ref": "#/$defs/el"},
     [{"tag": "br"}, {"tag": "div", "attrs": {"class": "card"}, "children": ["Hello ", {"tag": "b", "children": ["world"]},
                                                                             {"tag": "ul", "children": [{"tag": "li", "children": []}]}]}],
     [{"tag": "Div"}, {"tag": "p", "children": [1]}, {"tag": "p", "attrs": {"id": 5}}])
auto("recursive: JSON-like value type (Slack block kit subset)", {"$defs": {
    "text": O({"type": E("plain_text", "mrkdwn"), "text": S(maxLength=3000), "emoji": B()}, ["type", "text"], False),
    "block": {"oneOf": [O({"type": {"const": "section"}, "text": {"$ref": "#/$defs/text"},
                           "fields": A({"$ref": "#/$defs/text"}, maxItems=10)}, ["type"], False),
                        O({"type": {"const": "divider"}}, ["type"], False),
                        O({"type": {"const": "context"}, "elements": A({"$ref": "#/$defs/text"}, minItems=1, maxItems=10)},
                          ["type", "elements"], False)]}},
    "type": "object", "properties": {"blocks": A({"$ref": "#/$defs/block"}, maxItems=50)}, "required": ["blocks"]},
     [{"blocks": []}, {"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}, {"type": "divider"},
                                  {"type": "context", "elements": [{"type": "plain_text", "text": "x", "emoji": True}]}]}],
     [{"blocks": [{"type": "header"}]}, {"blocks": [{"type": "context", "elements": []}]},
      {"blocks": [{"type": "section", "text": {"type": "html", "text": "x"}}]}])
auto("recursive: linked list via draft-7 definitions and $ref siblings ignored", {"$schema": D7, "definitions": {"node": O({
    "value": I(), "next": {"anyOf": [{"type": "null"}, {"$ref": "#/definitions/node"}]}}, ["value", "next"], False)},
    "$ref": "#/definitions/node", "description": "a singly linked list", "maxProperties": 0},
     [{"value": 1, "next": None}, {"value": 1, "next": {"value": 2, "next": {"value": 3, "next": None}}}],
     [{"value": 1}, {"value": 1, "next": {"value": "2", "next": None}}, {"value": 1.5, "next": None}])


# ---- bounded repetition, long enums, nested arrays, unconstrained values deep ------------------------------
_COUNTRY_CODES = ("AD AE AF AG AL AM AO AR AT AU AZ BA BB BD BE BF BG BH BI BJ BN BO BR BS BT BW BY BZ CA CD CF CG CH CI CL "
                  "CM CN CO CR CU CV CY CZ DE DJ DK DM DO DZ EC EE EG ER ES ET FI FJ FM FR GA GB GD GE GH GM GN GQ GR GT GW GY "
                  "HN HR HT HU ID IE IL IN IQ IR IS IT JM JO JP KE KG KH KI KM KN KP KR KW KZ LA LB LC LI LK LR LS LT LU LV LY "
                  "MA MC MD ME MG MH MK ML MM MN MR MT MU MV MW MX MY MZ NA NE NG NI NL NO NP NR NZ OM PA PE PG PH PK PL PT PW "
                  "PY QA RO RS RU RW SA SB SC SD SE SG SI SK SL SM SN SO SR SS ST SV SY SZ TD TG TH TJ TL TM TN TO TR TT TV TZ "
                  "UA UG US UY UZ VA VC VE VN VU WS YE ZA ZM ZW")
COUNTRIES = _COUNTRY_CODES.split()
auto("long enum: shipping address with ISO country codes", O({"name": S(), "line1": S(), "city": S(), "postal_code": S(),
                                                              "country": E(*COUNTRIES)}, ["name", "line1", "country"], False),
     [{"name": "A", "line1": "1 St", "country": "NZ"}, {"name": "B", "line1": "2 Rd", "city": "Lagos", "country": "NG"}],
     [{"name": "A", "line1": "1 St", "country": "XX"}, {"name": "A", "line1": "1 St", "country": "nz"}])
_CURRENCY_CODES = ("AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF "
                   "CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD "
                   "HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD "
                   "MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN "
                   "PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SYP SZL THB TJS TMT TND TOP TRY TTD "
                   "TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR ZMW ZWL")
CURRENCIES = _CURRENCY_CODES.split()
auto("long enum: FX rate table (patternProperties keys, currency enum)", O({
    "base": E(*CURRENCIES), "date": S(format="date"),
    "rates": {"type": "object", "patternProperties": {"^[A-Z]{3}$": N(exclusiveMinimum=0)}, "additionalProperties": False,
              "minProperties": 1}}, ["base", "rates"]),
     [{"base": "EUR", "rates": {"USD": 1.0842, "JPY": 162.5}}, {"base": "ZAR", "date": "2024-03-15", "rates": {"EUR": 0.049}}],
     [{"base": "EURO", "rates": {"USD": 1}}, {"base": "EUR", "rates": {}}, {"base": "EUR", "rates": {"usd": 1}},
      {"base": "EUR", "rates": {"USD": 0}}])
TIMEZONES = [f"{region}/{city}" for region, cities in {
    "Europe": "Amsterdam Athens Berlin Brussels Bucharest Budapest Dublin Helsinki Istanbul Kyiv Lisbon London Madrid Oslo "
              "Paris Prague Rome Stockholm Vienna Warsaw Zurich",
    "America": "Anchorage Bogota Chicago Denver Halifax Lima Los_Angeles Mexico_City New_York Phoenix Santiago Sao_Paulo "
               "Toronto Vancouver",
    "Asia": "Bangkok Dubai Hong_Kong Jakarta Karachi Kolkata Manila Seoul Shanghai Singapore Taipei Tehran Tokyo",
    "Africa": "Cairo Casablanca Johannesburg Lagos Nairobi", "Australia": "Adelaide Brisbane Perth Sydney"}.items()
    for city in cities.split()] + ["UTC"]
auto("long enum: user preferences with IANA time zones", O({"timezone": E(*TIMEZONES), "locale": S(pattern="^[a-z]{2}(_[A-Z]{2})?$"),
                                                             "weekStart": E(0, 1, 6), "use24h": B()}, ["timezone"], False),
     [{"timezone": "Europe/Berlin"}, {"timezone": "UTC", "locale": "pt_BR", "weekStart": 0, "use24h": True}],
     [{"timezone": "Mars/Olympus"}, {"timezone": "UTC", "weekStart": 2}, {"timezone": "UTC", "locale": "english"}])
auto("nested arrays of objects: spreadsheet (sheets > rows > cells)", O({"sheets": A(O({
    "title": S(maxLength=31), "rows": A(A(O({"v": {"type": ["string", "number", "boolean", "null"]}, "f": S(pattern="^="),
                                               "style": O({"bold": B(), "fg": S(pattern="^#[0-9A-F]{6}$")}, extra=False)},
                                              extra=False), maxItems=26), maxItems=100)}, ["title", "rows"]), minItems=1)},
    ["sheets"]),
     [{"sheets": [{"title": "S1", "rows": []}]},
      {"sheets": [{"title": "Budget", "rows": [[{"v": "Item"}, {"v": "Cost", "style": {"bold": True}}],
                                               [{"v": "Rent"}, {"v": 1200.5}], [{"v": None}, {"f": "=SUM(B2:B2)",
                                                                                              "style": {"fg": "#FF0000"}}]]}]}],
     [{"sheets": []}, {"sheets": [{"title": "S", "rows": [[{"v": {"x": 1}}]]}]},
      {"sheets": [{"title": "S", "rows": [[{"f": "SUM()"}]]}]}, {"sheets": [{"title": "S", "rows": [{"v": 1}]}]}])
auto("nested arrays of objects: timetable (days > slots > people)", A(O({
    "day": E("mon", "tue", "wed", "thu", "fri", "sat", "sun"),
    "slots": A(O({"start": S(pattern="^([01][0-9]|2[0-3]):[0-5][0-9]$"), "end": S(pattern="^([01][0-9]|2[0-3]):[0-5][0-9]$"),
                  "people": A(O({"id": I(minimum=1), "role": E("lead", "member")}, ["id"]), maxItems=8)},
                 ["start", "end"]), maxItems=12)}, ["day", "slots"]), maxItems=7),
     [[], [{"day": "mon", "slots": [{"start": "09:00", "end": "10:30", "people": [{"id": 1, "role": "lead"}, {"id": 2}]}]},
           {"day": "sun", "slots": []}]],
     [[{"day": "mon", "slots": [{"start": "9:00", "end": "10:00"}]}], [{"day": "holiday", "slots": []}],
      [{"day": "tue", "slots": [{"start": "09:00", "end": "10:00", "people": [{"id": 1, "role": "boss"}]}]}]])
auto("bounded repetition: top-10 leaderboard (maxItems 10 of objects)", O({"board": A(O({
    "rank": I(minimum=1, maximum=10), "player": S(minLength=1), "score": I(minimum=0), "country": S(pattern="^[A-Z]{2}$")},
    ["rank", "player", "score"], False), maxItems=10), "updated": S(format="date-time")}, ["board"]),
     [{"board": []}, {"board": [{"rank": i, "player": f"p{i}", "score": 1000 - i} for i in range(1, 11)],
                      "updated": "2024-02-02T02:02:02Z"}],
     [{"board": [{"rank": 1, "player": "p", "score": 1}] * 11}, {"board": [{"rank": 11, "player": "p", "score": 1}]},
      {"board": [{"rank": 1, "player": "p", "score": 1, "team": "x"}]}])
auto("bounded repetition: RGB palette (exact-size tuples in a bounded list)", O({"palette": A(A(I(minimum=0, maximum=255),
                                                                                               minItems=3, maxItems=3),
                                                                                             minItems=2, maxItems=16)},
                                                                                ["palette"]),
     [{"palette": [[0, 0, 0], [255, 255, 255]]}, {"palette": [[12, 34, 56]] * 16}],
     [{"palette": [[0, 0, 0]]}, {"palette": [[0, 0], [1, 1, 1]]}, {"palette": [[0, 0, 256], [1, 1, 1]]}])
auto("unconstrained deep: audit log with before/after ({} values)", O({
    "actor": S(), "action": E("create", "update", "delete"), "before": {}, "after": {}, "context": {"type": "object"}},
    ["actor", "action"]),
     [{"actor": "u1", "action": "delete", "before": {"a": [{"b": [{"c": {"d": [1, 2, {"e": None}]}}]}]}, "after": None},
      {"actor": "svc", "action": "update", "before": [[[[]]]], "after": "x", "context": {"req": {"hdr": {"x": [["y"]]}}}}],
     [{"actor": "u1", "action": "upsert"}, {"actor": "u1", "action": "create", "context": [1]}])
auto("unconstrained deep: untyped arrays holding objects at depth > 2", O({
    "dataset": S(), "rows": {"type": "array"}, "meta": O({"columns": {"type": "array"}, "extra": True})}, ["dataset", "rows"]),
     [{"dataset": "d", "rows": [[{"a": [{"b": {"c": [{"d": 1}]}}]}], [[[[{"x": None}]]]]]},
      {"dataset": "e", "rows": [], "meta": {"columns": [{"name": "a", "type": {"nested": [True]}}], "extra": {"k": [[]]}}}],
     [{"dataset": "d", "rows": {"0": []}}, {"dataset": "d"}, {"dataset": "d", "rows": [], "meta": {"columns": "a,b"}}])
auto("unconstrained deep: JSON-RPC 2.0 request (params any)", O({
    "jsonrpc": {"const": "2.0"}, "method": S(pattern="^(?!rpc\\.)"), "params": {"type": ["array", "object"]},
    "id": {"type": ["string", "integer", "null"]}}, ["jsonrpc", "method"], False),
     [{"jsonrpc": "2.0", "method": "sum", "params": [1, 2, {"deep": [[{"x": 1}]]}], "id": 1},
      {"jsonrpc": "2.0", "method": "notify", "params": {"a": {"b": {"c": {"d": [{}]}}}}}],
     [{"jsonrpc": "2.0", "method": "rpc.discover"}, {"jsonrpc": "1.0", "method": "x"}, {"jsonrpc": "2.0", "method": "x",
                                                                                        "params": 3}])
auto("dependencies (draft-7): credit card billing address", {"$schema": D7, "type": "object", "properties": {
    "name": S(), "credit_card": S(pattern="^[0-9]{13,19}$"), "billing_address": S(), "cvc": S(pattern="^[0-9]{3,4}$")},
    "required": ["name"], "dependencies": {"credit_card": ["billing_address", "cvc"],
                                           "billing_address": {"properties": {"name": S(minLength=2)}}}},
     [{"name": "John"}, {"name": "John", "credit_card": "5555555555555555", "billing_address": "555 Debtor's Lane", "cvc": "123"}],
     [{"name": "John", "credit_card": "5555555555555555"}, {"name": "J", "billing_address": "x"},
      {"name": "John", "credit_card": "5555", "billing_address": "x", "cvc": "123"}])
auto("oneOf with overlapping branches: contact (email or phone, not both)", O({"email": S(format="email"),
                                                                              "phone": S(pattern="^\\+?[0-9 ]{7,15}$"),
                                                                              "name": S()}, ["name"],
                                                                             oneOf=[{"required": ["email"]},
                                                                                    {"required": ["phone"]}]),
     [{"name": "A", "email": "a@example.com"}, {"name": "B", "phone": "+44 20 7946 0000"}],
     [{"name": "A"}, {"name": "A", "email": "a@example.com", "phone": "+4420794600"}])
auto("oneOf with overlapping branches: number or numeric string id", O({"id": {"oneOf": [I(minimum=0), S(pattern="^[0-9]+$"),
                                                                                          S(minLength=36, maxLength=36)]}},
                                                                       ["id"]),
     [{"id": 42}, {"id": "42"}, {"id": "123e4567-e89b-12d3-a456-426614174000"}],
     [{"id": -1}, {"id": "abc"}, {"id": "123456789012345678901234567890123456"}])
auto("minProperties / maxProperties: HTTP headers map", O({"headers": {"type": "object", "minProperties": 1, "maxProperties": 8,
                                                                       "propertyNames": {"pattern": "^[A-Za-z0-9-]+$"},
                                                                       "additionalProperties": S(maxLength=200)}},
                                                          ["headers"]),
     [{"headers": {"Accept": "application/json"}}, {"headers": {f"X-H{i}": "v" for i in range(8)}}],
     [{"headers": {}}, {"headers": {f"X-H{i}": "v" for i in range(9)}}, {"headers": {"Bad Header": "v"}}])
auto("integer multipleOf: pagination cursor in steps of 25", O({"offset": I(minimum=0, multipleOf=25),
                                                              "limit": I(minimum=25, maximum=100, multipleOf=25)}),
     [{"offset": 0, "limit": 25}, {"offset": 1250, "limit": 100}], [{"offset": 10}, {"limit": 50.5}, {"limit": 125}])
auto("uniqueItems over an open domain: topics (refused by design)", O({"topics": A(S(), uniqueItems=True, maxItems=20)}),
     [{"topics": []}, {"topics": ["rust", "wasm"]}], [{"topics": ["rust", "rust"]}, {"topics": [1]}])
auto("not over items: a list that is not all strings", O({"values": {"type": "array", "not": {"items": S()}}}),
     [{"values": [1]}, {"values": ["a", 2]}], [{"values": []}, {"values": ["a", "b"]}])
auto("recursive: boolean filter expression (anyOf twin)", {"$schema": D7, "definitions": {"filter": {"anyOf": [
    O({"and": A({"$ref": "#/definitions/filter"}, minItems=2)}, ["and"], False),
    O({"or": A({"$ref": "#/definitions/filter"}, minItems=2)}, ["or"], False),
    O({"not": {"$ref": "#/definitions/filter"}}, ["not"], False),
    O({"field": S(), "op": E("eq", "ne", "lt", "gt", "in"), "value": {"type": ["string", "number", "boolean", "array"]}},
      ["field", "op", "value"], False)]}}, "$ref": "#/definitions/filter"},
     [{"field": "status", "op": "eq", "value": "open"},
      {"or": [{"field": "a", "op": "lt", "value": 3}, {"not": {"and": [{"field": "b", "op": "in", "value": [1]},
                                                                      {"field": "c", "op": "ne", "value": False}]}}]}],
     [{"or": [{"field": "a", "op": "eq", "value": 1}]}, {"not": {"field": "a", "op": "like", "value": "x"}},
      {"field": "a", "op": "eq", "value": {"x": 1}}])
auto("not over contains: tags that must not include a reserved one", O({"tags": A(S(maxLength=30),
                                                                                  **{"not": {"contains": {"enum": ["internal",
                                                                                                                   "admin"]}}})}),
     [{"tags": []}, {"tags": ["public", "beta"]}], [{"tags": ["public", "internal"]}, {"tags": ["admin"]}])
auto("JSON-RPC 2.0 request without the reserved-name lookahead", O({
    "jsonrpc": {"const": "2.0"}, "method": S(minLength=1), "params": {"type": ["array", "object"]},
    "id": {"type": ["string", "integer", "null"]}}, ["jsonrpc", "method"], False),
     [{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": "abc"},
      {"jsonrpc": "2.0", "method": "update", "params": {"list": [[{"k": [{"v": 1}]}]]}}],
     [{"jsonrpc": "2.0", "method": ""}, {"jsonrpc": "2.0", "method": "x", "id": 1.5}, {"jsonrpc": "2.0", "method": "x",
                                                                                        "params": "p"}])


# ---- OpenAI strict-mode tools: every key required, optional values as a type union with null ---------------
def strict_tool(name, props, valid, invalid):
    schema = O(props, list(props), False)
    auto(f"tool (strict mode): {name}", schema, valid, invalid)


strict_tool("get_current_weather", {"location": S(description="City, e.g. San Francisco, CA"),
                                    "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]}},
            [{"location": "Boston, MA", "unit": None}, {"location": "Tokyo", "unit": "celsius"}],
            [{"location": "Boston, MA"}, {"location": "Boston", "unit": "kelvin"}])
strict_tool("extract_invoice", {"invoice_number": S(), "issue_date": S(format="date"),
                                "vendor": O({"name": S(), "vat_id": {"type": ["string", "null"]}}, ["name", "vat_id"], False),
                                "lines": A(O({"description": S(), "qty": N(minimum=0), "unit_price": N()},
                                             ["description", "qty", "unit_price"], False)),
                                "total": N()},
            [{"invoice_number": "INV-1", "issue_date": "2024-02-01", "vendor": {"name": "ACME", "vat_id": None},
              "lines": [], "total": 0},
             {"invoice_number": "2024/77", "issue_date": "2024-12-24", "vendor": {"name": "B GmbH", "vat_id": "DE123456789"},
              "lines": [{"description": "Widget", "qty": 2, "unit_price": 9.5}], "total": 19}],
            [{"invoice_number": "I", "issue_date": "24.12.2024", "vendor": {"name": "B", "vat_id": None}, "lines": [], "total": 0},
             {"invoice_number": "I", "issue_date": "2024-12-24", "vendor": {"name": "B"}, "lines": [], "total": 0}])
strict_tool("classify_sentiment", {"label": E("positive", "negative", "neutral", "mixed"),
                                   "confidence": N(minimum=0, maximum=1), "reasons": A(S(), maxItems=3)},
            [{"label": "positive", "confidence": 0.92, "reasons": ["praise"]}, {"label": "mixed", "confidence": 0, "reasons": []}],
            [{"label": "angry", "confidence": 0.5, "reasons": []}, {"label": "neutral", "confidence": 1.2, "reasons": []},
             {"label": "neutral", "confidence": 0.2, "reasons": ["a", "b", "c", "d"]}])
strict_tool("extract_people", {"people": A(O({"name": S(), "age": {"type": ["integer", "null"], "minimum": 0},
                                              "role": {"type": ["string", "null"]}}, ["name", "age", "role"], False))},
            [{"people": []}, {"people": [{"name": "Ann", "age": 31, "role": None}, {"name": "Bo", "age": None, "role": "CTO"}]}],
            [{"people": [{"name": "Ann", "age": -1, "role": None}]}, {"people": [{"name": "Ann"}]}])
strict_tool("route_ticket", {"queue": E("billing", "technical", "sales", "abuse"), "priority": I(minimum=1, maximum=5),
                             "summary": S(maxLength=200), "needs_human": B()},
            [{"queue": "billing", "priority": 2, "summary": "double charge", "needs_human": True},
             {"queue": "abuse", "priority": 1, "summary": "", "needs_human": False}],
            [{"queue": "legal", "priority": 2, "summary": "x", "needs_human": True},
             {"queue": "sales", "priority": 0, "summary": "x", "needs_human": False}])
strict_tool("plan_trip", {"destination": S(), "days": A(O({"day": I(minimum=1), "activities": A(S(), minItems=1, maxItems=6)},
                                                            ["day", "activities"], False), minItems=1, maxItems=14),
                          "budget_usd": {"type": ["number", "null"], "minimum": 0}},
            [{"destination": "Kyoto", "days": [{"day": 1, "activities": ["Fushimi Inari"]}], "budget_usd": None},
             {"destination": "Rome", "days": [{"day": 1, "activities": ["Colosseum", "Forum"]},
                                              {"day": 2, "activities": ["Vatican"]}], "budget_usd": 1500}],
            [{"destination": "X", "days": [], "budget_usd": None},
             {"destination": "X", "days": [{"day": 1, "activities": []}], "budget_usd": None},
             {"destination": "X", "days": [{"day": 1, "activities": ["a"]}], "budget_usd": -5}])
strict_tool("parse_address", {"street": S(), "house_number": {"type": ["string", "null"]}, "postal_code": S(),
                              "city": S(), "country_code": S(pattern="^[A-Z]{2}$")},
            [{"street": "Main St", "house_number": "12a", "postal_code": "10115", "city": "Berlin", "country_code": "DE"},
             {"street": "Rue X", "house_number": None, "postal_code": "75001", "city": "Paris", "country_code": "FR"}],
            [{"street": "Main", "house_number": None, "postal_code": "1", "city": "B", "country_code": "Germany"},
             {"street": "Main", "postal_code": "1", "city": "B", "country_code": "DE"}])
strict_tool("generate_sql_filter", {"table": E("orders", "customers", "products"),
                                    "conditions": A(O({"column": S(pattern="^[a-z_]+$"), "operator": E("=", "!=", "<", ">", "<=",
                                                                                                        ">=", "LIKE"),
                                                       "value": {"type": ["string", "number", "boolean", "null"]}},
                                                      ["column", "operator", "value"], False), maxItems=10),
                                    "order_by": {"type": ["string", "null"]}, "limit": I(minimum=1, maximum=500)},
            [{"table": "orders", "conditions": [{"column": "status", "operator": "=", "value": "paid"}], "order_by": None,
              "limit": 50},
             {"table": "products", "conditions": [], "order_by": "price", "limit": 1}],
            [{"table": "users", "conditions": [], "order_by": None, "limit": 1},
             {"table": "orders", "conditions": [{"column": "Status", "operator": "=", "value": 1}], "order_by": None, "limit": 1},
             {"table": "orders", "conditions": [{"column": "s", "operator": "IN", "value": 1}], "order_by": None, "limit": 1}])
strict_tool("create_chart", {"kind": E("bar", "line", "pie", "scatter"), "title": S(),
                             "series": A(O({"name": S(), "points": A(A(N(), minItems=2, maxItems=2), maxItems=100)},
                                           ["name", "points"], False), minItems=1, maxItems=5),
                             "x_label": {"type": ["string", "null"]}, "y_label": {"type": ["string", "null"]}},
            [{"kind": "line", "title": "Revenue", "series": [{"name": "2024", "points": [[1, 10.5], [2, 12]]}], "x_label": "month",
              "y_label": None},
             {"kind": "pie", "title": "Share", "series": [{"name": "s", "points": []}], "x_label": None, "y_label": None}],
            [{"kind": "donut", "title": "t", "series": [{"name": "s", "points": []}], "x_label": None, "y_label": None},
             {"kind": "bar", "title": "t", "series": [{"name": "s", "points": [[1, 2, 3]]}], "x_label": None, "y_label": None},
             {"kind": "bar", "title": "t", "series": [], "x_label": None, "y_label": None}])
strict_tool("moderate_content", {"flagged": B(), "categories": O({c: B() for c in ("hate", "harassment", "self_harm",
                                                                                    "sexual", "violence")},
                                                                  ["hate", "harassment", "self_harm", "sexual", "violence"],
                                                                  False),
                                 "explanation": {"type": ["string", "null"], "maxLength": 500}},
            [{"flagged": False, "categories": {"hate": False, "harassment": False, "self_harm": False, "sexual": False,
                                               "violence": False}, "explanation": None},
             {"flagged": True, "categories": {"hate": False, "harassment": True, "self_harm": False, "sexual": False,
                                              "violence": False}, "explanation": "insults"}],
            [{"flagged": True, "categories": {"hate": True}, "explanation": None},
             {"flagged": "no", "categories": {"hate": False, "harassment": False, "self_harm": False, "sexual": False,
                                              "violence": False}, "explanation": None}])
strict_tool("schedule_meeting", {"participants": A(S(format="email"), minItems=2, maxItems=10),
                                 "duration_minutes": E(15, 30, 45, 60, 90), "earliest": S(format="date-time"),
                                 "latest": S(format="date-time"), "timezone": S()},
            [{"participants": ["a@x.example", "b@x.example"], "duration_minutes": 30, "earliest": "2024-06-03T09:00:00Z",
              "latest": "2024-06-07T17:00:00Z", "timezone": "Europe/Paris"},
             {"participants": ["a@x.example", "b@y.example", "c@z.example"], "duration_minutes": 90,
              "earliest": "2024-06-03T09:00:00+02:00", "latest": "2024-06-03T12:00:00+02:00", "timezone": "CET"}],
            [{"participants": ["a@x.example"], "duration_minutes": 30, "earliest": "2024-06-03T09:00:00Z",
              "latest": "2024-06-03T10:00:00Z", "timezone": "UTC"},
             {"participants": ["a@x.example", "b@x.example"], "duration_minutes": 20, "earliest": "2024-06-03T09:00:00Z",
              "latest": "2024-06-03T10:00:00Z", "timezone": "UTC"}])
strict_tool("answer_with_citations", {"answer": S(minLength=1), "citations": A(O({"source_id": S(pattern="^doc_[0-9]+$"),
                                                                                   "quote": S(maxLength=300)},
                                                                                  ["source_id", "quote"], False), maxItems=5)},
            [{"answer": "Yes.", "citations": []}, {"answer": "42", "citations": [{"source_id": "doc_3", "quote": "the answer is 42"}]}],
            [{"answer": "", "citations": []}, {"answer": "a", "citations": [{"source_id": "3", "quote": "q"}]}])


# ---- more SaaS API objects ---------------------------------------------------------------------------------
auto("twilio-like message resource", O({"sid": S(pattern="^(SM|MM)[0-9a-f]{32}$"), "to": S(pattern="^\\+[1-9][0-9]{1,14}$"),
                                        "from": S(pattern="^\\+[1-9][0-9]{1,14}$"), "body": S(maxLength=1600),
                                        "status": E("queued", "sending", "sent", "failed", "delivered", "undelivered",
                                                    "receiving", "received"),
                                        "num_segments": S(pattern="^[0-9]+$"), "price": {"type": ["string", "null"]},
                                        "date_created": S()}, ["sid", "to", "status"]),
     [{"sid": "SM" + "0" * 32, "to": "+15558675310", "status": "queued"},
      {"sid": "MM" + "ab" * 16, "to": "+4915112345678", "from": "+15017122661", "body": "Hi", "status": "delivered",
       "num_segments": "1", "price": None, "date_created": "Thu, 30 Jul 2015 20:12:31 +0000"}],
     [{"sid": "XX" + "0" * 32, "to": "+1555", "status": "sent"}, {"sid": "SM" + "0" * 32, "to": "5558675310", "status": "sent"},
      {"sid": "SM" + "0" * 32, "to": "+15558675310", "status": "read"}])
auto("shopify-like product with variants (maxItems, options)", O({
    "title": S(minLength=1), "body_html": S(), "vendor": S(), "status": E("active", "archived", "draft"),
    "options": A(O({"name": S(), "values": A(S(), minItems=1)}, ["name"]), maxItems=3),
    "variants": A(O({"sku": S(), "price": S(pattern="^[0-9]+\\.[0-9]{2}$"), "inventory_quantity": I(),
                     "option1": {"type": ["string", "null"]}, "weight_unit": E("g", "kg", "oz", "lb")}, ["price"]),
                  maxItems=100),
    "tags": S()}, ["title"]),
     [{"title": "Tee"}, {"title": "Hoodie", "status": "active", "options": [{"name": "Size", "values": ["S", "M"]}],
                         "variants": [{"sku": "H-S", "price": "49.00", "option1": "S", "inventory_quantity": -2},
                                      {"price": "49.00", "option1": None, "weight_unit": "g"}], "tags": "winter, cotton"}],
     [{"title": ""}, {"title": "T", "variants": [{"price": "49"}]}, {"title": "T", "options": [{"name": "a"}] * 4}])
auto("jira-like issue create (fields with nested refs)", O({"fields": O({
    "project": O({"key": S(pattern="^[A-Z][A-Z0-9]+$")}, ["key"]), "summary": S(maxLength=255),
    "issuetype": O({"name": E("Bug", "Task", "Story", "Epic")}, ["name"]), "description": {"type": ["object", "string"]},
    "priority": O({"id": S(pattern="^[1-5]$")}), "labels": A(S(pattern="^\\S+$")), "customfield_10016": {"type": ["number", "null"]}},
    ["project", "summary", "issuetype"])}, ["fields"]),
     [{"fields": {"project": {"key": "WEB"}, "summary": "Fix login", "issuetype": {"name": "Bug"}}},
      {"fields": {"project": {"key": "OPS2"}, "summary": "s", "issuetype": {"name": "Story"}, "priority": {"id": "2"},
                  "labels": ["frontend"], "customfield_10016": 3, "description": {"type": "doc", "content": [{"type": "p"}]}}}],
     [{"fields": {"project": {"key": "web"}, "summary": "s", "issuetype": {"name": "Bug"}}},
      {"fields": {"project": {"key": "W"}, "summary": "s", "issuetype": {"name": "Incident"}}},
      {"fields": {"project": {"key": "W1"}, "summary": "s", "issuetype": {"name": "Bug"}, "labels": ["two words"]}}])
auto("discord-like embed (limits)", O({"title": S(maxLength=256), "description": S(maxLength=4096), "url": S(format="uri"),
                                       "color": I(minimum=0, maximum=16777215), "timestamp": S(format="date-time"),
                                       "fields": A(O({"name": S(maxLength=256), "value": S(maxLength=1024), "inline": B()},
                                                     ["name", "value"]), maxItems=25),
                                       "footer": O({"text": S(maxLength=2048), "icon_url": S(format="uri")}, ["text"])}),
     [{"title": "Build passed"}, {"title": "t", "color": 5814783, "timestamp": "2024-01-01T00:00:00.000Z",
                                  "fields": [{"name": "Branch", "value": "main", "inline": True}], "footer": {"text": "CI"}}],
     [{"color": 16777216}, {"fields": [{"name": "n"}]}, {"footer": {"icon_url": "https://x.example/i.png"}}])
auto("notion-like page property values (oneOf by type)", O({"properties": {"type": "object", "additionalProperties": {"oneOf": [
    O({"type": {"const": "title"}, "title": A(O({"plain_text": S()}, ["plain_text"]))}, ["type", "title"]),
    O({"type": {"const": "number"}, "number": {"type": ["number", "null"]}}, ["type", "number"]),
    O({"type": {"const": "select"}, "select": {"anyOf": [{"type": "null"}, O({"name": S(), "color": E(
        "default", "gray", "brown", "orange", "yellow", "green", "blue", "purple", "pink", "red")}, ["name"])]}},
      ["type", "select"]),
    O({"type": {"const": "checkbox"}, "checkbox": B()}, ["type", "checkbox"]),
    O({"type": {"const": "date"}, "date": O({"start": S(format="date"), "end": {"type": ["string", "null"]}}, ["start"])},
      ["type", "date"])]}}}, ["properties"]),
     [{"properties": {}}, {"properties": {"Name": {"type": "title", "title": [{"plain_text": "Launch"}]},
                                          "Points": {"type": "number", "number": None},
                                          "Stage": {"type": "select", "select": {"name": "Done", "color": "green"}},
                                          "Due": {"type": "date", "date": {"start": "2024-09-30", "end": None}}}}],
     [{"properties": {"Done": {"type": "checkbox", "checkbox": "yes"}}},
      {"properties": {"Stage": {"type": "select", "select": {"name": "x", "color": "teal"}}}},
      {"properties": {"X": {"type": "rollup", "rollup": {}}}}])
auto("sendgrid-like mail send (personalizations, content)", O({
    "personalizations": A(O({"to": A(O({"email": S(format="email"), "name": S()}, ["email"]), minItems=1, maxItems=1000),
                             "subject": S(), "dynamic_template_data": {"type": "object"}}, ["to"]), minItems=1, maxItems=1000),
    "from": O({"email": S(format="email"), "name": S()}, ["email"]),
    "content": A(O({"type": S(pattern="^[a-z]+/[a-z]+$"), "value": S(minLength=1)}, ["type", "value"]), minItems=1),
    "template_id": S(pattern="^d-[0-9a-f]{32}$")}, ["personalizations", "from"],
    anyOf=[{"required": ["content"]}, {"required": ["template_id"]}]),
     [{"personalizations": [{"to": [{"email": "a@example.com"}]}], "from": {"email": "no-reply@example.com"},
       "content": [{"type": "text/plain", "value": "Hello"}]},
      {"personalizations": [{"to": [{"email": "b@example.com", "name": "B"}], "dynamic_template_data": {"items": [{"q": 1}]}}],
       "from": {"email": "x@example.com", "name": "Shop"}, "template_id": "d-" + "0123456789abcdef" * 2}],
     [{"personalizations": [{"to": [{"email": "a@example.com"}]}], "from": {"email": "n@example.com"}},
      {"personalizations": [], "from": {"email": "n@example.com"}, "content": [{"type": "text/plain", "value": "x"}]},
      {"personalizations": [{"to": [{"email": "a@example.com"}]}], "from": {"email": "n@example.com"},
       "template_id": "tmpl-1"}])
auto("aws iam policy document-like (string or array, Effect enum)", O({
    "Version": E("2012-10-17", "2008-10-17"), "Statement": A(O({
        "Sid": S(pattern="^[A-Za-z0-9]*$"), "Effect": E("Allow", "Deny"),
        "Action": {"anyOf": [S(pattern="^(\\*|[a-z0-9-]+:[A-Za-z0-9*]+)$"), A(S(pattern="^(\\*|[a-z0-9-]+:[A-Za-z0-9*]+)$"),
                                                                            minItems=1)]},
        "Resource": {"type": ["string", "array"], "items": S()},
        "Condition": {"type": "object", "additionalProperties": {"type": "object"}}}, ["Effect", "Action"]), minItems=1)},
    ["Version", "Statement"]),
     [{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]},
      {"Version": "2012-10-17", "Statement": [{"Sid": "Deny1", "Effect": "Deny", "Action": ["ec2:*", "iam:PassRole"],
                                               "Resource": ["*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}],
     [{"Version": "2012-10-17", "Statement": [{"Effect": "Permit", "Action": "s3:GetObject"}]},
      {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "GetObject"}]},
      {"Version": "2012-10-17", "Statement": []}, {"Version": "2020-01-01", "Statement": [{"Effect": "Allow", "Action": "*"}]}])
auto("openid configuration-like (uri fields, response types)", O({
    "issuer": S(format="uri", pattern="^https://"), "authorization_endpoint": S(format="uri"), "token_endpoint": S(format="uri"),
    "jwks_uri": S(format="uri"), "response_types_supported": A(E("code", "token", "id_token", "code id_token",
                                                                 "id_token token", "code token", "code id_token token"),
                                                               minItems=1, uniqueItems=True),
    "scopes_supported": A(S()), "id_token_signing_alg_values_supported": A(S(pattern="^(RS|ES|PS|HS)(256|384|512)$|^none$"))},
    ["issuer", "authorization_endpoint", "jwks_uri", "response_types_supported"]),
     [{"issuer": "https://accounts.example.com", "authorization_endpoint": "https://accounts.example.com/auth",
       "jwks_uri": "https://accounts.example.com/certs", "response_types_supported": ["code"]},
      {"issuer": "https://id.example.org/realm", "authorization_endpoint": "https://id.example.org/a",
       "token_endpoint": "https://id.example.org/t", "jwks_uri": "https://id.example.org/k",
       "response_types_supported": ["code", "code id_token"], "id_token_signing_alg_values_supported": ["RS256", "ES384"]}],
     [{"issuer": "http://accounts.example.com", "authorization_endpoint": "https://a.example.com/auth",
       "jwks_uri": "https://a.example.com/certs", "response_types_supported": ["code"]},
      {"issuer": "https://a.example.com", "authorization_endpoint": "https://a.example.com/auth",
       "jwks_uri": "https://a.example.com/certs", "response_types_supported": ["code", "code"]},
      {"issuer": "https://a.example.com", "authorization_endpoint": "https://a.example.com/auth",
       "jwks_uri": "https://a.example.com/certs", "response_types_supported": ["code"],
       "id_token_signing_alg_values_supported": ["RS1"]}])
auto("jwk set-like (kty discriminated by if/then)", O({"keys": A(O({
    "kty": E("RSA", "EC", "oct", "OKP"), "use": E("sig", "enc"), "kid": S(), "alg": S(),
    "n": S(pattern="^[A-Za-z0-9_-]+$"), "e": S(pattern="^[A-Za-z0-9_-]+$"), "crv": E("P-256", "P-384", "P-521", "Ed25519"),
    "x": S(), "y": S()}, ["kty"], **{"if": {"properties": {"kty": {"const": "RSA"}}}, "then": {"required": ["n", "e"]},
                                      "else": {"if": {"properties": {"kty": {"const": "EC"}}},
                                               "then": {"required": ["crv", "x", "y"]}}}))}, ["keys"]),
     [{"keys": []}, {"keys": [{"kty": "RSA", "kid": "1", "n": "0vx7agoebGcQSuu", "e": "AQAB", "use": "sig"},
                              {"kty": "EC", "crv": "P-256", "x": "MKBCTNIcKUSDii", "y": "4Etl6SRW2YiLUr"}]}],
     [{"keys": [{"kty": "RSA", "n": "abc"}]}, {"keys": [{"kty": "EC", "crv": "P-256", "x": "a"}]},
      {"keys": [{"kty": "RSA", "n": "a+b", "e": "AQAB"}]}])
auto("prometheus alert rule-like (duration patterns, labels)", O({"groups": A(O({
    "name": S(minLength=1), "interval": S(pattern="^[0-9]+(ms|s|m|h|d|w|y)$"),
    "rules": A(O({"alert": S(pattern="^[A-Za-z_][A-Za-z0-9_]*$"), "record": S(pattern="^[a-zA-Z_:][a-zA-Z0-9_:]*$"),
                  "expr": {"type": ["string", "integer"]}, "for": S(pattern="^[0-9]+(ms|s|m|h|d|w|y)$"),
                  "labels": {"type": "object", "propertyNames": {"pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                             "additionalProperties": S()},
                  "annotations": {"type": "object", "additionalProperties": S()}},
                 ["expr"], oneOf=[{"required": ["alert"]}, {"required": ["record"]}]))}, ["name", "rules"]))}, ["groups"]),
     [{"groups": []}, {"groups": [{"name": "node", "interval": "30s", "rules": [
         {"alert": "HighCPU", "expr": "avg(rate(cpu[5m])) > 0.9", "for": "10m", "labels": {"severity": "page"},
          "annotations": {"summary": "CPU high"}}, {"record": "job:up:sum", "expr": "sum by (job) (up)"}]}]}],
     [{"groups": [{"name": "n", "rules": [{"expr": "up"}]}]},
      {"groups": [{"name": "n", "rules": [{"alert": "A", "record": "r", "expr": "up"}]}]},
      {"groups": [{"name": "n", "rules": [{"alert": "A", "expr": "up", "for": "10 minutes"}]}]},
      {"groups": [{"name": "n", "rules": [{"alert": "A", "expr": "up", "labels": {"bad-label": "x"}}]}]}])
auto("openapi: dependentSchemas (shipping method needs address)", O({"method": E("pickup", "courier", "post"),
                                                                    "address": S(minLength=5), "store_id": I(minimum=1)},
                                                                   ["method"], dependentSchemas={
    "address": {"properties": {"method": E("courier", "post")}}, "store_id": {"properties": {"method": {"const": "pickup"}}}}),
     [{"method": "pickup", "store_id": 4}, {"method": "courier", "address": "1 Long Road"}, {"method": "post"}],
     [{"method": "pickup", "address": "1 Long Road"}, {"method": "post", "store_id": 1}, {"method": "post", "address": "x"}])
auto("openapi: enum of integers and http status map (patternProperties)", O({"responses": {
    "type": "object", "patternProperties": {"^[1-5][0-9]{2}$": O({"description": S()}, ["description"]),
                                            "^[1-5]XX$": O({"description": S()}, ["description"])},
    "properties": {"default": O({"description": S()}, ["description"])}, "additionalProperties": False, "minProperties": 1}},
    ["responses"]),
     [{"responses": {"200": {"description": "OK"}}}, {"responses": {"default": {"description": "err"}, "4XX": {"description": "c"},
                                                                    "503": {"description": "down"}}}],
     [{"responses": {}}, {"responses": {"600": {"description": "x"}}}, {"responses": {"200": {}}}])


# ---- a family: smart-home device commands (one tool per device type) ---------------------------------------
DEVICES = {
    "light": ({"brightness": I(minimum=0, maximum=100), "color_temp_k": I(minimum=2000, maximum=6500, multipleOf=100),
               "rgb": A(I(minimum=0, maximum=255), minItems=3, maxItems=3), "on": B()},
              [{"on": True}, {"brightness": 40, "color_temp_k": 2700}, {"rgb": [255, 128, 0], "on": True}],
              [{"brightness": 101}, {"color_temp_k": 2750}, {"rgb": [255, 128]}]),
    "lock": ({"action": E("lock", "unlock"), "code": S(pattern="^[0-9]{4,8}$")},
             [{"action": "lock"}, {"action": "unlock", "code": "0451"}], [{"action": "open"}, {"action": "unlock", "code": "12"}]),
    "blinds": ({"position": I(minimum=0, maximum=100), "tilt": I(minimum=-90, maximum=90)},
               [{"position": 0}, {"position": 55, "tilt": -45}], [{"position": -1}, {"tilt": 91}]),
    "vacuum": ({"command": E("start", "pause", "dock", "spot_clean"), "rooms": A(S(), maxItems=8), "suction": E("quiet",
                                                                                                               "standard",
                                                                                                               "turbo")},
               [{"command": "dock"}, {"command": "start", "rooms": ["kitchen"], "suction": "turbo"}],
               [{"command": "mop"}, {"command": "start", "suction": "max"}]),
    "sprinkler": ({"zone": I(minimum=1, maximum=16), "minutes": I(minimum=1, maximum=120), "skip_if_rain": B()},
                  [{"zone": 1, "minutes": 10}, {"zone": 16, "minutes": 120, "skip_if_rain": True}],
                  [{"zone": 17, "minutes": 10}, {"zone": 2, "minutes": 0}]),
    "camera": ({"mode": E("armed", "disarmed", "privacy"), "record_seconds": I(minimum=5, maximum=300), "night_vision": B()},
               [{"mode": "armed"}, {"mode": "privacy", "night_vision": False}], [{"mode": "off"}, {"record_seconds": 3}]),
    "speaker": ({"volume": I(minimum=0, maximum=100), "source": E("bluetooth", "wifi", "aux", "optical"),
                 "eq": O({"bass": I(minimum=-10, maximum=10), "treble": I(minimum=-10, maximum=10)}, extra=False)},
                [{"volume": 20}, {"source": "aux", "eq": {"bass": -2, "treble": 3}}], [{"volume": 120}, {"eq": {"mid": 1}}]),
    "ev_charger": ({"action": E("start", "stop", "schedule"), "max_current_a": I(minimum=6, maximum=32),
                    "start_at": S(pattern="^([01][0-9]|2[0-3]):[0-5][0-9]$")},
                   [{"action": "stop"}, {"action": "schedule", "start_at": "23:30", "max_current_a": 16}],
                   [{"action": "start", "max_current_a": 40}, {"action": "schedule", "start_at": "11pm"}]),
}
for device, (props, good, bad) in DEVICES.items():
    required = ["device_id"] + [k for k in props if all(k in g for g in good)][:1]
    schema = O({"device_id": S(pattern="^[a-z0-9]{8}$"), **props}, required, False)
    auto(f"tool: control_{device}", schema, [{"device_id": "ab12cd34", **g} for g in good],
         [{"device_id": "ab12cd34", **b} for b in bad] + [{"device_id": "AB12", **good[0]}])


# ---- a family: GitHub-like webhook payloads ---------------------------------------------------------------
SHA = S(pattern="^[0-9a-f]{40}$")
REPO_REF = O({"id": I(), "full_name": S(pattern="^[^/]+/[^/]+$")}, ["id", "full_name"])
WEBHOOKS = {
    "push": ({"ref": S(pattern="^refs/(heads|tags)/"), "before": SHA, "after": SHA, "forced": B(),
              "commits": A(O({"id": SHA, "message": S(), "author": O({"name": S(), "email": S(format="email")}, ["name"])},
                             ["id", "message"]), maxItems=20)}, ["ref", "before", "after"],
             {"ref": "refs/heads/main", "before": "0" * 40, "after": "f" * 40,
              "commits": [{"id": "f" * 40, "message": "fix", "author": {"name": "a", "email": "a@example.com"}}]},
             [{"ref": "main", "before": "0" * 40, "after": "f" * 40}, {"ref": "refs/heads/x", "before": "0", "after": "f" * 40}]),
    "release": ({"action": E("published", "created", "edited", "deleted", "prereleased", "released"),
                 "release": O({"tag_name": S(), "name": {"type": ["string", "null"]}, "draft": B(), "prerelease": B(),
                               "published_at": {"type": ["string", "null"], "format": "date-time"}}, ["tag_name", "draft"])},
                ["action", "release"],
                {"action": "published", "release": {"tag_name": "v1.0.0", "name": None, "draft": False, "prerelease": False,
                                                    "published_at": "2024-05-05T05:05:05Z"}},
                [{"action": "shipped", "release": {"tag_name": "v1", "draft": False}},
                 {"action": "created", "release": {"tag_name": "v1", "draft": False, "published_at": "May 5"}}]),
    "issue_comment": ({"action": E("created", "edited", "deleted"), "issue": O({"number": I(minimum=1)}, ["number"]),
                       "comment": O({"id": I(), "body": S(maxLength=65536), "author_association": E(
                           "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "NONE")},
                           ["id", "body"])}, ["action", "issue", "comment"],
                      {"action": "created", "issue": {"number": 3}, "comment": {"id": 9, "body": "LGTM",
                                                                               "author_association": "MEMBER"}},
                      [{"action": "created", "issue": {"number": 0}, "comment": {"id": 1, "body": "x"}},
                       {"action": "created", "issue": {"number": 1}, "comment": {"id": 1, "body": "x", "author_association": "BOT"}}]),
    "workflow_run": ({"action": E("requested", "in_progress", "completed"),
                      "workflow_run": O({"id": I(), "head_sha": SHA, "status": E("queued", "in_progress", "completed"),
                                         "conclusion": E("success", "failure", "cancelled", "skipped", "timed_out", None),
                                         "run_attempt": I(minimum=1)}, ["id", "head_sha", "status", "conclusion"],
                                        **{"if": {"properties": {"status": {"const": "completed"}}},
                                           "then": {"properties": {"conclusion": {"type": "string"}}},
                                           "else": {"properties": {"conclusion": {"type": "null"}}}})},
                     ["action", "workflow_run"],
                     {"action": "completed", "workflow_run": {"id": 1, "head_sha": "a" * 40, "status": "completed",
                                                              "conclusion": "success", "run_attempt": 2}},
                     [{"action": "completed", "workflow_run": {"id": 1, "head_sha": "a" * 40, "status": "completed",
                                                               "conclusion": None}},
                      {"action": "requested", "workflow_run": {"id": 1, "head_sha": "a" * 40, "status": "queued",
                                                               "conclusion": "success"}}]),
    "star": ({"action": E("created", "deleted"), "starred_at": {"type": ["string", "null"], "format": "date-time"}},
             ["action", "starred_at"], {"action": "created", "starred_at": "2024-01-01T10:00:00Z"},
             [{"action": "deleted", "starred_at": "yesterday"}, {"action": "starred", "starred_at": None}]),
    "create": ({"ref": S(), "ref_type": E("branch", "tag"), "master_branch": S(), "pusher_type": E("user", "deploy_key")},
               ["ref", "ref_type"], {"ref": "feature/x", "ref_type": "branch", "master_branch": "main", "pusher_type": "user"},
               [{"ref": "x", "ref_type": "commit"}, {"ref": "x", "ref_type": "tag", "pusher_type": "bot"}]),
}
for hook, (props, required, good, bad) in WEBHOOKS.items():
    schema = O({**props, "repository": REPO_REF, "sender": GH_USER}, required + ["repository"],
               **{"x-github-event": hook})
    base = {"repository": {"id": 1, "full_name": "octo/hello"}}
    auto(f"github webhook: {hook}", schema, [{**good, **base}, {**good, **base, "sender": {"login": "o", "id": 1, "type": "User"}}],
         [{**b, **base} for b in bad] + [{**good, "repository": {"id": 1, "full_name": "nohash"}}])


# ---- a family: cloud resources (Terraform-plan-like JSON) --------------------------------------------------
auto("cloud: storage bucket (lifecycle rules, versioning)", O({
    "bucket": S(pattern="^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"), "acl": E("private", "public-read", "authenticated-read"),
    "versioning": O({"enabled": B()}, ["enabled"], False), "tags": {"type": "object", "maxProperties": 50,
                                                                    "additionalProperties": S(maxLength=256)},
    "lifecycle_rule": A(O({"id": S(), "enabled": B(), "prefix": S(), "expiration_days": I(minimum=1),
                           "transition": O({"days": I(minimum=0), "storage_class": E("STANDARD_IA", "GLACIER",
                                                                                      "DEEP_ARCHIVE")},
                                           ["days", "storage_class"])}, ["enabled"]), maxItems=10)}, ["bucket"], False),
     [{"bucket": "my-logs.example"}, {"bucket": "data-lake-01", "acl": "private", "versioning": {"enabled": True},
                                      "lifecycle_rule": [{"id": "old", "enabled": True, "expiration_days": 365,
                                                          "transition": {"days": 30, "storage_class": "GLACIER"}}]}],
     [{"bucket": "My_Bucket"}, {"bucket": "ok-name", "lifecycle_rule": [{"enabled": True, "expiration_days": 0}]},
      {"bucket": "ok-name", "versioning": {"enabled": True, "mfa_delete": True}}])
auto("cloud: virtual machine instance (cidr-ish, disk sizes)", O({
    "name": S(pattern=DNS1123), "machine_type": S(pattern="^[a-z][0-9a-z]*-(standard|highmem|highcpu)-[0-9]+$"),
    "zone": S(pattern="^[a-z]+-[a-z]+[0-9]-[a-f]$"),
    "boot_disk": O({"image": S(), "size_gb": I(minimum=10, maximum=65536), "type": E("pd-standard", "pd-balanced", "pd-ssd")},
                   ["image"]),
    "network_interfaces": A(O({"network": S(), "access_config": A(O({"nat_ip": S(format="ipv4")}), maxItems=1)}, ["network"]),
                            minItems=1, maxItems=8),
    "labels": {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,62}$"}, "additionalProperties": S()},
    "preemptible": B()}, ["name", "machine_type", "zone", "boot_disk", "network_interfaces"]),
     [{"name": "web-1", "machine_type": "e2-standard-4", "zone": "europe-west1-b", "boot_disk": {"image": "debian-12"},
       "network_interfaces": [{"network": "default"}]},
      {"name": "batch", "machine_type": "n2-highmem-16", "zone": "us-central1-a", "preemptible": True,
       "boot_disk": {"image": "ubuntu-2404", "size_gb": 200, "type": "pd-ssd"}, "labels": {"team": "ml"},
       "network_interfaces": [{"network": "vpc", "access_config": [{"nat_ip": "34.1.2.3"}]}]}],
     [{"name": "w", "machine_type": "big", "zone": "europe-west1-b", "boot_disk": {"image": "d"}, "network_interfaces": [{
         "network": "d"}]},
      {"name": "w", "machine_type": "e2-standard-2", "zone": "europe-west1-b", "boot_disk": {"image": "d", "size_gb": 5},
       "network_interfaces": [{"network": "d"}]},
      {"name": "w", "machine_type": "e2-standard-2", "zone": "europe-west1-b", "boot_disk": {"image": "d"},
       "network_interfaces": []}])
auto("cloud: DNS record (type-specific value via allOf if/then)", O({
    "name": S(format="hostname"), "type": E("A", "AAAA", "CNAME", "MX", "TXT"), "ttl": I(minimum=60, maximum=86400),
    "value": S(), "priority": I(minimum=0, maximum=65535)}, ["name", "type", "value"], allOf=[
    {"if": {"properties": {"type": {"const": "A"}}}, "then": {"properties": {"value": {"format": "ipv4"}}}},
    {"if": {"properties": {"type": {"const": "AAAA"}}}, "then": {"properties": {"value": {"format": "ipv6"}}}},
    {"if": {"properties": {"type": {"const": "MX"}}}, "then": {"required": ["priority"]}}]),
     [{"name": "www.example.com", "type": "A", "value": "203.0.113.7", "ttl": 300},
      {"name": "example.com", "type": "MX", "value": "mail.example.com", "priority": 10},
      {"name": "v6.example.com", "type": "AAAA", "value": "2001:db8::1"}],
     [{"name": "www.example.com", "type": "A", "value": "example.com"},
      {"name": "example.com", "type": "MX", "value": "mail.example.com"},
      {"name": "v6.example.com", "type": "AAAA", "value": "203.0.113.7"}, {"name": "x.example", "type": "TXT", "value": "v", "ttl": 5}])
auto("cloud: load balancer listener (port ranges, oneOf actions)", O({
    "port": I(minimum=1, maximum=65535), "protocol": E("HTTP", "HTTPS", "TCP", "TLS", "UDP"),
    "certificate_arn": S(pattern="^arn:aws:acm:"), "default_action": {"oneOf": [
        O({"type": {"const": "forward"}, "target_group": S()}, ["type", "target_group"], False),
        O({"type": {"const": "redirect"}, "status_code": E("HTTP_301", "HTTP_302"), "port": S(pattern="^[0-9]+$")},
          ["type", "status_code"], False),
        O({"type": {"const": "fixed-response"}, "status_code": S(pattern="^[2-5][0-9]{2}$"), "message_body": S(maxLength=1024)},
          ["type", "status_code"], False)]}}, ["port", "protocol", "default_action"],
    **{"if": {"properties": {"protocol": E("HTTPS", "TLS")}}, "then": {"required": ["certificate_arn"]}}),
     [{"port": 80, "protocol": "HTTP", "default_action": {"type": "redirect", "status_code": "HTTP_301", "port": "443"}},
      {"port": 443, "protocol": "HTTPS", "certificate_arn": "arn:aws:acm:eu-west-1:123:certificate/abc",
       "default_action": {"type": "forward", "target_group": "web"}},
      {"port": 8080, "protocol": "HTTP", "default_action": {"type": "fixed-response", "status_code": "503"}}],
     [{"port": 443, "protocol": "HTTPS", "default_action": {"type": "forward", "target_group": "web"}},
      {"port": 80, "protocol": "HTTP", "default_action": {"type": "redirect", "status_code": "HTTP_307"}},
      {"port": 80, "protocol": "HTTP", "default_action": {"type": "fixed-response", "status_code": "600"}}])
auto("cloud: container task definition (cpu/memory steps, port mappings)", O({
    "family": S(pattern="^[A-Za-z0-9_-]{1,255}$"), "cpu": E("256", "512", "1024", "2048", "4096"),
    "memory": I(minimum=512, maximum=30720, multipleOf=512), "networkMode": E("awsvpc", "bridge", "host", "none"),
    "containerDefinitions": A(O({"name": S(), "image": S(), "essential": B(),
                                 "portMappings": A(O({"containerPort": I(minimum=1, maximum=65535),
                                                      "protocol": E("tcp", "udp")}, ["containerPort"]), maxItems=10),
                                 "environment": A(O({"name": S(), "value": S()}, ["name", "value"], False))},
                                ["name", "image"]), minItems=1, maxItems=10)}, ["family", "containerDefinitions"]),
     [{"family": "web", "containerDefinitions": [{"name": "app", "image": "nginx"}]},
      {"family": "api_v2", "cpu": "1024", "memory": 2048, "networkMode": "awsvpc",
       "containerDefinitions": [{"name": "api", "image": "r/api:3", "essential": True,
                                 "portMappings": [{"containerPort": 8080, "protocol": "tcp"}],
                                 "environment": [{"name": "ENV", "value": "prod"}]}]}],
     [{"family": "web", "memory": 1000, "containerDefinitions": [{"name": "a", "image": "b"}]},
      {"family": "web", "cpu": "300", "containerDefinitions": [{"name": "a", "image": "b"}]},
      {"family": "web", "containerDefinitions": [{"name": "a", "image": "b", "environment": [{"name": "A"}]}]}])


# ---- a few more --------------------------------------------------------------------------------------------
auto("opening hours (format time with offsets, weekday keys)", O({
    day: A(O({"opens": S(format="time"), "closes": S(format="time")}, ["opens", "closes"], False), maxItems=3)
    for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")}, extra=False, minProperties=1),
     [{"mon": [{"opens": "09:00:00+01:00", "closes": "17:30:00+01:00"}]},
      {"sat": [{"opens": "10:00:00Z", "closes": "14:00:00Z"}], "sun": []}],
     [{}, {"mon": [{"opens": "9am", "closes": "5pm"}]}, {"holiday": []}, {"tue": [{"opens": "25:00:00Z", "closes": "26:00:00Z"}]}])
auto("sitemap-like entries (uri, date, changefreq, priority steps)", A(O({
    "loc": S(format="uri", maxLength=2048), "lastmod": S(format="date"),
    "changefreq": E("always", "hourly", "daily", "weekly", "monthly", "yearly", "never"),
    "priority": N(minimum=0, maximum=1)}, ["loc"], False), maxItems=50),
     [[], [{"loc": "https://example.com/", "lastmod": "2024-01-01", "changefreq": "daily", "priority": 1},
           {"loc": "https://example.com/about", "priority": 0.5}]],
     [[{"loc": "/relative"}], [{"loc": "https://e.example/", "priority": 1.5}], [{"loc": "https://e.example/", "changefreq": "sometimes"}]])
auto("i18n message catalog (ICU placeholders, key naming)", {"type": "object", "propertyNames": {
    "pattern": "^[a-z][a-zA-Z0-9]*(\\.[a-z][a-zA-Z0-9]*)*$"}, "additionalProperties": {"oneOf": [
        S(minLength=1), O({"message": S(minLength=1), "description": S()}, ["message"], False)]}, "minProperties": 1},
     [{"app.title": "Hello"}, {"cart.items": {"message": "{count, plural, one {# item} other {# items}}", "description": "badge"},
                               "nav.home": "Home"}],
     [{}, {"App.Title": "x"}, {"app.title": ""}, {"app.title": {"msg": "x"}}])
auto("feature toggle rollout (percent multipleOf 5, segments)", O({
    "key": S(pattern="^[a-z0-9-]+$"), "enabled": B(), "rollout_percent": I(minimum=0, maximum=100, multipleOf=5),
    "segments": A(O({"attribute": E("country", "plan", "email_domain", "app_version"),
                     "operator": E("in", "not_in", "semver_gte"), "values": A(S(), minItems=1, maxItems=50)},
                    ["attribute", "operator", "values"], False), maxItems=10)}, ["key", "enabled"], False),
     [{"key": "new-nav", "enabled": False}, {"key": "beta", "enabled": True, "rollout_percent": 25, "segments": [
         {"attribute": "plan", "operator": "in", "values": ["pro", "team"]}]}],
     [{"key": "x", "enabled": True, "rollout_percent": 33}, {"key": "x", "enabled": True, "segments": [
         {"attribute": "plan", "operator": "in", "values": []}]}, {"key": "X Y", "enabled": True}])


# ---- issue 33: bounded numbers in any spelling, `not: {required}` beside $refs, object shapes with array bounds ----
D7 = "http://json-schema.org/draft-07/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D4 = "http://json-schema.org/draft-04/schema#"
tool("set_thermostat_celsius", {"celsius": N(minimum=5, maximum=30.5), "mode": E("heat", "cool", "auto")}, ["celsius"],
     [{"celsius": 21.0}, {"celsius": 30.5, "mode": "auto"}, {"celsius": 5}], [{"celsius": 4.99}, {"celsius": 31.0}])
tool("resize_image_bounded", {"width": I(minimum=1, maximum=8192), "height": I(minimum=1, maximum=8192),
                      "quality": N(exclusiveMinimum=0, maximum=1)}, ["width", "height"],
     [{"width": 2048.0, "height": 1536.0}, {"width": 1, "height": 8192, "quality": 0.85}, {"width": 640, "height": 480.0, "quality": 1.0}],
     [{"width": 0, "height": 10}, {"width": 10, "height": 10, "quality": 0}, {"width": 2.5, "height": 10}])
tool("set_sample_rate", {"hz": N(minimum=512.0), "channels": I(minimum=1, maximum=8)}, ["hz"],
     [{"hz": 2048.0}, {"hz": 1000.0, "channels": 2.0}, {"hz": 44100}], [{"hz": 511.5}, {"hz": 48000, "channels": 9}])
tool("place_limit_order", {"symbol": S(pattern="^[A-Z]{1,5}$"), "quantity": I(minimum=1), "limit_price": N(exclusiveMinimum=0),
                           "side": E("buy", "sell")}, ["symbol", "quantity", "limit_price", "side"],
     [{"symbol": "AAPL", "quantity": 10.0, "limit_price": 187.25, "side": "buy"},
      {"symbol": "T", "quantity": 1000, "limit_price": 1e3, "side": "sell"}],
     [{"symbol": "AAPL", "quantity": 0.5, "limit_price": 1, "side": "buy"}, {"symbol": "AAPL", "quantity": 1, "limit_price": 0.0, "side": "buy"}])
tool("schedule_backup", {"retention_days": I(minimum=1, maximum=3650), "hour_utc": I(minimum=0, maximum=23),
                         "compression_level": I(minimum=1, maximum=9, default=6)}, ["retention_days"],
     [{"retention_days": 30.0, "hour_utc": 0.0}, {"retention_days": 3650, "compression_level": 9}],
     [{"retention_days": 0}, {"retention_days": 7, "hour_utc": 24}, {"retention_days": 7, "compression_level": 9.5}])
tool("geofence_alert", {"lat": N(minimum=-90, maximum=90), "lon": N(minimum=-180, maximum=180), "radius_m": N(minimum=1, maximum=50000)},
     ["lat", "lon", "radius_m"],
     [{"lat": 48.8566, "lon": 2.3522, "radius_m": 250.0}, {"lat": -90.0, "lon": 180.0, "radius_m": 5e4}],
     [{"lat": 90.5, "lon": 0, "radius_m": 10}, {"lat": 0, "lon": -180.25, "radius_m": 10}, {"lat": 0, "lon": 0, "radius_m": 0.5}])
tool("adjust_volume", {"percent": N(minimum=0, maximum=100, multipleOf=5), "device": S(maxLength=40)}, ["percent"],
     [{"percent": 50.0}, {"percent": 0}, {"percent": 100.0, "device": "kitchen"}], [{"percent": 52}, {"percent": 105}])
tool("split_bill", {"total": N(minimum=0.01), "people": I(minimum=2, maximum=50), "tip_percent": N(minimum=0, maximum=40)},
     ["total", "people"], [{"total": 120.0, "people": 4.0}, {"total": 0.01, "people": 50, "tip_percent": 18.5}],
     [{"total": 0, "people": 2}, {"total": 10, "people": 1}, {"total": 10, "people": 3, "tip_percent": 41.0}])
tool("set_brightness", {"level": I(minimum=0, maximum=255), "transition_s": N(minimum=0, exclusiveMaximum=60)}, ["level"],
     [{"level": 255.0}, {"level": 0, "transition_s": 0.5}, {"level": 128, "transition_s": 59.999}],
     [{"level": 256}, {"level": 10, "transition_s": 60}, {"level": -1}])
auto("sensor reading (draft 7, bounded number, integer floats)", {"$schema": D7, "type": "object", "properties": {
    "sensor_id": S(pattern="^S[0-9]{3}$"), "value": N(minimum=-40, maximum=125), "battery": I(minimum=0, maximum=100),
    "ts": I(minimum=1500000000)}, "required": ["sensor_id", "value", "ts"]},
     [{"sensor_id": "S001", "value": 21.5, "ts": 1700000000}, {"sensor_id": "S002", "value": -40.0, "battery": 99.0, "ts": 1.7e9},
      {"sensor_id": "S003", "value": 125, "ts": 1500000000.0}],
     [{"sensor_id": "S001", "value": 125.5, "ts": 1700000000}, {"sensor_id": "S001", "value": 1, "ts": 1499999999},
      {"sensor_id": "S001", "value": 1, "battery": 50.5, "ts": 1700000000}])
auto("pagination (draft 6, integer floats)", {"$schema": D6, "type": "object", "properties": {
    "page": I(minimum=1), "per_page": I(minimum=1, maximum=100), "total": I(minimum=0)}, "required": ["page", "per_page"]},
     [{"page": 1, "per_page": 20.0}, {"page": 2.0, "per_page": 100, "total": 0.0}], [{"page": 0, "per_page": 20}, {"page": 1, "per_page": 100.5}])
auto("pagination (draft 4, integer literals)", {"$schema": D4, "type": "object", "properties": {
    "page": I(minimum=1), "per_page": I(minimum=1, maximum=100)}, "required": ["page", "per_page"]},
     [{"page": 1, "per_page": 20}, {"page": 7, "per_page": 100}], [{"page": 0, "per_page": 20}, {"page": 1, "per_page": 101}])
auto("audio clip (exclusive bounds, big floats)", O({"duration_s": N(exclusiveMinimum=0, maximum=3600), "sample_rate": E(8000, 16000, 44100, 48000),
                                                     "gain_db": N(minimum=-60, maximum=12), "bytes": I(minimum=0, maximum=2147483647)},
                                                    ["duration_s", "sample_rate"], False),
     [{"duration_s": 1e-3, "sample_rate": 48000.0}, {"duration_s": 3600.0, "sample_rate": 8000, "gain_db": -60.0, "bytes": 2147483647}],
     [{"duration_s": 0, "sample_rate": 8000}, {"duration_s": 1, "sample_rate": 22050}, {"duration_s": 1, "sample_rate": 8000, "bytes": 2147483648}])
auto("telemetry histogram buckets (number arrays with bounds)", O({"le": A(N(minimum=0), minItems=1, maxItems=12),
                                                                  "counts": A(I(minimum=0), minItems=1, maxItems=12)}, ["le", "counts"]),
     [{"le": [0.005, 0.01, 0.1, 1.0, 10.0], "counts": [0, 3.0, 10, 12, 12]}, {"le": [1e2], "counts": [1]}],
     [{"le": [-1], "counts": [1]}, {"le": [1], "counts": [1.5]}, {"le": [], "counts": [1]}])
auto("currency amount (minor units, multipleOf on integers)", O({"amount_minor": I(minimum=0, multipleOf=5), "currency": S(pattern="^[A-Z]{3}$")},
                                                              ["amount_minor", "currency"], False),
     [{"amount_minor": 1250, "currency": "CHF"}, {"amount_minor": 0.0, "currency": "EUR"}, {"amount_minor": 5.0, "currency": "SEK"}],
     [{"amount_minor": 1251, "currency": "CHF"}, {"amount_minor": -5, "currency": "CHF"}, {"amount_minor": 12.5, "currency": "CHF"}])
auto("weather forecast hourly (nested bounds)", O({"hours": A(O({"t": I(minimum=0, maximum=23), "temp_c": N(minimum=-90, maximum=60),
                                                               "precip_mm": N(minimum=0), "wind_kmh": N(minimum=0, maximum=400)},
                                                              ["t", "temp_c"], False), maxItems=24)}, ["hours"]),
     [{"hours": [{"t": 0, "temp_c": -3.5}, {"t": 1.0, "temp_c": 12.0, "precip_mm": 0.0, "wind_kmh": 1e2}]}, {"hours": []}],
     [{"hours": [{"t": 24, "temp_c": 0}]}, {"hours": [{"t": 1, "temp_c": 61}]}, {"hours": [{"t": 1, "temp_c": 1, "precip_mm": -0.1}]}])

LIBRARY_DEFS = {
    "base": {"type": "object", "properties": {"name": S(pattern="^(@[a-z0-9-]+/)?[a-z0-9-._]+$"), "version": S(pattern="^[0-9]+\\.[0-9]+\\.[0-9]+"),
                                              "main": S(), "module": S(), "browser": S(), "types": S(), "exports": {}},
             "required": ["name", "version"]},
    "noBrowser": {"not": {"required": ["browser"]}}, "noModule": {"not": {"required": ["module"]}},
    "esm": {"required": ["module"]}, "typed": {"required": ["types"]}, "noExports": {"not": {"required": ["exports"]}}}
for i, (combo, valid, invalid) in enumerate([
    ({"allOf": [{"$ref": "#/definitions/base"}, {"anyOf": [{"$ref": "#/definitions/noBrowser"}, {"$ref": "#/definitions/esm"}]}]},
     [{"name": "left-pad", "version": "1.3.0"}, {"name": "ui", "version": "2.0.0", "browser": "b.js", "module": "m.js"}],
     [{"name": "ui", "version": "2.0.0", "browser": "b.js"}, {"name": "ui"}]),
    ({"allOf": [{"$ref": "#/definitions/base"}, {"anyOf": [{"$ref": "#/definitions/noModule"}, {"$ref": "#/definitions/typed"}]},
                {"anyOf": [{"$ref": "#/definitions/noExports"}, {"required": ["main"]}]}]},
     [{"name": "@acme/core", "version": "0.1.0", "module": "x.mjs", "types": "x.d.ts"}, {"name": "a", "version": "1.0.0", "exports": {".": "./a.js"}, "main": "a.js"}],
     [{"name": "a", "version": "1.0.0", "module": "x.mjs"}, {"name": "a", "version": "1.0.0", "exports": {}}]),
    ({"allOf": [{"$ref": "#/definitions/base"}, {"$ref": "#/definitions/noBrowser"}, {"$ref": "#/definitions/noModule"}]},
     [{"name": "cli-tool", "version": "3.2.1", "main": "bin.js"}, {"name": "x", "version": "0.0.1", "types": "t.d.ts"}],
     [{"name": "x", "version": "0.0.1", "module": "m.js"}, {"name": "x", "version": "0.0.1", "browser": "b.js"}]),
    ({"allOf": [{"$ref": "#/definitions/base"}, {"oneOf": [{"$ref": "#/definitions/esm"}, {"$ref": "#/definitions/noModule"}]}],
      "properties": {"private": B()}},
     [{"name": "x", "version": "1.0.0", "module": "m.js", "private": True}, {"name": "y", "version": "1.0.0"}],
     [{"name": "x", "version": "1.0.0", "private": "yes"}, {"name": "x", "version": "one"}]),
]):
    auto(f"library manifest {i + 1} (not: required beside $refs)", {"$schema": D7, "definitions": LIBRARY_DEFS, **combo}, valid, invalid)

QUBITS = A(I(minimum=0, maximum=127), minItems=1)
GATE_SHAPES = [
    O({"gate": E("h", "x", "y", "z", "s", "t"), "qubits": A(I(minimum=0, maximum=127), minItems=1, maxItems=1)}, ["gate", "qubits"], False),
    O({"gate": E("cx", "cz", "swap"), "qubits": A(I(minimum=0, maximum=127), minItems=2, maxItems=2)}, ["gate", "qubits"], False),
    O({"gate": E("rx", "ry", "rz"), "qubits": A(I(minimum=0, maximum=127), minItems=1, maxItems=1),
       "params": A(N(), minItems=1, maxItems=1)}, ["gate", "qubits", "params"], False),
    O({"gate": {"const": "measure"}, "qubits": QUBITS, "clbits": A(I(minimum=0), minItems=1)}, ["gate", "qubits", "clbits"], False)]
auto("quantum circuit (anyOf of gate shapes with array bounds)", O({"num_qubits": I(minimum=1, maximum=128),
                                                                 "ops": A({"anyOf": GATE_SHAPES}, maxItems=100)}, ["num_qubits", "ops"]),
     [{"num_qubits": 2, "ops": [{"gate": "h", "qubits": [0]}, {"gate": "cx", "qubits": [0, 1]},
                                {"gate": "measure", "qubits": [0, 1], "clbits": [0, 1]}]},
      {"num_qubits": 1, "ops": [{"gate": "rz", "qubits": [0], "params": [3.14159]}, {"gate": "rx", "qubits": [0.0], "params": [1e-3]}]}],
     [{"num_qubits": 2, "ops": [{"gate": "cx", "qubits": [0]}]}, {"num_qubits": 2, "ops": [{"gate": "h", "qubits": [0, 1]}]},
      {"num_qubits": 2, "ops": [{"gate": "rz", "qubits": [0]}]}])
auto("quantum circuit (oneOf gate shapes)", {"type": "array", "items": {"oneOf": GATE_SHAPES[:3]}, "minItems": 1},
     [[{"gate": "x", "qubits": [3]}], [{"gate": "swap", "qubits": [1, 2]}, {"gate": "ry", "qubits": [1], "params": [-0.5]}]],
     [[], [{"gate": "swap", "qubits": [1, 2, 3]}], [{"gate": "ry", "qubits": [1], "params": []}]])
auto("quantum job (anyOf shapes, bounded shots)", O({"backend": S(minLength=1), "shots": I(minimum=1, maximum=100000),
                                                   "circuits": A({"anyOf": [A({"anyOf": GATE_SHAPES[:2]}, minItems=1, maxItems=64),
                                                                            O({"qasm": S(minLength=1)}, ["qasm"], False)]}, minItems=1, maxItems=8)},
                                                  ["backend", "shots", "circuits"], False),
     [{"backend": "sim", "shots": 1024.0, "circuits": [[{"gate": "h", "qubits": [0]}]]},
      {"backend": "qpu-1", "shots": 1e5, "circuits": [{"qasm": "OPENQASM 2.0;"}, [{"gate": "cz", "qubits": [0, 1]}]]}],
     [{"backend": "sim", "shots": 0, "circuits": [{"qasm": "x"}]}, {"backend": "sim", "shots": 1, "circuits": []},
      {"backend": "sim", "shots": 1, "circuits": [[{"gate": "cz", "qubits": [0]}]]}])

# smart-home device commands with bounded numeric parameters (floats where integers are asked, exponents)
for device, params, valid, invalid in [
    ("fan", {"speed": I(minimum=0, maximum=5), "oscillate": B()}, [{"speed": 3.0}, {"speed": 0, "oscillate": True}], [{"speed": 6}, {"speed": 2.5}]),
    ("blinds", {"position": I(minimum=0, maximum=100), "tilt_deg": N(minimum=-90, maximum=90)}, [{"position": 100.0, "tilt_deg": -90}, {"position": 40}],
     [{"position": 101}, {"position": 5, "tilt_deg": 90.5}]),
    ("water_heater", {"target_c": N(minimum=35, maximum=75), "boost_minutes": I(minimum=0, maximum=120, multipleOf=15)},
     [{"target_c": 55.5}, {"target_c": 75.0, "boost_minutes": 30.0}], [{"target_c": 80}, {"target_c": 60, "boost_minutes": 20}]),
    ("sprinkler", {"zone": I(minimum=1, maximum=16), "minutes": N(exclusiveMinimum=0, maximum=90)}, [{"zone": 1, "minutes": 0.5}, {"zone": 16.0, "minutes": 9e1}],
     [{"zone": 0, "minutes": 5}, {"zone": 2, "minutes": 0}]),
    ("ev_charger", {"amps": I(minimum=6, maximum=48), "stop_at_percent": I(minimum=50, maximum=100, multipleOf=10)},
     [{"amps": 32}, {"amps": 6.0, "stop_at_percent": 80.0}], [{"amps": 5}, {"amps": 16, "stop_at_percent": 85}]),
    ("speaker", {"volume": N(minimum=0, maximum=1), "bass": I(minimum=-10, maximum=10)}, [{"volume": 0.35}, {"volume": 1.0, "bass": -10.0}],
     [{"volume": 1.5}, {"volume": 0.5, "bass": 11}]),
]:
    tool(f"smart home: {device}", {"device_id": S(pattern="^[a-z0-9-]{3,32}$"), **params}, ["device_id", next(iter(params))],
         [{"device_id": "dev-01", **v} for v in valid], [{"device_id": "dev-01", **v} for v in invalid])

# metrics / analytics events (Snowplow-like self-describing, numbers by value)
for event, props, req, valid, invalid in [
    ("page_ping", {"min_x": I(minimum=0), "max_x": I(minimum=0), "min_y": I(minimum=0), "max_y": I(minimum=0)}, ["min_x", "max_y"],
     [{"min_x": 0, "max_y": 1200.0}, {"min_x": 10.0, "max_x": 1920, "min_y": 0, "max_y": 3.2e3}], [{"min_x": -1, "max_y": 1}, {"min_x": 1.5, "max_y": 1}]),
    ("video_progress", {"percent": N(minimum=0, maximum=100), "position_s": N(minimum=0), "muted": B()}, ["percent"],
     [{"percent": 25.0}, {"percent": 100, "position_s": 1.2e2, "muted": False}], [{"percent": 100.01}, {"percent": 5, "position_s": -1}]),
    ("purchase", {"order_id": S(minLength=1), "revenue": N(minimum=0), "items": I(minimum=1, maximum=999)}, ["order_id", "revenue"],
     [{"order_id": "o-1", "revenue": 0}, {"order_id": "o-2", "revenue": 1e2, "items": 3.0}], [{"order_id": "", "revenue": 1}, {"order_id": "o", "revenue": -0.01}]),
    ("app_timing", {"category": S(maxLength=64), "variable": S(maxLength=64), "timing_ms": I(minimum=0, maximum=3600000)}, ["category", "timing_ms"],
     [{"category": "boot", "timing_ms": 1500.0}, {"category": "db", "variable": "q1", "timing_ms": 3.6e6}], [{"category": "x", "timing_ms": 3600001}, {"category": "x", "timing_ms": 12.5}]),
    ("rating", {"stars": I(minimum=1, maximum=5), "comment": S(maxLength=500)}, ["stars"],
     [{"stars": 5.0}, {"stars": 1, "comment": "meh"}], [{"stars": 0}, {"stars": 4.5}]),
    ("geo_ping", {"lat": N(minimum=-90, maximum=90), "lon": N(minimum=-180, maximum=180), "accuracy_m": N(exclusiveMinimum=0)}, ["lat", "lon"],
     [{"lat": 59.3293, "lon": 18.0686}, {"lat": 0.0, "lon": -0.0, "accuracy_m": 1.5e1}], [{"lat": -91, "lon": 0}, {"lat": 1, "lon": 1, "accuracy_m": 0}]),
]:
    auto(f"snowplow-like {event} (bounded numbers)", {"self": {"vendor": "com.example", "name": event, "format": "jsonschema", "version": "1-0-0"},
                                                     **O(props, req, False)}, valid, invalid)

# REST resources with numeric constraints (OpenAPI-like, int32/int64 formats, draft 4 and 2020-12)
for resource, props, req, valid, invalid, draft in [
    ("Product", {"id": I(format="int64", minimum=1), "price": N(minimum=0, exclusiveMaximum=1000000), "stock": I(format="int32", minimum=0),
                 "weight_kg": N(minimum=0)}, ["id", "price"],
     [{"id": 1, "price": 9.99}, {"id": 42, "price": 0, "stock": 2147483647, "weight_kg": 1.0}], [{"id": 0, "price": 1}, {"id": 1, "price": 1000000}], None),
    ("Invoice", {"number": I(minimum=1), "subtotal": N(minimum=0), "tax_rate": N(minimum=0, maximum=0.5), "due_in_days": I(minimum=0, maximum=365)},
     ["number", "subtotal"], [{"number": 1001, "subtotal": 250.0, "tax_rate": 0.2}, {"number": 7.0, "subtotal": 0, "due_in_days": 30.0}],
     [{"number": 0, "subtotal": 1}, {"number": 1, "subtotal": 1, "tax_rate": 0.6}], None),
    ("Shipment", {"id": I(format="int64"), "parcels": I(minimum=1, maximum=99), "declared_value": N(minimum=0)}, ["id", "parcels"],
     [{"id": 5, "parcels": 1}, {"id": -3, "parcels": 99, "declared_value": 12.5}], [{"id": 5, "parcels": 100}, {"id": 5, "parcels": 1.5}], D4),
    ("Subscription", {"seats": I(minimum=1, maximum=10000), "unit_amount": I(minimum=0, multipleOf=100), "trial_days": I(minimum=0, maximum=90)},
     ["seats", "unit_amount"], [{"seats": 5, "unit_amount": 1200}, {"seats": 1.0, "unit_amount": 0.0, "trial_days": 14}],
     [{"seats": 0, "unit_amount": 100}, {"seats": 1, "unit_amount": 150}], None),
    ("Reservation", {"party_size": I(minimum=1, maximum=20), "table": I(minimum=1), "deposit": N(minimum=0, maximum=500)}, ["party_size"],
     [{"party_size": 2}, {"party_size": 20.0, "table": 12, "deposit": 5e2}], [{"party_size": 21}, {"party_size": 4, "deposit": 500.5}], D7),
    ("Loan", {"principal": N(exclusiveMinimum=0, maximum=1e7), "rate_apr": N(minimum=0, maximum=36), "term_months": E(12, 24, 36, 60, 72)},
     ["principal", "rate_apr", "term_months"], [{"principal": 25000.0, "rate_apr": 6.5, "term_months": 60}, {"principal": 1e7, "rate_apr": 0, "term_months": 12.0}],
     [{"principal": 0, "rate_apr": 1, "term_months": 12}, {"principal": 100, "rate_apr": 1, "term_months": 48}], None),
]:
    schema = O(props, req)
    if draft:
        schema = {"$schema": draft, **schema}
    auto(f"openapi: {resource} (numeric constraints)", schema, valid, invalid)

# configuration files with numeric limits
for cfg, props, valid, invalid in [
    ("nginx-like worker limits", {"worker_processes": {"anyOf": [I(minimum=1, maximum=256), {"const": "auto"}]}, "worker_connections": I(minimum=1, maximum=65535),
                                  "keepalive_timeout_s": N(minimum=0, maximum=3600)},
     [{"worker_processes": "auto", "worker_connections": 1024}, {"worker_processes": 4.0, "keepalive_timeout_s": 6.5e1}],
     [{"worker_processes": 0}, {"worker_connections": 70000}]),
    ("postgres-like tuning", {"max_connections": I(minimum=1, maximum=262143), "shared_buffers_mb": I(minimum=16), "random_page_cost": N(minimum=0, maximum=1e5),
                              "checkpoint_completion_target": N(minimum=0, maximum=1)},
     [{"max_connections": 100, "random_page_cost": 1.1}, {"shared_buffers_mb": 4096.0, "checkpoint_completion_target": 0.9}],
     [{"max_connections": 0}, {"checkpoint_completion_target": 1.5}]),
    ("jvm-like heap", {"xms_mb": I(minimum=16, multipleOf=16), "xmx_mb": I(minimum=16, multipleOf=16), "gc": E("g1", "zgc", "parallel")},
     [{"xms_mb": 512, "xmx_mb": 2048.0}, {"gc": "zgc"}], [{"xms_mb": 500}, {"xmx_mb": 8}]),
    ("rate limiter", {"requests_per_second": N(exclusiveMinimum=0, maximum=1e6), "burst": I(minimum=1), "window_s": I(minimum=1, maximum=86400)},
     [{"requests_per_second": 0.5, "burst": 1}, {"requests_per_second": 1e3, "burst": 50.0, "window_s": 60}],
     [{"requests_per_second": 0}, {"burst": 0}, {"window_s": 86401}]),
    ("retry policy", {"max_attempts": I(minimum=1, maximum=10), "initial_backoff_s": N(exclusiveMinimum=0), "multiplier": N(minimum=1, maximum=10),
                      "jitter": N(minimum=0, maximum=1)},
     [{"max_attempts": 3, "initial_backoff_s": 0.1, "multiplier": 2.0}, {"max_attempts": 10.0, "jitter": 0.0}],
     [{"max_attempts": 0}, {"multiplier": 0.5}, {"jitter": 1.1}]),
    ("autoscaler", {"min_replicas": I(minimum=0, maximum=1000), "max_replicas": I(minimum=1, maximum=1000), "target_cpu": N(minimum=0.05, maximum=1),
                    "cooldown_s": I(minimum=0, multipleOf=30)},
     [{"min_replicas": 1, "max_replicas": 10, "target_cpu": 0.6}, {"max_replicas": 1000.0, "cooldown_s": 300.0}],
     [{"min_replicas": -1}, {"target_cpu": 0.01}, {"cooldown_s": 45}]),
]:
    auto(f"config: {cfg}", O(props, (), False), valid, invalid)

# uniqueItems / not / propertyNames shapes issue 33 lists (kept whether or not sprig compiles them)
auto("tags: uniqueItems over an enum with bounds", O({"days": A(E("mon", "tue", "wed", "thu", "fri", "sat", "sun"), uniqueItems=True, minItems=1, maxItems=7),
                                                    "priority": I(minimum=1, maximum=5)}, ["days"]),
     [{"days": ["mon", "fri"]}, {"days": ["sun"], "priority": 5.0}], [{"days": []}, {"days": ["mon", "mon"]}, {"days": ["mon"], "priority": 0}])
auto("object without a forbidden key (not: required)", O({"name": S(), "password": S(), "token": S()}, ["name"],
                                                       **{"not": {"required": ["password", "token"]}}),
     [{"name": "a"}, {"name": "a", "password": "p"}, {"name": "a", "token": "t"}], [{"name": "a", "password": "p", "token": "t"}, {"password": "p"}])
auto("feature matrix (propertyNames + bounded values)", {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9_]{0,30}$"},
                                                       "additionalProperties": N(minimum=0, maximum=1), "maxProperties": 8},
     [{"dark_mode": 1.0, "beta": 0.25}, {}], [{"Dark": 1}, {"x": 2}, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1}])

# kubernetes-like numeric fields (probes, ports, resources)
for name, props, valid, invalid in [
    ("liveness probe", {"initialDelaySeconds": I(minimum=0), "periodSeconds": I(minimum=1), "timeoutSeconds": I(minimum=1),
                        "failureThreshold": I(minimum=1), "httpGet": O({"path": S(pattern="^/"), "port": I(minimum=1, maximum=65535)}, ["port"])},
     [{"periodSeconds": 10, "httpGet": {"path": "/healthz", "port": 8080}}, {"initialDelaySeconds": 0.0, "failureThreshold": 3.0}],
     [{"periodSeconds": 0}, {"httpGet": {"port": 70000}}]),
    ("service port", {"port": I(minimum=1, maximum=65535), "targetPort": {"anyOf": [I(minimum=1, maximum=65535), S(pattern="^[a-z]([-a-z0-9]*[a-z0-9])?$", maxLength=15)]},
                      "nodePort": I(minimum=30000, maximum=32767), "protocol": E("TCP", "UDP", "SCTP")},
     [{"port": 80, "targetPort": "http"}, {"port": 443.0, "targetPort": 8443, "nodePort": 30443, "protocol": "TCP"}],
     [{"port": 0}, {"port": 80, "nodePort": 29999}, {"port": 80, "targetPort": "Not_Valid"}]),
    ("pod disruption budget", {"minAvailable": {"anyOf": [I(minimum=0), S(pattern="^[0-9]{1,3}%$")]}, "maxUnavailable": {"anyOf": [I(minimum=0), S(pattern="^[0-9]{1,3}%$")]}},
     [{"minAvailable": 2}, {"maxUnavailable": "25%"}, {"minAvailable": 1.0}], [{"minAvailable": -1}, {"maxUnavailable": "lots"}]),
    ("job spec", {"parallelism": I(minimum=0), "completions": I(minimum=0), "backoffLimit": I(minimum=0, maximum=100),
                  "activeDeadlineSeconds": I(minimum=1), "ttlSecondsAfterFinished": I(minimum=0)},
     [{"parallelism": 2, "completions": 10}, {"backoffLimit": 6.0, "activeDeadlineSeconds": 3.6e3}], [{"backoffLimit": 101}, {"activeDeadlineSeconds": 0}]),
]:
    auto(f"kubernetes: {name} (numbers by value)", O(props, (), False, **{"x-kubernetes-preserve-unknown-fields": False}), valid, invalid)

# LLM / chat API payloads
auto("chat completion request (sampling bounds)", O({
    "model": S(minLength=1), "messages": A(O({"role": E("system", "user", "assistant", "tool"), "content": {"type": ["string", "null"]}},
                                             ["role", "content"], False), minItems=1),
    "temperature": N(minimum=0, maximum=2), "top_p": N(exclusiveMinimum=0, maximum=1), "max_tokens": I(minimum=1, maximum=131072),
    "presence_penalty": N(minimum=-2, maximum=2), "n": I(minimum=1, maximum=16), "seed": I(format="int64")}, ["model", "messages"], False),
     [{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "max_tokens": 256.0},
      {"model": "m", "messages": [{"role": "assistant", "content": None}], "top_p": 1.0, "n": 1, "seed": -42, "presence_penalty": -2.0}],
     [{"model": "m", "messages": [], "temperature": 1}, {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 2.5},
      {"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0}])
auto("embedding request (dimensions multipleOf)", O({"input": {"anyOf": [S(), A(S(), minItems=1, maxItems=2048)]}, "model": S(),
                                                    "dimensions": I(minimum=64, maximum=3072, multipleOf=64), "encoding_format": E("float", "base64")},
                                                   ["input", "model"], False),
     [{"input": "hello", "model": "e"}, {"input": ["a", "b"], "model": "e", "dimensions": 256.0}],
     [{"input": [], "model": "e"}, {"input": "x", "model": "e", "dimensions": 100}, {"input": "x", "model": "e", "dimensions": 4096}])
auto("tool result with scores (number arrays)", O({"tool_call_id": S(minLength=1), "results": A(O({"doc": S(), "score": N(minimum=0, maximum=1)},
                                                                                               ["doc", "score"], False), maxItems=10)},
                                                 ["tool_call_id", "results"], False),
     [{"tool_call_id": "c1", "results": [{"doc": "a", "score": 1.0}, {"doc": "b", "score": 0.125}]}, {"tool_call_id": "c2", "results": []}],
     [{"tool_call_id": "c1", "results": [{"doc": "a", "score": 1.01}]}, {"tool_call_id": "", "results": []}])

# CI / workflow configuration with numeric limits
auto("ci job (timeouts, matrix of versions)", O({
    "runs-on": S(), "timeout-minutes": N(minimum=1, maximum=360), "strategy": O({"max-parallel": I(minimum=1), "fail-fast": B(),
                                                                              "matrix": O({"python": A(S(pattern="^3\\.[0-9]+$"), minItems=1, uniqueItems=True)})}),
    "continue-on-error": B()}, ["runs-on"]),
     [{"runs-on": "ubuntu-latest", "timeout-minutes": 30.0}, {"runs-on": "x", "strategy": {"max-parallel": 2.0, "matrix": {"python": ["3.11", "3.12"]}}}],
     [{"runs-on": "x", "timeout-minutes": 0.5}, {"runs-on": "x", "strategy": {"max-parallel": 0}}])
auto("cron-like schedule (integer fields as numbers)", O({"minute": I(minimum=0, maximum=59), "hour": I(minimum=0, maximum=23),
                                                        "day_of_month": I(minimum=1, maximum=31), "month": I(minimum=1, maximum=12),
                                                        "day_of_week": I(minimum=0, maximum=6)}, ["minute", "hour"], False),
     [{"minute": 0, "hour": 3}, {"minute": 30.0, "hour": 23.0, "day_of_week": 6, "month": 12}], [{"minute": 60, "hour": 1}, {"minute": 1, "hour": 1, "month": 0}])

# geometry and measurement shapes
auto("bounding box (4 bounded numbers, prefixItems)", {"type": "array", "prefixItems": [N(minimum=-180, maximum=180), N(minimum=-90, maximum=90),
                                                                                         N(minimum=-180, maximum=180), N(minimum=-90, maximum=90)],
                                                      "items": False, "minItems": 4},
     [[-10.5, 35.0, 30.25, 60.0], [-180, -90, 180.0, 90.0]], [[0, 0, 0], [0, 91, 0, 0], [0, 0, 0, 0, 0]])
auto("color (rgb channels 0..255, alpha 0..1)", O({"r": I(minimum=0, maximum=255), "g": I(minimum=0, maximum=255), "b": I(minimum=0, maximum=255),
                                                  "a": N(minimum=0, maximum=1)}, ["r", "g", "b"], False),
     [{"r": 255, "g": 128.0, "b": 0}, {"r": 0.0, "g": 0, "b": 0, "a": 0.5}], [{"r": 256, "g": 0, "b": 0}, {"r": 1, "g": 1, "b": 1, "a": 2}])
auto("unit-tagged measurement (oneOf by unit with ranges)", {"oneOf": [
    O({"unit": {"const": "celsius"}, "value": N(minimum=-273.15)}, ["unit", "value"], False),
    O({"unit": {"const": "kelvin"}, "value": N(minimum=0)}, ["unit", "value"], False)]},
     [{"unit": "celsius", "value": -273.15}, {"unit": "kelvin", "value": 0.0}, {"unit": "kelvin", "value": 3e2}],
     [{"unit": "kelvin", "value": -1}, {"unit": "celsius", "value": -300}, {"unit": "fahrenheit", "value": 1}])
auto("recursive budget tree (bounded amounts)", {"$defs": {"node": O({"name": S(minLength=1), "amount": N(minimum=0),
                                                                      "children": A({"$ref": "#/$defs/node"}, maxItems=5)}, ["name", "amount"], False)},
                                                "$ref": "#/$defs/node"},
     [{"name": "root", "amount": 1e4, "children": [{"name": "a", "amount": 2500.0}, {"name": "b", "amount": 0}]}, {"name": "leaf", "amount": 1.5}],
     [{"name": "root", "amount": -1}, {"name": "root", "amount": 1, "children": [{"name": "", "amount": 1}]}])
auto("semver range object (integers by value)", O({"major": I(minimum=0), "minor": I(minimum=0), "patch": I(minimum=0),
                                                  "prerelease": S(pattern="^[0-9A-Za-z.-]+$")}, ["major", "minor", "patch"], False),
     [{"major": 1, "minor": 0, "patch": 0}, {"major": 2.0, "minor": 10.0, "patch": 3, "prerelease": "rc.1"}],
     [{"major": -1, "minor": 0, "patch": 0}, {"major": 1, "minor": 0.5, "patch": 0}])
auto("battery report (exclusiveMaximum, integer percent)", O({"percent": I(minimum=0, maximum=100), "voltage": N(exclusiveMinimum=0, exclusiveMaximum=5),
                                                             "cycles": I(minimum=0), "charging": B()}, ["percent", "voltage"], False),
     [{"percent": 87, "voltage": 3.85}, {"percent": 100.0, "voltage": 4.999, "cycles": 1.2e3, "charging": True}],
     [{"percent": 87, "voltage": 5}, {"percent": 87.5, "voltage": 3.7}, {"percent": 87, "voltage": 0}])
auto("draft-4 exclusive booleans with float bounds", {"$schema": D4, "type": "object", "properties": {
    "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}, "count": {"type": "integer", "minimum": 1}}, "required": ["ratio"]},
     [{"ratio": 0.5}, {"ratio": 1, "count": 3}], [{"ratio": 0}, {"ratio": 1.5}, {"ratio": 0.5, "count": 0}])


# ---- issue 33's failure shapes, written anew: not over key rules, uniqueItems over objects, deep nesting,
# many object shapes, bounded numbers in odd spellings, not: {required} inside applicators of $refs, anyOf of
# object shapes with array bounds
auto("labels map with at least one non-empty value (not over additionalProperties)",
     O({"selector": {"type": "object", "additionalProperties": S(maxLength=63),
                     "not": {"additionalProperties": S(maxLength=0)}}}, ["selector"], False),
     [{"selector": {"app": "web"}}, {"selector": {"tier": "", "app": "api"}}],
     [{"selector": {}}, {"selector": {"app": ""}}, {"selector": {"app": 1}}])
auto("openapi path item needs a non-extension key (not over propertyNames)",
     {"type": "object", "patternProperties": {"^x-": {}}, "additionalProperties": O({"operationId": S()}),
      "not": {"propertyNames": {"pattern": "^x-"}}},
     [{"get": {"operationId": "list"}}, {"x-internal": True, "post": {}}],
     [{}, {"x-internal": True}, {"get": []}])
auto("custom-fields object must carry a key beyond the standard ones (not additionalProperties false)",
     O({"id": S(), "created": S(format="date-time")}, ["id"], None,
       **{"not": {"properties": {"id": {}, "created": {}}, "additionalProperties": False}}),
     [{"id": "1", "color": "red"}, {"id": "2", "created": "2024-01-01T00:00:00Z", "size": 3}],
     [{"id": "1"}, {"id": "1", "created": "2024-01-01T00:00:00Z"}, {"color": "red"}])
auto("env map where some SECRET_ key is set (not over patternProperties)",
     {"type": "object", "additionalProperties": S(), "not": {"patternProperties": {"^SECRET_": S(maxLength=0)}}},
     [{"SECRET_TOKEN": "abc"}, {"PATH": "/bin", "SECRET_A": "", "SECRET_B": "x"}],
     [{"PATH": "/bin"}, {"SECRET_A": ""}, {"SECRET_A": 5}])
auto("feature flags: not every flag off (not over additionalProperties in anyOf)",
     {"type": "object", "additionalProperties": B(), "anyOf": [{"required": ["force"]},
                                                                {"not": {"additionalProperties": {"const": False}}}]},
     [{"force": False}, {"a": False, "b": True}],
     [{}, {"a": False, "b": False}, {"a": "on"}])
auto("grid moves with unique cells (uniqueItems over objects)",
     A(O({"row": I(minimum=0, maximum=2), "col": I(minimum=0, maximum=2)}, ["row", "col"], False),
       uniqueItems=True, minItems=1, maxItems=9),
     [[{"row": 0, "col": 0}], [{"row": 1, "col": 1}, {"row": 0, "col": 2}, {"row": 2, "col": 0}]],
     [[], [{"row": 0, "col": 0}, {"row": 0, "col": 0}], [{"row": 3, "col": 0}]])
auto("notification channels, each at most once (uniqueItems over tagged objects)",
     O({"channels": A({"oneOf": [O({"kind": {"const": "email"}, "digest": B()}, ["kind"], False),
                                 O({"kind": {"const": "sms"}}, ["kind"], False),
                                 O({"kind": {"const": "push"}, "sound": E("on", "off")}, ["kind"], False)]},
                      uniqueItems=True)}, ["channels"], False),
     [{"channels": []}, {"channels": [{"kind": "email", "digest": True}, {"kind": "sms"}, {"kind": "email"}]}],
     [{"channels": [{"kind": "sms"}, {"kind": "sms"}]}, {"channels": [{"kind": "fax"}]},
      {"channels": [{"kind": "push", "sound": "loud"}]}])


def _nested(depth):
    node = O({"value": I(minimum=0, maximum=9)}, ["value"], False)
    for _i in range(depth):
        node = O({"name": S(maxLength=8), "child": node, "n": N(minimum=0.5)}, ["child"], False)
    return node


def _nested_value(depth, leaf):
    value = {"value": leaf}
    for i in range(depth):
        value = {"child": value, "n": 1e1} if i % 2 else {"name": f"l{i}", "child": value}
    return value


auto("deeply nested configuration (40 declared levels)", _nested(40),
     [_nested_value(40, 3), _nested_value(40, 9.0)], [_nested_value(40, 10), _nested_value(39, 3), _nested_value(40, "3")])
SHAPES = {f"event_{i}": O({"type": {"const": f"event_{i}"}, "at": S(format="date-time"),
                           f"field_{i}": I(minimum=i) if i % 2 else S(minLength=i % 4)}, ["type", "at"], False)
          for i in range(16)}
auto("webhook envelope over 16 event shapes (many object shapes)", {"oneOf": list(SHAPES.values())},
     [{"type": "event_3", "at": "2024-05-01T10:00:00Z", "field_3": 3.0},
      {"type": "event_14", "at": "2024-05-01T10:00:00+02:00", "field_14": "ab"}],
     [{"type": "event_3", "at": "2024-05-01T10:00:00Z", "field_3": 2}, {"type": "event_16", "at": "2024-05-01T10:00:00Z"},
      {"type": "event_2", "at": "yesterday"}])
auto("image resize request (bounded numbers in odd spellings)",
     O({"width": I(minimum=16, maximum=8192), "scale": N(exclusiveMinimum=0, maximum=4),
        "quality": N(minimum=0.5, maximum=1e2), "dpi": I(minimum=72, multipleOf=3)}, ["width"], False),
     [{"width": 2048.0, "scale": 2.5e-1, "quality": 9.5e1}, {"width": 1.6e1, "dpi": 7.2e1}, {"width": 8192, "quality": 0.5}],
     [{"width": 8193.0}, {"width": 64, "scale": 0.0}, {"width": 64, "dpi": 73}, {"width": 64, "quality": 1e3}])
auto("plugin manifest (not required inside allOf and anyOf of $refs)", {
    "$defs": {"base": O({"name": S(minLength=1), "main": S(), "exports": S()}, ["name"]),
              "esm": {"required": ["exports"], "not": {"required": ["main"]}},
              "cjs": {"required": ["main"]}},
    "allOf": [{"$ref": "#/$defs/base"}, {"anyOf": [{"$ref": "#/$defs/esm"}, {"$ref": "#/$defs/cjs"}]},
              {"not": {"required": ["legacy"]}}]},
    [{"name": "p", "exports": "./i.js"}, {"name": "p", "main": "i.js", "exports": "./i.js"}, {"name": "p", "main": "i.js"}],
    [{"name": "p"}, {"name": "p", "main": "i.js", "legacy": True}, {"name": "", "main": "x"}])
auto("optimizer circuit layer (anyOf of object shapes with array bounds)", {"type": "array", "maxItems": 8, "items": {"anyOf": [
    O({"gate": E("rx", "ry", "rz"), "qubits": A(I(minimum=0), minItems=1, maxItems=1), "angle": N(minimum=-6.3, maximum=6.3)},
      ["gate", "qubits", "angle"], False),
    O({"gate": E("cx", "cz", "swap"), "qubits": A(I(minimum=0), minItems=2, maxItems=2)}, ["gate", "qubits"], False),
    O({"gate": {"const": "measure"}, "qubits": A(I(minimum=0), minItems=1), "bits": A(I(minimum=0), minItems=1)},
      ["gate", "qubits"], False)]}},
    [[{"gate": "rx", "qubits": [0], "angle": 1.5707}, {"gate": "cx", "qubits": [0, 1]}],
     [{"gate": "measure", "qubits": [0, 1, 2], "bits": [0, 1, 2]}, {"gate": "rz", "qubits": [2.0], "angle": -3e0}]],
    [[{"gate": "cx", "qubits": [0]}], [{"gate": "rx", "qubits": [0, 1], "angle": 0}], [{"gate": "rx", "qubits": [0], "angle": 7}]])

with open(Path(__file__).parent / "corpus.json", "w") as out:  # why: beside this script, wherever it runs from
    json.dump(C, out, indent=1, ensure_ascii=False)
print(len(C), "schemas,", sum(len(c["valid"]) + len(c["invalid"]) for c in C), "instances")


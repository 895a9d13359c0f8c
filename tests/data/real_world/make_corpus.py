"""Writes corpus.json: real-world-shaped schemas written for sprig's tests (Apache-2.0, this repository)."""
import json
from pathlib import Path

C = []


def add(name, schema, valid, invalid):
    C.append({"name": name, "schema": schema, "valid": valid, "invalid": invalid})


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
    [{"code": 404, "message": "not found"}], [{"code": 99, "message": "x"}, {"code": 404}])
add("kubernetes: ConfigMap-like", {"type": "object", "properties": {
    "apiVersion": {"type": "string", "const": "v1"}, "kind": {"const": "ConfigMap"},
    "metadata": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                                                  "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
                 "required": ["name"], "x-kubernetes-preserve-unknown-fields": True},
    "data": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "granular"}},
    "required": ["apiVersion", "kind", "metadata"]},
    [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"a": "1"}}],
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
    [{"element": "button", "x": 12, "ts": "2024-01-02T03:04:05Z"}], [{"element": "b", "x": -1}, {"element": "b", "ts": "yesterday"}])
add("recursive tree ($ref)", {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["name"], "additionalProperties": False}},
    "$ref": "#/$defs/node"},
    [{"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [{"name": "d", "children": [{"name": "e"}]}]}]}]}],
    [{"name": "a", "children": [{"children": []}]}, {"name": "a", "extra": 1}])
add("unconstrained payload (any depth)", {"type": "object", "properties": {"event": {"type": "string"}, "payload": {}},
    "required": ["event", "payload"]},
    [{"event": "e", "payload": {"a": [{"b": {"c": [[[{"d": None}]]]}}]}}], [{"event": "e"}, {"payload": 1}])
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
    [{"email": "ada@example.com", "homepage": "https://example.com/ada"}], [{"email": "not an email"}, {"email": "a@b.co", "homepage": "no scheme"}])
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
    [{"emails": [{"address": "a"}, {"address": "b", "primary": True}]}],
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
    [{"id": 0, "geometryType": "esriGeometryPoint"}], [{"id": -1, "geometryType": "esriGeometryPoint"}, {"id": 1}])

with open(Path(__file__).parent / "corpus.json", "w") as out:  # why: beside this script, wherever it runs from
    json.dump(C, out, indent=1, ensure_ascii=False)
print(len(C), "schemas,", sum(len(c["valid"]) + len(c["invalid"]) for c in C), "instances")

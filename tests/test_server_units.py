"""Server pieces without a server process: tool-call parsing, schemas, limits, keys files, errors, readiness."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from sprig.runtime.errors import RequestError
from sprig.runtime.server import auth as server_auth
from sprig.runtime.server.auth import Authenticator, KeyEntry, Tenant, TokenBucket, load_keys_file
from sprig.runtime.server.http_common import APIError, _loc_param, from_value_error, sanitize
from sprig.runtime.server.openai_convert import template_messages
from sprig.runtime.server.openai_protocol import ChatMessage, FunctionDef, NamedToolChoice, ToolDef
from sprig.runtime.server.openai_tools import (
    ToolChoiceKind,
    calls_from_output,
    check_schema,
    plan_tools,
    tool_constraint,
)

F = ToolDef(type="function", function=FunctionDef(name="f", parameters={
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}))
G = ToolDef(type="function", function=FunctionDef(name="g"))


# --- tools ------------------------------------------------------------------------------------------------


def test_tagged_calls_are_parsed_and_bad_blocks_stay_content():
    plan = plan_tools([F], None)
    text = 'Sure. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call> and <tool_call>{oops}</tool_call>'
    content, calls = calls_from_output(plan, text)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("f", {"a": 1})]
    assert content == "Sure.  and <tool_call>{oops}</tool_call>"
    assert calls_from_output(plan, '<tool_call>{"name": "zzz", "arguments": {}}</tool_call>')[1] == []


def test_plan_tools_validates_names_schemas_and_choice():
    plan = plan_tools([F, G], NamedToolChoice(type="function", function={"name": "g"}))
    assert plan.kind is ToolChoiceKind.NAMED and plan.name == "g"
    assert plan_tools([F], None).kind is ToolChoiceKind.AUTO and plan_tools(None, None) is None
    for tools, choice, param in (([F, F], None, "tools.1.function.name"),
                                 ([F], NamedToolChoice(type="function", function={"name": "x"}), "tool_choice"),
                                 (None, "required", "tool_choice")):
        with pytest.raises(APIError) as e:
            plan_tools(tools, choice)
        assert e.value.status == 400 and e.value.param == param


def test_required_and_named_constraints_are_forced_structural_tags():
    from sprig.grammar.structural import StructuralTag, TagMode

    plan = plan_tools([F, G], "required")
    tag = StructuralTag.from_json(tool_constraint(plan))
    assert tag.mode is TagMode.FORCED and tag.parallel and len(tag.structures) == 2
    assert tag.structures[0].begin == '<tool_call>\n{"name": "f", "arguments": '
    output = '<tool_call>\n{"name": "f", "arguments": {"a": 3}}\n</tool_call>\n' \
             '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
    content, calls = calls_from_output(plan, output)
    assert content is None and [c.function.name for c in calls] == ["f", "g"]
    assert calls_from_output(plan, "not json") == ("not json", [])
    named = plan_tools([F, G], NamedToolChoice(type="function", function={"name": "f"}), parallel=True)
    tag = StructuralTag.from_json(tool_constraint(named))
    assert tag.mode is TagMode.FORCED and not tag.parallel and len(tag.structures) == 1
    assert json.loads(tag.structures[0].schema) == F.function.parameters
    auto = StructuralTag.from_json(tool_constraint(plan_tools([F], None, parallel=False)))
    assert auto.mode is TagMode.TRIGGERED and not auto.parallel and auto.triggers == ("<tool_call>",)
    assert tool_constraint(plan_tools([F], None, constrain=False)) is None


def test_schema_checks_bound_depth_size_and_validity():
    deep: dict = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"x": deep}}
    for schema, word in ((deep, "deeper"), ({"enum": list(range(20000))}, "larger"), ({"type": "nope"}, "invalid")):
        with pytest.raises(APIError) as e:
            check_schema(schema, "json_schema")
        assert e.value.code == "invalid_schema" and word in e.value.message


def test_template_messages_map_roles_and_tool_history():
    tok = SimpleNamespace(chat_template="{{ messages }}")
    messages = [ChatMessage(role="developer", content="be brief"),
                ChatMessage(role="assistant", content=None, tool_calls=[
                    {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}]),
                ChatMessage(role="tool", content="42", tool_call_id="c1")]
    items, tools = template_messages(messages, tok, plan_tools([F], None))
    assert tools is None and items[0]["role"] == "system" and "<tools>" in items[0]["content"]
    assert '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>' in items[1]["content"]
    assert items[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}


# --- limits and keys --------------------------------------------------------------------------------------


def test_token_bucket_refills_continuously(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(server_auth.time, "monotonic", lambda: now[0])
    bucket = TokenBucket(60)
    bucket.take(60)
    assert bucket.wait_time() == pytest.approx(1.0)
    now[0] += 0.5
    assert bucket.wait_time() == pytest.approx(0.5)
    bucket.take(30)  # token debits may go below zero
    now[0] += 10
    assert bucket.wait_time() == pytest.approx(20.5)


def test_tenant_limits_raise_429_with_retry_after():
    tenant = Tenant("t", max_concurrent=1, requests=TokenBucket(2))
    tenant.admit()
    with pytest.raises(server_auth.RateLimited) as e:
        tenant.admit()
    assert e.value.kind is server_auth.LimitKind.CONCURRENT and e.value.status == 429
    tenant.release(5)
    tenant.admit()
    tenant.release(0)
    with pytest.raises(server_auth.RateLimited) as e:
        tenant.admit()
    assert e.value.kind is server_auth.LimitKind.REQUESTS_PER_MINUTE and int(e.value.headers["Retry-After"]) >= 1


def test_authenticator_is_case_sensitive_and_needs_bearer():
    auth = Authenticator("sk-main-123456", [KeyEntry(key="sk-tenant-123456", name="t", tokens_per_minute=5)])
    assert auth.authenticate("Bearer sk-main-123456").name == "default"
    assert auth.authenticate("bearer sk-tenant-123456").namespace == "t"
    for header in (None, "", "sk-main-123456", "Bearer SK-MAIN-123456", "Token sk-main-123456", "Bearer "):
        with pytest.raises(APIError) as e:
            auth.authenticate(header)
        assert e.value.status == 401 and e.value.type.value == "authentication_error"
    assert Authenticator().authenticate(None).name == "anonymous"


def test_keys_files_in_json_and_toml(tmp_path):
    toml = tmp_path / "keys.toml"
    toml.write_text('[[keys]]\nkey = "sk-alice-123456"\nname = "alice"\nrequests_per_minute = 10\n'
                    'namespace = "team-a"\n')
    (entry,) = load_keys_file(toml)
    assert entry.name == "alice" and entry.requests_per_minute == 10 and entry.namespace == "team-a"
    bad = [{"keys": [{"key": "sk-a-123456", "name": "a", "rpm": 1}]},
           {"keys": [{"key": "short", "name": "a"}]},
           {"keys": [{"key": "sk-a-123456", "name": "a"}, {"key": "sk-b-123456", "name": "a"}]},
           {"keys": [{"key": "sk-a-123456", "name": "a", "requests_per_minute": 0}]}]
    for i, data in enumerate(bad):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="invalid API keys file"):
            load_keys_file(path)


# --- errors -----------------------------------------------------------------------------------------------


def test_error_messages_are_sanitized_and_bounded():
    text = sanitize("failed at 0x7ffd1234abcd in /usr/lib/python3/site-packages/x/y.py " + "z" * 1000)
    assert "0x7ffd" not in text and "site-packages" not in text and len(text) <= 400
    assert _loc_param(("messages", 0, "content", "list[ContentPart]", 0, "type")) == "messages.0.content.0.type"
    err = from_value_error(RequestError("too long", param="max_tokens", code="context_length_exceeded"))
    assert (err.status, err.param, err.code) == (400, "max_tokens", "context_length_exceeded")
    assert from_value_error(RequestError("full", code="queue_full")).status == 503


# --- readiness (in-process app, stub engine) --------------------------------------------------------------


class _StubEngine:
    def __init__(self) -> None:
        self.is_alive = True
        self.last_heartbeat = time.monotonic()
        self.work = False

    def has_work(self) -> bool:
        return self.work

    def shutdown(self) -> None:
        self.is_alive = False


def test_health_is_503_while_loading_dead_stalled_or_draining():
    from sprig.runtime.server.app import create_app
    from sprig.runtime.server.state import ServerSettings

    gate = threading.Event()
    stub = _StubEngine()

    def factory():
        gate.wait(10)
        return stub

    app = create_app(ServerSettings(watchdog_timeout=0.5), engine_factory=factory)
    state = app.state.sprig

    async def statuses() -> list[tuple[int, str | None]]:
        seen = []
        transport = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport,
                                                                      base_url="http://t") as client:
            async def health() -> tuple[int, str | None]:
                resp = await client.get("/health")
                return resp.status_code, (resp.json().get("error") or {}).get("code")

            seen.append(await health())
            seen.append(await health())
            errors = (await client.get("/metrics")).text
            assert "sprig_request_errors_total{" not in errors  # probes answered 503 are not request errors
            assert (await client.get("/v1/models")).status_code == 503
            assert 'sprig_request_errors_total{code="loading"' in (await client.get("/metrics")).text
            gate.set()
            while state.engine is None:
                await asyncio.sleep(0.01)
            seen.append(await health())
            stub.work, stub.last_heartbeat = True, time.monotonic() - 5
            seen.append(await health())
            stub.work = False
            state.draining = True
            seen.append(await health())
            state.draining, stub.is_alive = False, False
            seen.append(await health())
        return seen

    assert asyncio.run(statuses()) == [(503, "loading"), (503, "loading"), (200, None), (503, "stalled"), (503, "draining"),
                                       (503, "dead")]

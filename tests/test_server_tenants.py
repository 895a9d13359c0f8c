"""API keys and tenants: deny-by-default auth, per-key limits (429 + Retry-After), cache namespaces, usage metrics."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from test_server_helpers import ServerProcess, assert_openai_error

ADMIN = "sk-admin-0123456789"
KEYS = {
    "limited": {"key": "sk-limited-0123456789", "requests_per_minute": 3},
    "single": {"key": "sk-single-0123456789", "max_concurrent_requests": 1},
    "tokens": {"key": "sk-tokens-0123456789", "tokens_per_minute": 10},
    "free": {"key": "sk-free-0123456789"},
    "other": {"key": "sk-other-0123456789"},
}


def auth(name: str) -> dict[str, str]:
    key = ADMIN if name == "admin" else KEYS[name]["key"]
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps({"keys": [{"name": n, **v} for n, v in KEYS.items()]}))
    with ServerProcess("--api-key", ADMIN, "--api-keys", str(path)) as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


BODY = {"prompt": "hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-key"},
    {"Authorization": f"Bearer {KEYS['free']['key'].upper()}"},
    {"Authorization": KEYS["free"]["key"]},
    {"Authorization": f"Basic {KEYS['free']['key']}"},
    {"X-Api-Key": KEYS["free"]["key"]},
])
def test_missing_or_wrong_keys_get_401(http, headers):
    for method, path in (("POST", "/v1/completions"), ("POST", "/generate"), ("GET", "/v1/models"),
                         ("GET", "/server_info"), ("GET", "/openapi.json"), ("POST", "/flush_cache")):
        resp = http.request(method, path, headers=headers, json=BODY)
        err = assert_openai_error(resp, 401, None, "invalid_api_key")
        assert err["type"] == "authentication_error" and resp.headers["www-authenticate"] == "Bearer"


def test_health_and_metrics_are_public(http):
    assert http.get("/health").status_code == 200
    assert http.get("/metrics").status_code == 200


@pytest.mark.parametrize("path", ["//v1/models", "/v1/../v1/models", "/v1/models/../../server_info",
                                  "/%2Fv1/models", "/v1%2Fmodels", "/invocations", "/V1/models"])
def test_path_tricks_never_skip_auth(http, path):
    resp = http.get(path)
    assert resp.status_code in (401, 404), (path, resp.status_code)


def test_openai_client_with_a_key(server):
    good = openai.OpenAI(base_url=server.url + "/v1", api_key=KEYS["free"]["key"], max_retries=0)
    assert good.completions.create(model=good.models.list().data[0].id, prompt="x", max_tokens=2).choices
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_requests_per_minute_limit_gives_429_while_others_are_served(http):
    statuses = [http.post("/v1/completions", json=BODY, headers=auth("limited")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    resp = http.post("/v1/completions", json=BODY, headers=auth("limited"))
    err = assert_openai_error(resp, 429, None, "rate_limit_exceeded")
    assert err["type"] == "rate_limit_error" and 1 <= int(resp.headers["retry-after"]) <= 60
    assert "requests_per_minute" in err["message"]
    assert http.post("/v1/completions", json=BODY, headers=auth("free")).status_code == 200
    assert http.post("/generate", json={"text": "x"}, headers=auth("limited")).status_code == 429


def test_concurrency_limit(http, server):
    body = {**BODY, "max_tokens": 1900, "stream": True}
    with http.stream("POST", "/v1/completions", json=body, headers=auth("single")) as first:
        assert first.status_code == 200
        lines = first.iter_lines()  # why: keep the iterator; dropping it would close the connection
        next(lines)
        resp = http.post("/v1/completions", json=BODY, headers=auth("single"))
        assert_openai_error(resp, 429, None, "rate_limit_exceeded")
    deadline = time.monotonic() + 10  # the server frees the slot once it sees the disconnect
    while (status := http.post("/v1/completions", json=BODY, headers=auth("single")).status_code) == 429:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert status == 200


def test_generated_tokens_per_minute_limit(http):
    first = http.post("/v1/completions", json={**BODY, "max_tokens": 16}, headers=auth("tokens"))
    assert first.status_code == 200
    err = assert_openai_error(http.post("/v1/completions", json=BODY, headers=auth("tokens")), 429)
    assert "tokens_per_minute" in err["message"]


def test_cache_namespaces_do_not_leak_prefixes_across_keys(http):
    prompt = "shared system prompt " * 12
    body = {**BODY, "prompt": prompt}
    first = http.post("/v1/completions", json=body, headers=auth("free")).json()
    again = http.post("/v1/completions", json=body, headers=auth("free")).json()
    assert first["usage"]["prompt_tokens"] >= 64
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    other = http.post("/v1/completions", json=body, headers=auth("other")).json()
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    native = http.post("/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 2}},
                       headers=auth("other")).json()
    assert native["meta_info"]["cached_tokens"] > 0  # now cached in other's own namespace


@pytest.mark.parametrize("path", ["/flush_cache", "/reset_prefix_cache"])
def test_flush_cache_needs_an_admin_key(http, path):
    err = assert_openai_error(http.post(path, headers=auth("free")), 403, None, "admin_required")
    assert err["type"] == "permission_error"
    assert http.post(path, headers=auth("admin")).status_code in (200, 400)


def test_usage_per_key_in_metrics(http):
    http.post("/v1/completions", json=BODY, headers=auth("free"))
    text = http.get("/metrics").text
    assert 'sprig_tenant_requests_total{tenant="free"}' in text
    assert 'sprig_tenant_generation_tokens_total{tenant="free"}' in text
    assert 'sprig_tenant_rate_limited_total{limit="requests_per_minute",tenant="limited"}' in text
    assert "sk-free" not in text  # keys never appear, only tenant names

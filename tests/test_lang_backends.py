"""sprig.lang over HTTP: `RuntimeEndpoint` on a live `sprig serve` (native /generate) gives the same results as
the in-process engine for the same seed; `OpenAICompatible` runs chat, completions and select on it too."""

from __future__ import annotations

import pytest
from test_server_helpers import BASE_ARGS, ServerProcess, tiny_model  # noqa: E402

import sprig
from sprig import Engine
from sprig.lang import BackendError, OpenAICompatible, RuntimeEndpoint, SelectMethod, UnsupportedError
from sprig.lang.backends.openai_compat import api_root


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as s:
        yield s


@pytest.fixture(scope="module")
def engine():
    opts = dict(zip(BASE_ARGS[::2], BASE_ARGS[1::2], strict=True))
    with Engine(tiny_model(), dtype=opts["--dtype"], max_total_tokens=int(opts["--max-total-tokens"]),
                num_threads=1, random_seed=int(opts["--random-seed"])) as e:
        yield e


@pytest.fixture(scope="module")
def endpoint(server):
    backend = RuntimeEndpoint(server.url)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def endpoint_text_only(server):
    """The endpoint as a client on another machine sees it: no tokenizer files, text prompts only."""
    backend = RuntimeEndpoint(server.url)
    backend._tokenizer = None
    yield backend
    backend.close()


@sprig.function
def everything(s, topic):
    s += sprig.system("You write short notes.")
    with s.user():
        s += f"A note about {topic}."
    s += sprig.assistant(sprig.gen("note", max_tokens=8))
    s += "Rating:" + sprig.select("rating", [" good", " bad", " so so"])
    forks = s.fork(2)
    forks += " Next:" + sprig.gen("next", max_tokens=5)
    forks.join()
    s += " Sure?" + sprig.select("sure", [" yes", " no"], method=SelectMethod.UNCONDITIONAL_NORMALIZED)
    return forks["next"]


def _summary(st):
    return st["note"], st["rating"], st.ret_value, st["sure"], st.get_meta_info("rating")["choice"]


def test_endpoint_matches_the_local_engine_for_the_same_seed(engine, endpoint, endpoint_text_only):
    local = everything.run(topic="rivers", backend=engine, temperature=1.0, seed=5)
    remote = everything.run(topic="rivers", backend=endpoint, temperature=1.0, seed=5)
    assert _summary(remote) == _summary(local)
    assert remote.text() == local.text()
    assert remote.get_meta_info("rating")["scores"] == pytest.approx(local.get_meta_info("rating")["scores"],
                                                                     abs=1e-4)
    greedy_local = everything.run(topic="lakes", backend=engine, temperature=0)
    text_only = everything.run(topic="lakes", backend=endpoint_text_only, temperature=0)
    assert text_only["rating"] == greedy_local["rating"] and text_only["sure"] == greedy_local["sure"]


def test_endpoint_stream_batch_and_cached_fork_prefix(endpoint):
    st = everything.run(topic="hills", backend=endpoint, stream=True, temperature=0)
    assert "".join(st.text_iter("note")) == st["note"]
    states = everything.run_batch([{"topic": t} for t in ("a", "b", "c")], backend=endpoint, temperature=0)
    assert all(s.error is None for s in states)

    @sprig.function
    def fork_prog(s):
        s += "Shared context for every branch. " * 30
        forks = s.fork(4)
        forks += sprig.gen("g", max_tokens=3)
        forks.join()
        return [f.get_meta_info("g")["cached_tokens"] for f in forks]

    assert min(fork_prog.run(backend=endpoint, temperature=0).ret_value) >= 160


def test_endpoint_errors_are_clear(endpoint):
    @sprig.function
    def bad(s):
        s += "x" + sprig.gen("a", top_p=5.0)

    with pytest.raises(BackendError) as info:
        bad.run(backend=endpoint)
    assert info.value.status == 400 and "top_p" in str(info.value)
    with pytest.raises(BackendError):
        RuntimeEndpoint("http://127.0.0.1:9")


def test_openai_compatible_takes_the_server_address_with_or_without_v1(server):
    bare, rooted = OpenAICompatible(server.url), OpenAICompatible(server.url + "/v1/")
    assert bare.http.base_url == rooted.http.base_url == server.url + "/v1"
    assert bare.model == rooted.model  # both listed the server's models through /v1/models
    assert api_root("https://example.test/openai/v1") == "https://example.test/openai/v1"


def test_openai_compatible_chat_completions_and_select(server, engine):
    backend = OpenAICompatible(server.url + "/v1", api_key="unused")

    @sprig.function
    def chat_prog(s):
        s += sprig.user("Say something.")
        s += sprig.assistant(sprig.gen("reply", max_tokens=6))

    remote = chat_prog.run(backend=backend, temperature=0)
    assert remote["reply"] == chat_prog.run(backend=engine, temperature=0)["reply"]
    assert remote.get_meta_info("reply")["completion_tokens"] >= 1
    streamed = chat_prog.run(backend=backend, temperature=0, stream=True)
    assert "".join(streamed.text_iter("reply")) == remote["reply"]

    @sprig.function
    def raw_prog(s):
        s += "The answer is" + sprig.select("x", [" yes", " no", " maybe so"])
        s += " because" + sprig.gen("why", max_tokens=5)

    remote = raw_prog.run(backend=backend, temperature=0)
    local = raw_prog.run(backend=engine, temperature=0)
    assert (remote["x"], remote["why"]) == (local["x"], local["why"])
    assert remote.get_meta_info("x")["scores"] == pytest.approx(local.get_meta_info("x")["scores"], abs=1e-4)

    @sprig.function
    def uncond(s):
        s += "Q" + sprig.select("x", ["a", "b"], method=SelectMethod.UNCONDITIONAL_NORMALIZED)

    with pytest.raises(UnsupportedError):
        uncond.run(backend=backend)
    backend.close()


def test_endpoint_passes_constraints_through(endpoint, server):
    import httpx

    assert httpx.get(server.url + "/server_info").json()["server"]["constrained_decoding"]

    @sprig.function
    def typed(s):
        s += "n=" + sprig.gen("n", dtype=int, max_tokens=8) + " c=" + sprig.gen("c", choices=["red", "blue"])
        s += " j=" + sprig.gen("j", json_schema={"type": "object", "properties": {"ok": {"type": "boolean"}},
                                                 "required": ["ok"], "additionalProperties": False})

    for seed in range(3):
        st = typed.run(backend=endpoint, temperature=1.0, seed=seed)
        assert isinstance(st["n"], int) and st["c"] in ("red", "blue")
        assert isinstance(__import__("json").loads(st["j"])["ok"], bool)

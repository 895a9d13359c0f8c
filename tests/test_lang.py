"""sprig.lang on the in-process engine: every primitive, forks sharing KV, batches, streaming, errors."""

from __future__ import annotations

import asyncio
import json

import pytest

import sprig
from sprig import Engine
from sprig.lang import InvalidArgumentError, ProgramStateError
from sprig.lang.backends.base import ChoiceLogprobs
from sprig.lang.chat import ChatFormatter, jinja_formatter
from sprig.lang.ir import Role, SelectMethod
from sprig.lang.select_scoring import decide, seam
from sprig.lang.tracing import constant_prefix

GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def engine(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", num_threads=1, max_total_tokens=8192,
                random_seed=0) as e:
        yield e


@sprig.function
def chat(s, question):
    s += sprig.system("You are terse.")
    with s.user():
        s += question
    s += sprig.assistant(sprig.gen("answer", max_tokens=6))


def test_roles_render_with_the_models_chat_template(engine):
    st = chat.run(question="What is 2+2?", backend=engine, **GREEDY)
    msgs = st.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[2]["content"] == st["answer"]
    assert st.text() == engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=False)


def test_gen_stores_value_and_meta_and_composes_with_text(engine):
    @sprig.function
    def prog(s):
        s += "Q: one" + sprig.gen("a", max_tokens=5, ignore_eos=True) + "\nQ: two" + sprig.gen("b", max_tokens=3)
        s["extra"] = 7

    st = prog.run(backend=engine, **GREEDY)
    assert st.text().startswith("Q: one" + st["a"] + "\nQ: two")
    meta = st.get_meta_info("a")
    assert meta["completion_tokens"] == 5 and meta["prompt_tokens"] > 0 and "cached_tokens" in meta
    assert st["extra"] == 7 and "b" in st.variables()
    with pytest.raises(KeyError):
        st["missing"]


def test_stop_and_sampling_options_pass_through(engine):
    @sprig.function
    def prog(s, stop_at):
        s += "The Work" + sprig.gen("x", max_tokens=12, stop=stop_at, ignore_eos=True)

    base = prog.run(stop_at=None, backend=engine, **GREEDY)["x"]
    word = base[3:6]
    cut = prog.run(stop_at=word, backend=engine, **GREEDY)
    assert word not in cut["x"] and base.startswith(cut["x"])
    assert cut.get_meta_info("x")["finish_reason"]["type"] == "stop"


def test_same_seed_same_program_results_and_branches_differ(engine):
    @sprig.function
    def prog(s):
        s += "Once upon a time" + sprig.gen("a", max_tokens=8)
        forks = s.fork(3)
        forks += " then" + sprig.gen("b", max_tokens=8)
        forks.join()
        s += sprig.select("c", ["yes", "no"])
        return forks["b"]

    one = prog.run(backend=engine, temperature=1.0, seed=11)
    two = prog.run(backend=engine, temperature=1.0, seed=11)
    other = prog.run(backend=engine, temperature=1.0, seed=12)
    assert (one["a"], one.ret_value, one["c"]) == (two["a"], two.ret_value, two["c"])
    assert (one["a"], one.ret_value) != (other["a"], other.ret_value)
    assert len(set(one.ret_value)) == 3  # each branch derives its own seed


def test_fork8_after_1000_token_prefix_computes_it_once(engine):
    prefix = " ".join(f"w{i}" for i in range(400))
    n_prefix = len(engine.tokenizer.encode(prefix))
    assert n_prefix >= 1000

    @sprig.function
    def prog(s):
        s += prefix
        forks = s.fork(8)
        for i, f in enumerate(forks):  # a plain loop: branches still run concurrently
            f += f" branch {i}:" + sprig.gen("g", max_tokens=4)
        forks.join()
        return [f.get_meta_info("g") for f in forks]

    before = engine.stats()["computed_tokens"]
    metas = prog.run(backend=engine, **GREEDY).ret_value
    computed = engine.stats()["computed_tokens"] - before
    page = engine.stats()["page_size"]
    assert all(m["cached_tokens"] >= (n_prefix // page) * page for m in metas)
    assert computed < n_prefix + 8 * (2 * page + 8)  # the prefix once, plus each branch's own tail


def test_select_returns_a_choice_with_scores_for_every_method(engine):
    @sprig.function
    def prog(s, method):
        s += "The answer is" + sprig.select("x", [" yes", " no", " maybe so"], method=method)

    for method in SelectMethod:
        st = prog.run(method=method, backend=engine)
        meta = st.get_meta_info("x")
        assert st["x"] in (" yes", " no", " maybe so") and st["x"] == meta["choice"]
        assert len(meta["scores"]) == 3 and meta["method"] == method.value
        assert st.text() == "The answer is" + st["x"]
        assert all(len(t) >= 1 for t in meta["token_logprobs"])
    with pytest.raises(InvalidArgumentError):
        sprig.select("x", ["a"], method="best")
    with pytest.raises(InvalidArgumentError):
        sprig.select("x", ["a", "a"])


def test_select_reuses_the_cached_prompt(engine):
    @sprig.function
    def prog(s):
        s += "Some long context " * 20 + sprig.gen("g", max_tokens=4) + " Verdict:"
        s += sprig.select("v", [" good", " bad"])

    st = prog.run(backend=engine, **GREEDY)
    prompt_tokens = st.get_meta_info("g")["prompt_tokens"]
    assert min(st.get_meta_info("v")["cached_tokens"]) >= (prompt_tokens // 16) * 16


def test_run_batch_isolates_failures_and_keeps_order(engine):
    @sprig.function
    def prog(s, i):
        s += "Shared instructions for every question. " * 8
        s += f"Question {i}:" + sprig.gen("a", max_tokens=3)
        if i == 2:
            raise RuntimeError("boom")
        return i

    states = prog.run_batch([{"i": i} for i in range(6)], backend=engine, num_threads=3, progress_bar=True,
                            **GREEDY)
    assert [s.ret_value for s in states] == [0, 1, None, 3, 4, 5]
    assert isinstance(states[2].error, RuntimeError) and all(s.error is None for k, s in enumerate(states) if k != 2)
    assert all(s.get_meta_info("a")["cached_tokens"] >= 64 for s in states)  # the traced prefix was cached


def test_failed_op_is_on_the_state_and_run_raises(engine):
    @sprig.function
    def bad_role(s):
        s += sprig.user_end()

    with pytest.raises(ProgramStateError):
        bad_role.run(backend=engine)
    states = bad_role.run_batch([{}, {}], backend=engine)
    assert all(isinstance(s.error, ProgramStateError) for s in states)

    @sprig.function
    def bad_param(s):
        s += "x" + sprig.gen("a", max_tokens=2, top_p=7.0)

    with pytest.raises(ValueError) as info:
        bad_param.run(backend=engine)
    assert info.value.param == "top_p"


def test_streaming_text_iter_and_async_iter(engine):
    st = chat.run(question="Stream this", backend=engine, stream=True, **GREEDY)
    chunks = list(st.text_iter("answer"))
    assert "".join(chunks) == st["answer"]
    st2 = chat.run(question="Stream this", backend=engine, stream=True, **GREEDY)
    assert "".join(st2.text_iter()) == st2.text()

    async def main():
        s3 = chat.run(question="Stream this", backend=engine, stream=True, **GREEDY)
        parts = [c async for c in s3.text_async_iter("answer")]
        single = await chat.run_async(question="Stream this", backend=engine, **GREEDY)
        many = await chat.run_batch_async([{"question": "Stream this"}] * 2, backend=engine, **GREEDY)
        return "".join(parts), single["answer"], [m["answer"] for m in many]

    streamed, single, many = asyncio.run(main())
    assert streamed == single == st["answer"] and many == [single, single]


def test_default_backend(engine):
    sprig.set_default_backend(engine)
    try:
        assert chat.run(question="hi", **GREEDY)["answer"] == chat.run(question="hi", backend=engine,
                                                                       **GREEDY)["answer"]
    finally:
        sprig.set_default_backend(None)
    with pytest.raises(InvalidArgumentError):
        chat.run(question="hi")


def test_constrained_gen_and_dtypes(engine):
    @sprig.function
    def prog(s):
        s += "n=" + sprig.gen("n", dtype=int, max_tokens=8) + " f=" + sprig.gen("f", dtype=float, max_tokens=12)
        s += " b=" + sprig.gen("b", dtype=bool) + " c=" + sprig.gen("c", choices=["red", "green"])
        s += " r=" + sprig.gen("r", regex=r"[a-c]{3}")

    for seed in range(5):
        st = prog.run(backend=engine, temperature=1.0, seed=seed)
        assert isinstance(st["n"], int) and isinstance(st["f"], float) and isinstance(st["b"], bool)
        assert st["c"] in ("red", "green") and len(st["r"]) == 3 and set(st["r"]) <= set("abc")


def test_json_schema_gen_validates_every_time(engine):
    import jsonschema

    # Bounded, so that every output completes within max_tokens (a random model never stops a number itself).
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 999},
                                               "ok": {"type": "boolean"}},
              "required": ["name", "age", "ok"], "additionalProperties": False}

    @sprig.function
    def extract(s, i):
        s += f"Record {i}: " + sprig.gen("json", json_schema=schema, max_tokens=128)

    states = extract.run_batch([{"i": i} for i in range(100)], backend=engine, temperature=1.0, seed=3)
    for st in states:
        assert st.error is None
        jsonschema.validate(json.loads(st["json"]), schema)


# --- pieces without an engine --------------------------------------------------------------------------
def test_select_scoring_methods():
    a = ChoiceLogprobs((1, 2), (-1.0, -3.0), (-2.0, -2.0))
    b = ChoiceLogprobs((3,), (-1.5,), (-4.0,))
    assert decide(SelectMethod.TOKEN_LENGTH_NORMALIZED, [a, b]).index == 1  # -2.0 vs -1.5
    assert decide(SelectMethod.GREEDY_TOKEN, [a, b]).index == 0  # first token -1.0 beats -1.5
    assert decide(SelectMethod.UNCONDITIONAL_NORMALIZED, [a, b]).index == 1  # 0.0 vs 2.5
    tie = ChoiceLogprobs((1, 5), (-1.0, -0.5))
    assert decide(SelectMethod.GREEDY_TOKEN, [a, tie]).index == 1  # same first token: the second decides
    assert seam([5, 6, 7], [5, 6, 9, 10]) == 2 and seam([5, 6], [5, 6]) == 1


def test_chat_formatter_handles_templates_that_add_text_by_position():
    # Like Qwen2.5: a default system message when the first message is not a system one.
    template = ("{% if messages[0]['role'] != 'system' %}<s>default</s>{% endif %}"
                "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}")
    fmt = jinja_formatter(template)
    assert fmt.role_text((), Role.USER).prefix == "<s>default</s><user>"
    assert fmt.role_text((Role.SYSTEM,), Role.USER).prefix == "<user>"
    assert fmt.role_text((), Role.SYSTEM).prefix == "<system>"
    assert fmt.role_text((), Role.USER).suffix == "</user>"
    strict = ChatFormatter(lambda msgs, gen: (_ for _ in ()).throw(ValueError("roles must alternate")))
    with pytest.raises(ProgramStateError):
        strict.role_text((), Role.USER)


def test_tracing_finds_the_constant_prefix():
    fmt = jinja_formatter("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[/]{% endfor %}")

    def prog(s, doc, q):
        s += sprig.system("Read: " + doc)
        with s.user():
            s += q
        s += sprig.assistant(sprig.gen("a"))

    prefix = constant_prefix(prog, [{"doc": "D", "q": "q1"}, {"doc": "D", "q": "q2"}], fmt)
    assert prefix == "[system]Read: D[/][user]q"
    assert constant_prefix(prog, [{"doc": "D", "q": "q1"}], fmt) == ""


def test_primitive_argument_errors():
    with pytest.raises(InvalidArgumentError):
        sprig.gen("x", regex="a", choices=["a"])
    with pytest.raises(InvalidArgumentError):
        sprig.gen("x", dtype=list)
    with pytest.raises(InvalidArgumentError):
        sprig.select("x")
    with pytest.raises(InvalidArgumentError):
        sprig.user(None)
    with pytest.raises(TypeError):
        sprig.gen("x") + 3


def test_a_failure_before_a_fork_fails_its_branches_without_hanging(engine):
    @sprig.function
    def prog(s):
        s += "x" + sprig.gen("a", max_tokens=2, temperature=-1.0)
        forks = s.fork(3)
        forks += sprig.gen("b", max_tokens=2)
        forks.join()
        return [f.error for f in forks]

    states = prog.run_batch([{}], backend=engine)
    assert isinstance(states[0].error, ValueError)

    @sprig.function
    def streamed(s):
        s += "x" + sprig.gen("a", max_tokens=2, temperature=-1.0)

    st = streamed.run(backend=engine, stream=True)
    with pytest.raises(ValueError):
        list(st.text_iter())

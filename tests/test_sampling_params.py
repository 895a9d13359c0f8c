"""Behaviour of `SamplingParams`: parsing the SGLang-style dict and validating every field.

Every rejection is a `SamplingParamsError` (a ValueError) whose `param` names the field and whose `code` is a
stable string; nothing is clamped silently (docs/architecture.md, "Errors").
"""

from __future__ import annotations

import logging
import math

import pytest

from sprig.runtime.engine.generate_request import ErrorCode, SamplingParams, SamplingParamsError

VOCAB = 1000


def check(d: dict, vocab: int = VOCAB, **limits: int) -> SamplingParams:
    return SamplingParams.from_dict(d).validate(vocab, **limits)


def rejected(d: dict, **limits: int) -> SamplingParamsError:
    with pytest.raises(SamplingParamsError) as info:
        check(d, **limits)
    return info.value


def test_defaults_follow_sglang() -> None:
    p = SamplingParams()
    assert (p.max_new_tokens, p.min_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 0, 1.0, 1.0, -1, 0.0)
    assert (p.frequency_penalty, p.presence_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert p.stop == [] and p.stop_token_ids == [] and p.logit_bias == {} and p.seed is None and p.n == 1
    assert p.skip_special_tokens and p.spaces_between_special_tokens and not p.ignore_eos
    assert p.validate(VOCAB) is p


def test_from_dict_accepts_every_documented_key() -> None:
    d = {"max_new_tokens": 5, "min_new_tokens": 1, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
         "frequency_penalty": 0.5, "presence_penalty": -0.5, "repetition_penalty": 1.1, "stop": ["\n\n", "END"],
         "stop_token_ids": [2, 7], "ignore_eos": True, "n": 3, "seed": 42, "logit_bias": {"17": 5.0, 3: -1},
         "regex": "[a-z]+", "skip_special_tokens": False, "spaces_between_special_tokens": False}
    p = check(d)
    assert p.logit_bias == {17: 5.0, 3: -1} and p.regex == "[a-z]+" and p.n == 3
    assert SamplingParams.from_dict(p.to_dict()) == p


def test_stop_may_be_one_string_and_none_means_default() -> None:
    assert check({"stop": "###"}).stop == ["###"]
    p = check({"stop": None, "seed": None, "max_new_tokens": None, "json_schema": None})
    assert p == SamplingParams()
    assert SamplingParams.from_dict(None) == SamplingParams()


def test_unknown_keys_are_rejected_by_name() -> None:
    err = rejected({"temprature": 0.5})
    assert (err.param, err.code) == ("temprature", ErrorCode.UNKNOWN_PARAMETER.value)
    assert "temprature" in str(err)


def test_non_dict_is_rejected() -> None:
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams.from_dict([1, 2])  # type: ignore[arg-type]
    assert info.value.param == "sampling_params"


def test_greedy_means_temperature_zero_or_top_k_one() -> None:
    assert check({"temperature": 0}).is_greedy
    assert check({"top_k": 1}).is_greedy
    assert check({"temperature": 1e-9}).is_greedy  # would overflow the logits: greedy, as in SGLang
    assert not check({"temperature": 0.1}).is_greedy


@pytest.mark.parametrize(
    ("d", "param", "code"),
    [
        ({"temperature": -0.1}, "temperature", "out_of_range"),
        ({"top_p": 0.0}, "top_p", "out_of_range"),
        ({"top_p": 1.01}, "top_p", "out_of_range"),
        ({"top_k": 0}, "top_k", "out_of_range"),
        ({"top_k": -2}, "top_k", "out_of_range"),
        ({"top_k": VOCAB + 1}, "top_k", "out_of_range"),
        ({"min_p": -0.01}, "min_p", "out_of_range"),
        ({"min_p": 1.5}, "min_p", "out_of_range"),
        ({"frequency_penalty": 2.5}, "frequency_penalty", "out_of_range"),
        ({"presence_penalty": -2.01}, "presence_penalty", "out_of_range"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "out_of_range"),
        ({"max_new_tokens": -1}, "max_new_tokens", "out_of_range"),
        ({"max_new_tokens": 10**12}, "max_new_tokens", "out_of_range"),
        ({"min_new_tokens": -1}, "min_new_tokens", "out_of_range"),
        ({"min_new_tokens": 11, "max_new_tokens": 10}, "min_new_tokens", "out_of_range"),
        ({"n": 0}, "n", "out_of_range"),
        ({"n": 10**6}, "n", "out_of_range"),
        ({"n": 2, "temperature": 0}, "n", "conflicting_parameters"),
        ({"seed": -1}, "seed", "out_of_range"),
        ({"seed": 2**63}, "seed", "out_of_range"),
        ({"seed": 2**64}, "seed", "out_of_range"),
        ({"stop": [""]}, "stop", "empty"),
        ({"stop": ["x"] * 65}, "stop", "too_many"),
        ({"stop": ["x" * 1025]}, "stop", "too_long"),
        ({"stop_token_ids": [VOCAB]}, "stop_token_ids", "out_of_range"),
        ({"stop_token_ids": [-1]}, "stop_token_ids", "out_of_range"),
        ({"logit_bias": {"-1": 1.0}}, "logit_bias", "out_of_range"),
        ({"logit_bias": {str(VOCAB): 1.0}}, "logit_bias", "out_of_range"),
        ({"logit_bias": {"5": 100.5}}, "logit_bias", "out_of_range"),
        ({"regex": "a", "choices": ["a"]}, "choices", "conflicting_parameters"),
        ({"json_schema": "{}", "regex": "a"}, "regex", "conflicting_parameters"),
        ({"choices": []}, "choices", "empty"),
    ],
)
def test_out_of_range_values_name_their_field(d: dict, param: str, code: str) -> None:
    err = rejected(d)
    assert (err.param, err.code) == (param, code)
    assert param in str(err) and len(str(err)) < 120


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                                  "repetition_penalty"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_rejected(name: str, value: float) -> None:
    err = rejected({name: value})
    assert (err.param, err.code) == (name, "not_finite")


def test_non_finite_logit_bias_is_rejected() -> None:
    err = rejected({"logit_bias": {"3": math.nan}})
    assert (err.param, err.code) == ("logit_bias", "not_finite")


@pytest.mark.parametrize(
    ("d", "param"),
    [
        ({"max_new_tokens": "10"}, "max_new_tokens"),
        ({"max_new_tokens": 10.0}, "max_new_tokens"),
        ({"max_new_tokens": True}, "max_new_tokens"),  # bool is not an int
        ({"top_k": True}, "top_k"),
        ({"n": 2.0}, "n"),
        ({"seed": 1.5}, "seed"),
        ({"seed": True}, "seed"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": False}, "temperature"),
        ({"stop": [1, 2]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"stop_token_ids": ["2"]}, "stop_token_ids"),
        ({"stop_token_ids": [True]}, "stop_token_ids"),
        ({"logit_bias": [1, 2]}, "logit_bias"),
        ({"logit_bias": {"5": "x"}}, "logit_bias"),
        ({"logit_bias": {"5": True}}, "logit_bias"),
        ({"ignore_eos": 1}, "ignore_eos"),
        ({"skip_special_tokens": "no"}, "skip_special_tokens"),
        ({"regex": 5}, "regex"),
        ({"json_schema": {"type": "object"}}, "json_schema"),
        ({"choices": "abc"}, "choices"),
    ],
)
def test_wrong_types_name_their_field(d: dict, param: str) -> None:
    err = rejected(d)
    assert (err.param, err.code) == (param, "invalid_type")


@pytest.mark.parametrize("key", ["abc", "1.5", "", "1" * 1000, True])
def test_logit_bias_keys_must_be_integers(key: object) -> None:
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams.from_dict({"logit_bias": {key: 1.0}})
    assert info.value.param == "logit_bias"


def test_boundaries_that_are_allowed() -> None:
    check({"temperature": 0, "top_p": 1, "top_k": VOCAB, "min_p": 1, "frequency_penalty": -2,
           "presence_penalty": 2, "repetition_penalty": 1e-3, "max_new_tokens": 0, "seed": 2**63 - 1,
           "stop": ["x" * 1024] * 64, "logit_bias": {"0": -100, str(VOCAB - 1): 100}})
    check({"min_new_tokens": 10, "max_new_tokens": 10, "n": 128, "temperature": 0.5})


def test_limits_are_configurable() -> None:
    assert rejected({"n": 5}, max_n=4).param == "n"
    assert rejected({"max_new_tokens": 101}, max_new_tokens_limit=100).param == "max_new_tokens"
    assert rejected({"stop": ["a", "b"]}, max_stop_strings=1).code == "too_many"


def test_token_ids_are_checked_against_the_model_vocab() -> None:
    assert check({"stop_token_ids": [2099]}, vocab=2100).stop_token_ids == [2099]
    err = rejected({"stop_token_ids": [2100]})
    assert err.param == "stop_token_ids"


def test_error_is_a_value_error_with_message_param_code() -> None:
    err = rejected({"top_p": 2})
    assert isinstance(err, ValueError)
    assert err.message == str(err) and err.param == "top_p" and isinstance(err.code, str)


# --- SGLang's extra keys -----------------------------------------------------------------------------------------

def test_sglang_stop_keys_parse_and_round_trip() -> None:
    p = check({"stop_regex": r"\d+", "no_stop_trim": True, "stream_interval": 4})
    assert p.stop_regex == [r"\d+"] and p.no_stop_trim and p.stream_interval == 4
    assert check({"stop_regex": []}).stop_regex == []  # what SGLang's frontend sends by default
    assert SamplingParams.from_dict(p.to_dict()) == p


def test_sampling_seed_is_an_alias_of_seed() -> None:
    assert check({"sampling_seed": 7}).seed == 7
    assert check({"sampling_seed": 7, "seed": 7}).seed == 7
    err = rejected({"sampling_seed": 7, "seed": 8})
    assert (err.param, err.code) == ("sampling_seed", ErrorCode.CONFLICT.value)
    assert rejected({"sampling_seed": -1}).param == "seed"


def test_custom_params_are_dropped_with_a_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="sprig.runtime.engine.generate_request"):
        p = check({"custom_params": {"bias": 3}, "temperature": 0.5})
    assert p == SamplingParams(temperature=0.5)
    assert any("custom_params" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


@pytest.mark.parametrize(("d", "code"), [
    ({"stop_regex": "("}, ErrorCode.INVALID_TYPE),
    ({"stop_regex": ["a*"]}, ErrorCode.INVALID_TYPE),  # matches '' so it would stop at once
    ({"stop_regex": [3]}, ErrorCode.INVALID_TYPE),
    ({"stop_regex": ["x"] * 65}, ErrorCode.TOO_MANY),
    ({"stop_regex": ["x" * 1025]}, ErrorCode.TOO_LONG),
])
def test_bad_stop_regex_is_refused_by_name(d: dict, code: ErrorCode) -> None:
    err = rejected(d)
    assert (err.param, err.code) == ("stop_regex", code.value)


@pytest.mark.parametrize(("d", "param"), [
    ({"stream_interval": 0}, "stream_interval"), ({"stream_interval": 1.5}, "stream_interval"),
    ({"no_stop_trim": "yes"}, "no_stop_trim"),
])
def test_bad_stream_interval_and_no_stop_trim_name_their_field(d: dict, param: str) -> None:
    assert rejected(d).param == param


@pytest.mark.parametrize("key", ["stop_regexes"])
def test_keys_sprig_does_not_implement_are_still_refused(key: str) -> None:
    err = rejected({key: "x"})
    assert (err.param, err.code) == (key, ErrorCode.UNKNOWN_PARAMETER.value)


def test_a_structural_tag_is_one_constraint_among_the_others() -> None:
    assert check({"structural_tag": {"structures": [], "triggers": []}}).has_constraint
    assert rejected({"structural_tag": 3}).param == "structural_tag"
    assert rejected({"structural_tag": "{}", "regex": "a"}).code == ErrorCode.CONFLICT.value

"""Behaviour of `StopChecker`: stop ids, EOS, stop strings across tokens, lengths, and stream holdback.

Most tests feed text pieces through a fake detokenizer so each token's text is chosen by the test; one test runs
the real `IncrementalDetokenizer` over a tiny checkpoint's tokenizer.
"""

from __future__ import annotations

import random
import re
import time

import pytest
from tokenizers import Tokenizer

from sprig.runtime.engine.generate_request import SamplingParams
from sprig.runtime.engine.output_text import FinishReason, FinishType, IncrementalDetokenizer, StopChecker
from sprig.runtime.engine.stop_regex import StopRegexTimeout
from sprig.runtime.model.checkpoints import checkpoint_path

EOS = 0


class Pieces:
    """A fake detokenizer: token id i decodes to `pieces[i]`; `tail` is what flush() releases."""

    def __init__(self, pieces: dict[int, str], tail: str = "") -> None:
        self.pieces = pieces
        self.tail = tail
        self.fed: list[int] = []

    def add(self, token_id: int) -> str:
        self.fed.append(token_id)
        return self.pieces.get(token_id, "")

    def flush(self) -> str:
        tail, self.tail = self.tail, ""
        return tail


def run(params: SamplingParams, pieces: list[str], ids: list[int] | None = None,
        tail: str = "") -> tuple[list[str], FinishReason | None, StopChecker]:
    """Feed tokens 1..n (text `pieces`) or `ids`; return the deltas, the finish reason and the checker."""
    ids = ids if ids is not None else list(range(1, len(pieces) + 1))
    table = {i + 1: p for i, p in enumerate(pieces)}
    detok = Pieces(table, tail)
    checker = StopChecker(params, eos_token_ids=[EOS])
    deltas = []
    for tok in ids:
        step = checker.step(tok, detok)
        deltas.append(step.delta)
        if step.finish is not None:
            return deltas, step.finish, checker
    return deltas, None, checker


def test_stop_string_split_across_tokens_is_found_and_cut() -> None:
    deltas, finish, checker = run(SamplingParams(stop=["END"]), ["Hello E", "N", "D and more"])
    assert finish == FinishReason(FinishType.STOP, "END")
    assert "".join(deltas) == checker.text == "Hello "
    assert finish.to_dict() == {"type": "stop", "matched": "END"}


def test_stream_holds_back_a_possible_stop_prefix_then_releases_it() -> None:
    deltas, finish, _ = run(SamplingParams(stop=["END"], max_new_tokens=4), ["Hi E", "N", "x", "!"])
    assert deltas == ["Hi ", "", "ENx", "!"]  # "E" and "EN" could begin "END"; "ENx" cannot
    assert finish == FinishReason(FinishType.LENGTH)


def test_earliest_stop_string_wins_and_text_after_it_is_dropped() -> None:
    deltas, finish, _ = run(SamplingParams(stop=["world", "lo w"]), ["hello world tail"])
    assert finish is not None and finish.matched == "lo w"
    assert "".join(deltas) == "hel"


def test_stop_token_id_is_kept_in_ids_but_its_text_is_not_returned() -> None:
    deltas, finish, checker = run(SamplingParams(stop_token_ids=[3]), ["a", "b", "<stop>", "c"])
    assert finish == FinishReason(FinishType.STOP, 3)
    assert "".join(deltas) == "ab" and checker.num_tokens == 3


def test_eos_stops_unless_ignore_eos() -> None:
    _, finish, _ = run(SamplingParams(), ["a"], ids=[1, EOS])
    assert finish == FinishReason(FinishType.STOP, EOS)
    _, finish, checker = run(SamplingParams(ignore_eos=True, max_new_tokens=3), ["a"], ids=[1, EOS, 1])
    assert finish == FinishReason(FinishType.LENGTH) and checker.num_tokens == 3
    _, finish, _ = run(SamplingParams(ignore_eos=True, stop_token_ids=[EOS]), ["a"], ids=[1, EOS])
    assert finish == FinishReason(FinishType.STOP, EOS)  # an explicit stop id still stops


def test_max_new_tokens_gives_length_and_releases_held_text() -> None:
    deltas, finish, _ = run(SamplingParams(max_new_tokens=2, stop=["xyz"]), ["ab", "cx"])
    assert finish == FinishReason(FinishType.LENGTH, None)
    assert deltas == ["ab", "cx"]  # "x" was a possible prefix, but the request is over


def test_nothing_stops_before_min_new_tokens() -> None:
    params = SamplingParams(min_new_tokens=3, stop=["!"], stop_token_ids=[9], max_new_tokens=10)
    deltas, finish, _ = run(params, ["a!", "b"] + [""] * 7, ids=[1, 9, 2, 9])
    assert finish == FinishReason(FinishType.STOP, 9)  # the second 9 is token 4 >= 3
    assert "".join(deltas) == "a!b"  # the early "!" was not a stop (and token 9 decodes to "")


def test_a_stop_string_completed_before_min_is_not_matched_later() -> None:
    params = SamplingParams(min_new_tokens=2, stop=["ab"], max_new_tokens=3)
    deltas, finish, _ = run(params, ["ab", "c", "d"])
    assert finish == FinishReason(FinishType.LENGTH) and "".join(deltas) == "abcd"
    # ...but one that starts before min and ends after it is
    deltas, finish, _ = run(SamplingParams(min_new_tokens=2, stop=["ab"]), ["xa", "b", "c"])
    assert finish == FinishReason(FinishType.STOP, "ab") and "".join(deltas) == "x"


def test_detokenizer_tail_is_part_of_the_output_at_finish() -> None:
    deltas, finish, _ = run(SamplingParams(max_new_tokens=1, stop=["!"]), ["a"], tail="b!c")
    assert finish == FinishReason(FinishType.STOP, "!") and "".join(deltas) == "ab"
    deltas, finish, _ = run(SamplingParams(max_new_tokens=1), ["a"], tail="\ufffd")
    assert "".join(deltas) == "a\ufffd"


def test_abort_releases_held_text_and_is_idempotent() -> None:
    checker = StopChecker(SamplingParams(stop=["STOP"]), [EOS])
    detok = Pieces({1: "go ST"})
    assert checker.step(1, detok).delta == "go "
    first = checker.abort(detok)
    assert first.delta == "ST" and first.finish == FinishReason(FinishType.ABORT)
    again = checker.abort(detok)
    assert again.delta == "" and again.finish == FinishReason(FinishType.ABORT)
    with pytest.raises(RuntimeError):
        checker.step(1, detok)


def reference(pieces: list[str], stops: list[str], max_new: int) -> tuple[str, str | None]:
    """The text a request returns: at the first token whose text completes a stop, cut at the earliest start."""
    text = ""
    for piece in pieces[:max_new]:
        text += piece
        starts = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
        if starts:
            start, first = min(starts)  # ties: the stop listed first
            return text[:start], stops[first]
    return text, None


def test_random_streams_match_the_reference_and_never_show_cut_text() -> None:
    rng = random.Random(0)
    for _ in range(400):
        stops = ["".join(rng.choices("ab\n", k=rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        pieces = ["".join(rng.choices("ab\nc", k=rng.randint(0, 3))) for _ in range(rng.randint(1, 12))]
        deltas, finish, checker = run(SamplingParams(stop=stops, max_new_tokens=len(pieces)), pieces)
        expected, matched = reference(pieces, stops, len(pieces))
        assert "".join(deltas) == checker.text == expected, (stops, pieces)
        assert finish is not None and finish.matched == matched
        shown = ""
        for d in deltas:  # every prefix shown while streaming is a prefix of the final text
            shown += d
            assert expected.startswith(shown)


def test_with_the_real_detokenizer_a_stop_string_spanning_many_tokens() -> None:
    tok = Tokenizer.from_file(str(checkpoint_path("tiny-llama") / "tokenizer.json"))
    text = "The answer is 42.\n\nQuestion: what next?"
    ids = tok.encode(text).ids
    checker = StopChecker(SamplingParams(stop=["\n\nQuestion:"], max_new_tokens=len(ids)), [EOS])
    detok = IncrementalDetokenizer(tok, [])
    streamed = ""
    for t in ids:
        step = checker.step(t, detok)
        streamed += step.delta
        assert "\n\n" not in streamed  # the stop's first characters were never streamed
        if step.finish:
            break
    assert step.finish == FinishReason(FinishType.STOP, "\n\nQuestion:")
    assert streamed == "The answer is 42."


# --- stop_regex and no_stop_trim (SGLang's sampling keys) ---------------------------------------------------------

def test_stop_regex_stops_on_a_match_across_tokens_and_cuts_where_it_begins() -> None:
    deltas, finish, checker = run(SamplingParams(stop_regex=[r"\d+\."]), ["Total: 1", "2", "3", ". More", "x"])
    assert finish == FinishReason(FinishType.STOP, r"\d+\.")
    assert finish.to_dict() == {"type": "stop", "matched": r"\d+\."}
    assert "".join(deltas) == checker.text == "Total: "
    assert deltas[:3] == ["Total: ", "", ""]  # "1", "12", "123" could still grow into a match: held back


def test_stop_regex_releases_held_text_once_it_cannot_match() -> None:
    deltas, finish, _ = run(SamplingParams(stop_regex=["ab+c"], max_new_tokens=3), ["xa", "bb", "q"])
    assert deltas == ["x", "", "abbq"] and finish == FinishReason(FinishType.LENGTH)


def test_earliest_match_wins_between_stop_strings_and_regexes() -> None:
    params = SamplingParams(stop=["END"], stop_regex=["[A-Z]{3}"])
    _, finish, checker = run(params, ["one TWO END"])
    assert finish == FinishReason(FinishType.STOP, "[A-Z]{3}") and checker.text == "one "
    _, finish, checker = run(SamplingParams(stop=["END"], stop_regex=["E.D"]), ["x END"])
    assert finish == FinishReason(FinishType.STOP, "END") and checker.text == "x "  # a tie: the string wins


def test_stop_regex_ignores_text_before_min_new_tokens() -> None:
    deltas, finish, checker = run(SamplingParams(stop_regex=["stop"], min_new_tokens=2), ["stop", "go", "stop!"])
    assert finish == FinishReason(FinishType.STOP, "stop") and checker.text == "stopgo"
    assert "".join(deltas) == "stopgo"


def test_no_stop_trim_keeps_the_stop_string_and_holds_nothing_back() -> None:
    params = SamplingParams(stop=["END"], no_stop_trim=True)
    deltas, finish, checker = run(params, ["Hello E", "N", "D and more", "never"])
    assert finish == FinishReason(FinishType.STOP, "END")
    assert deltas == ["Hello E", "N", "D and more"] and checker.text == "Hello END and more"


def test_no_stop_trim_keeps_the_regex_match() -> None:
    _, finish, checker = run(SamplingParams(stop_regex=[r"\d\d"], no_stop_trim=True), ["a1", "2b", "c"])
    assert finish == FinishReason(FinishType.STOP, r"\d\d") and checker.text == "a12b"


def test_no_stop_trim_keeps_the_stop_token_text() -> None:
    detok = Pieces({1: "hi", 9: "</s>"})
    checker = StopChecker(SamplingParams(stop_token_ids=[9], no_stop_trim=True), eos_token_ids=[EOS])
    checker.step(1, detok)
    step = checker.step(9, detok)
    assert step.finish == FinishReason(FinishType.STOP, 9) and checker.text == "hi</s>" and detok.fed == [1, 9]
    trimmed = StopChecker(SamplingParams(stop_token_ids=[9]), eos_token_ids=[EOS])
    detok = Pieces({1: "hi", 9: "</s>"})
    trimmed.step(1, detok)
    trimmed.step(9, detok)
    assert trimmed.text == "hi" and detok.fed == [1]


def regex_reference(pieces: list[str], patterns: list[str], max_new: int) -> tuple[str, str | None]:
    """The text a request returns: at the first token whose text completes a match, cut at the earliest start."""
    text = ""
    for piece in pieces[:max_new]:
        text += piece
        found = [(m.start(), i) for i, p in enumerate(patterns) if (m := re.search(p, text)) is not None]
        if found:
            start, first = min(found)
            return text[:start], patterns[first]
    return text, None


def test_random_regex_streams_match_python_re_and_never_show_cut_text() -> None:
    rng = random.Random(1)
    shapes = ["a+b", "b[ab]?c", r"\nc+", "(ab|ba)c", "ca*b"]
    for _ in range(400):
        patterns = rng.sample(shapes, rng.randint(1, 2))
        pieces = ["".join(rng.choices("ab\nc", k=rng.randint(0, 3))) for _ in range(rng.randint(1, 12))]
        deltas, finish, checker = run(SamplingParams(stop_regex=patterns, max_new_tokens=len(pieces)), pieces)
        expected, matched = regex_reference(pieces, patterns, len(pieces))
        assert "".join(deltas) == checker.text == expected, (patterns, pieces)
        assert finish is not None and finish.matched == matched
        shown = ""
        for d in deltas:
            shown += d
            assert expected.startswith(shown), (patterns, pieces, deltas)


def test_a_backtracking_stop_regex_stops_its_request_within_its_budget() -> None:
    start = time.perf_counter()
    with pytest.raises(StopRegexTimeout) as caught:
        run(SamplingParams(stop_regex=[r"(a|aa)+$"]), ["a" * 40 + "c"])  # exponential in the run of a's
    assert time.perf_counter() - start < 1.0
    assert (caught.value.param, caught.value.code) == ("stop_regex", "stop_regex_timeout")
    assert "took longer than" in caught.value.message

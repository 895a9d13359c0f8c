"""Behaviour of `IncrementalDetokenizer`: streamed deltas add up to the one-shot decode, never with half a character.

Two tokenizer families: the byte-level BPE of the tiny checkpoints, and a small SentencePiece-style BPE built here
with byte fallback (`<0xE2>` tokens), a `▁` word marker and a decoder that strips the first leading space.
"""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers

from sprig.runtime.engine.output_text import IncrementalDetokenizer, decode_stream
from sprig.runtime.model.checkpoints import checkpoint_path

UTF8_POOL = list("abcxyz   ,.!\n") + ["é", "ñ", "ü", "€", "日", "本", "語", "中", "文", "😀", "🎉", "👍🏽", "🇫🇷", "∑", "ß"]


@pytest.fixture(scope="module")
def byte_level() -> Tokenizer:
    return Tokenizer.from_file(str(checkpoint_path("tiny-llama") / "tokenizer.json"))


@pytest.fixture(scope="module")
def byte_fallback() -> Tokenizer:
    """A Llama-2-like tokenizer: few pieces, every other character falls back to its UTF-8 bytes."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in list("▁abcdefghijklmnopqrstuvwxyz,.!é日") + ["▁t", "he", "▁the", "▁a"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(UTF8_POOL, k=n))


def stream(tok: Tokenizer, prompt: list[int], ids: list[int], skip: bool = True) -> list[str]:
    deltas = decode_stream(tok, prompt, ids, skip)
    assert all("\ufffd" not in d for d in deltas), deltas  # valid text never shows a replacement character
    return deltas


def test_byte_level_stream_equals_one_shot_decode(byte_level: Tokenizer) -> None:
    rng = random.Random(0)
    for _ in range(60):
        prompt = byte_level.encode(random_text(rng, rng.randint(0, 20))).ids
        ids = byte_level.encode(random_text(rng, rng.randint(1, 40))).ids
        assert "".join(stream(byte_level, prompt, ids)) == byte_level.decode(ids)


def test_byte_fallback_stream_equals_one_shot_decode(byte_fallback: Tokenizer) -> None:
    rng = random.Random(1)
    saw_bytes = False
    for _ in range(60):
        prompt_text, text = random_text(rng, rng.randint(0, 20)), random_text(rng, rng.randint(1, 40))
        prompt = byte_fallback.encode(prompt_text).ids
        ids = byte_fallback.encode(text).ids
        saw_bytes |= any(byte_fallback.id_to_token(i).startswith("<0x") for i in ids)
        full = byte_fallback.decode(prompt + ids)
        before = byte_fallback.decode(prompt)
        assert full.startswith(before)
        # with context the output keeps its leading space; alone, the decoder strips it as one-shot decode does
        assert "".join(stream(byte_fallback, prompt, ids)) == full[len(before):]
        assert "".join(stream(byte_fallback, [], ids)) == byte_fallback.decode(ids)
    assert saw_bytes


def test_a_character_split_over_byte_tokens_is_held_until_complete(byte_fallback: Tokenizer) -> None:
    ids = byte_fallback.encode("a😀").ids
    assert [byte_fallback.id_to_token(i) for i in ids] == ["▁a", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    assert stream(byte_fallback, [], ids) == ["a", "", "", "", "😀", ""]


def test_byte_level_pieces_inside_an_emoji(byte_level: Tokenizer) -> None:
    ids = byte_level.encode("x😀y").ids
    deltas = stream(byte_level, [], ids)
    assert "".join(deltas) == "x😀y" and "😀" in deltas


def test_prompt_ending_in_byte_tokens_does_not_corrupt_the_output(byte_fallback: Tokenizer) -> None:
    prompt = byte_fallback.encode("本本").ids  # ends in a run of byte-fallback tokens
    ids = byte_fallback.encode("本").ids[1:]  # the bytes of 本 without the leading ▁
    assert "".join(stream(byte_fallback, prompt, ids)) == "本"


def test_flush_releases_an_incomplete_character_like_the_one_shot_decode(byte_fallback: Tokenizer) -> None:
    ids = byte_fallback.encode("a😀").ids[:3]  # cut inside the emoji
    detok = IncrementalDetokenizer(byte_fallback, [])
    assert detok.add_many(ids) == "a"
    tail = detok.flush()
    assert "a" + tail == byte_fallback.decode(ids) and tail.endswith("\ufffd")
    assert detok.text == byte_fallback.decode(ids) and detok.flush() == ""


@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_are_skipped_or_shown(byte_level: Tokenizer, skip: bool) -> None:
    end = byte_level.token_to_id("<|im_end|>")
    ids = byte_level.encode("hi ").ids + [end] + byte_level.encode("日本").ids
    text = "".join(stream(byte_level, [], ids, skip=skip))
    assert text == byte_level.decode(ids, skip_special_tokens=skip)
    assert ("<|im_end|>" in text) is (not skip)


def test_a_skipped_special_token_keeps_the_space_after_it(byte_fallback: Tokenizer) -> None:
    ids = byte_fallback.encode("hello").ids + [byte_fallback.token_to_id("</s>")] + byte_fallback.encode("foo").ids
    assert "".join(stream(byte_fallback, [], ids)) == byte_fallback.decode(ids) == "hello foo"


def test_ids_beyond_the_tokenizer_decode_to_nothing(byte_level: Tokenizer) -> None:
    ids = byte_level.encode("hello world").ids
    padded = ids[:1] + [byte_level.get_vocab_size() + 40] + ids[1:]  # a model vocab padded past the tokenizer's
    assert "".join(stream(byte_level, [], padded)) == "hello world"


class CountingTokenizer:
    """Wraps a tokenizer and records how many ids each decode call receives."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.sizes: list[int] = []

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.sizes.append(len(ids))
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def test_work_per_token_is_bounded_by_a_small_window(byte_level: Tokenizer) -> None:
    ids = byte_level.encode(random_text(random.Random(2), 1500)).ids
    counting = CountingTokenizer(byte_level)
    detok = IncrementalDetokenizer(counting, byte_level.encode("prompt " * 50).ids)  # type: ignore[arg-type]
    streamed = detok.add_many(ids) + detok.flush()
    assert streamed == byte_level.decode(ids)
    assert len(ids) > 1000 and max(counting.sizes) <= 8
    assert len(counting.sizes) <= 2 * len(ids) + 8  # about two small decodes per token


def test_invalid_byte_runs_never_crash_and_stay_bounded(byte_fallback: Tokenizer, byte_level: Tokenizer) -> None:
    cont = byte_fallback.token_to_id("<0x80>")  # a UTF-8 continuation byte on its own is never valid
    counting = CountingTokenizer(byte_fallback)
    detok = IncrementalDetokenizer(counting, [], max_pending=16)  # type: ignore[arg-type]
    text = detok.add_many([cont] * 200 + byte_fallback.encode("ok").ids) + detok.flush()
    assert text.endswith("ok") and set(text[:-3]) == {"\ufffd"}
    assert max(counting.sizes) <= 2 * 16 + 1  # the last emitted chunk plus the pending tokens
    rng = random.Random(3)
    for _ in range(30):  # random ids, including half characters, in both tokenizers
        for tok in (byte_fallback, byte_level):
            ids = [rng.randrange(tok.get_vocab_size()) for _ in range(rng.randint(1, 30))]
            out = "".join(decode_stream(tok, [], ids))
            assert isinstance(out, str)

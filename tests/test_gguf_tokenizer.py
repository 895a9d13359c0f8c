"""Tokenizers built from GGUF metadata give transformers' ids (`AutoTokenizer.from_pretrained(folder, gguf_file=...)`)
on 10,400 lines of varied text (tests/data/tokenizer_lines.txt: code, JSON, many scripts, emoji, whitespace runs,
special tokens written in the text): SmolLM2's byte-level BPE vocabulary, and a SentencePiece vocabulary trained
here and written as a GGUF file (with its merges, and with scores only)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gguf_helpers import write_gguf, write_tiny_gguf
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from sprig.runtime.model.tokenizer import Tokenizer

LINES = Path(__file__).parent / "data" / "tokenizer_lines.txt"
SPECIALS = ["<unk>", "<s>", "</s>"]


def texts() -> list[str]:
    """The samples, one per line (a line spells its newlines and backslashes as escapes)."""
    unescape = {"\\\\": "\\", "\\n": "\n", "\\r": "\r"}
    return [re.sub(r"\\[\\nr]", lambda m: unescape[m.group()], line)
            for line in LINES.read_text(encoding="utf-8").splitlines()]


def assert_same_ids(ours: Tokenizer, ref, samples: list[str]) -> None:
    """Equal ids without special tokens, and with them (BOS where the file adds it) for every sample that does not
    start with the BOS text itself: sprig never doubles a BOS the text already has (a rendered chat template's)."""
    plain = ref(samples, add_special_tokens=False)["input_ids"]
    wrong = [(s, ours.encode(s, add_special_tokens=False), e) for s, e in zip(samples, plain, strict=True)
             if ours.encode(s, add_special_tokens=False) != e]
    assert not wrong, f"{len(wrong)} of {len(samples)} differ, first: {wrong[0]}"
    full = ref(samples)["input_ids"]
    bos = ours.bos_token if ours.add_bos else None
    wrong = [(s, ours.encode(s), e) for s, e in zip(samples, full, strict=True)
             if not (bos and s.startswith(bos)) and ours.encode(s) != e]
    assert not wrong, f"with special tokens: {len(wrong)} of {len(samples)} differ, first: {wrong[0]}"
    if bos:
        assert ours.encode(bos + "x").count(ours.bos_token_id) == 1  # one BOS, not two


def test_the_corpus_is_varied():
    samples = texts()
    assert len(samples) >= 10_000
    assert any("\n" in s for s in samples) and any("  " in s for s in samples) and any("\t" in s for s in samples)
    assert any("<|im_start|>" in s for s in samples) and any("{" in s and '"' in s for s in samples)
    assert any(re.search(r"[\u4e00-\u9fff]", s) for s in samples) and any("😀" in s for s in samples)


def test_byte_level_vocabulary_matches_transformers(smollm2_gguf):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    ours = Tokenizer(smollm2_gguf)
    assert (ours.bos_token, ours.eos_token, ours.add_bos) == ("<|im_start|>", "<|im_end|>", False)
    assert_same_ids(ours, ref, texts())
    sample = texts()[:200]
    assert [ours.decode(ours.encode(s), skip_special_tokens=False) for s in sample] == [
        ref.decode(ref(s)["input_ids"]) for s in sample]


def sentencepiece_vocabulary() -> tuple[list[str], list[float], list[int], list[str]]:
    """(tokens, scores, token types, merges) of a SentencePiece-style BPE vocabulary trained on half the corpus:
    <unk> <s> </s>, the 256 byte tokens, a control and a user-defined token, then the learned pieces."""
    hf = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS, limit_alphabet=200, show_progress=False)
    hf.train_from_iterator(texts()[::2], trainer)
    learned = sorted(hf.get_vocab().items(), key=lambda kv: kv[1])
    pieces = [t for t, _ in learned if t not in SPECIALS]
    tokens = [*SPECIALS, *(f"<0x{b:02X}>" for b in range(256)), "<|im_start|>", "<think>", *pieces]
    types = [2, 3, 3, *[6] * 256, 3, 4, *[1] * len(pieces)]
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
    merges = [" ".join(m) for m in _merges(hf)]
    return tokens, scores, types, merges


def _merges(hf: HFTokenizer) -> list[tuple[str, ...]]:
    raw = json.loads(hf.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in raw]


@pytest.fixture(scope="module", params=["merges", "scores"])
def sentencepiece_gguf(request, tmp_path_factory) -> Path:
    tokens, scores, types, merges = sentencepiece_vocabulary()
    meta = {"general.architecture": "llama", "llama.block_count": 1, "llama.context_length": 256,
            "llama.embedding_length": 32, "llama.feed_forward_length": 64, "llama.attention.head_count": 2,
            "llama.attention.layer_norm_rms_epsilon": 1e-5, "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
    if request.param == "merges":
        meta["tokenizer.ggml.merges"] = merges
    path = tmp_path_factory.mktemp("spm") / f"spm-{request.param}.gguf"
    return write_gguf(path, meta, {})


def test_sentencepiece_vocabulary_matches_transformers(sentencepiece_gguf):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(sentencepiece_gguf.parent, gguf_file=sentencepiece_gguf.name)
    ours = Tokenizer(sentencepiece_gguf)
    assert ours.add_bos and ours.bos_token == "<s>"  # a SentencePiece file that does not say adds BOS
    samples = texts()
    assert_same_ids(ours, ref, samples)
    byte_fallback = ours.encode("日本 😀")
    assert any(ours.id_to_token(i).startswith("<0x") for i in byte_fallback)
    sample = samples[:200]
    assert [ours.decode(ours.encode(s)) for s in sample] == [
        ref.decode(ref(s)["input_ids"], skip_special_tokens=True) for s in sample]


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "tekken", "gpt-4o", "smollm"])
def test_pre_tokenizer_names_split_as_transformers(pre, tiny_paths, tmp_path):
    """The split regex each `tokenizer.ggml.pre` name stands for, on sprig's tiny byte-level vocabulary."""
    from transformers import AutoTokenizer

    def set_pre(meta, tensors):
        del tensors
        meta["tokenizer.ggml.pre"] = pre

    path = write_tiny_gguf(tiny_paths["tiny-llama"], tmp_path / f"pre-{pre}.gguf", edit=set_pre)
    ref = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert_same_ids(Tokenizer(path), ref, texts()[::4])

"""The per-request matcher: bitmask rows, accepting tokens, EOS, rollback, jump-forward; and the mask kernel.

The engine keeps one int32 bitmask (batch x ceil(vocab/32)) on the CPU; each constrained request fills its
row, `apply_token_bitmask_` turns disallowed logits into -inf. Bit j of word w is token 32*w + j.
"""

from __future__ import annotations

import pytest
import torch

from sprig.grammar import GrammarCompiler, GrammarSpec, TokenizerInfo, matcher_for
from sprig.grammar.matcher import GrammarMatcher, allocate_token_bitmask
from sprig.kernels.bitmask import apply_token_bitmask_, unpack_bitmask

VOCAB = 2100  # the tiny checkpoint's model vocab: 2048 tokenizer ids + 52 padded ids
EOS = 2
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def info(tiny_paths) -> TokenizerInfo:
    return TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[EOS], vocab_size=VOCAB)


@pytest.fixture(scope="module")
def compiled(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        yield comp.compile(GrammarSpec.json_schema(SCHEMA))


def encode(info: TokenizerInfo, text: str) -> list[int]:
    return info.tokenizer.encode(text, add_special_tokens=False).ids


def mask_ids(matcher: GrammarMatcher) -> list[int]:
    bitmask = allocate_token_bitmask(3, VOCAB)
    matcher.fill_bitmask(bitmask, 1)
    return unpack_bitmask(bitmask, VOCAB)[1].nonzero().flatten().tolist()


def test_bitmask_row_matches_allowed_tokens(compiled, info):
    matcher = matcher_for(compiled)
    for tok in encode(info, '{"name":"Al","age":4'):
        assert mask_ids(matcher) == matcher.allowed_tokens()
        assert tok in matcher.allowed_tokens()
        assert matcher.accept_token(tok)
    assert mask_ids(matcher) == matcher.allowed_tokens()


def test_other_rows_are_untouched(compiled):
    bitmask = allocate_token_bitmask(3, VOCAB)
    matcher_for(compiled).fill_bitmask(bitmask, 1)
    assert bool((bitmask[0] == -1).all()) and bool((bitmask[2] == -1).all())


def test_padded_and_special_ids_are_never_allowed(compiled, info):
    matcher = matcher_for(compiled)
    for tok in encode(info, '{"name":"'):
        matcher.accept_token(tok)
    allowed = set(mask_ids(matcher))
    assert len(allowed) > 1000  # inside a free string almost everything goes
    assert not allowed & set(range(2048, VOCAB))  # padding beyond the tokenizer
    assert not allowed & {0, 1, 2}  # <|endoftext|>, <|im_start|>, and EOS (not complete yet)


def test_eos_only_when_complete_then_terminated(compiled, info):
    matcher = matcher_for(compiled)
    for tok in encode(info, '{"name":"Al","age":42'):
        matcher.accept_token(tok)
    assert not matcher.can_finish() and not matcher.accept_token(EOS)
    assert matcher.accept_token(encode(info, "}")[0])
    assert matcher.can_finish() and mask_ids(matcher) == [EOS]
    assert matcher.accept_token(EOS) and matcher.is_terminated()
    assert not matcher.accept_token(encode(info, " ")[0])
    assert mask_ids(matcher) == [EOS]  # a finished request never gets an all-false row


def test_refused_token_changes_nothing(compiled, info):
    matcher = matcher_for(compiled)
    before = matcher.state
    for tok in (encode(info, "[")[0], -1, VOCAB, 2**40):
        assert not matcher.accept_token(tok)
    assert matcher.state == before


def test_rollback_restores_state_and_mask(compiled, info):
    matcher = matcher_for(compiled)
    ids = encode(info, '{"name":"Bo","age":7}')
    states, masks = [], []
    for tok in ids:
        states.append(matcher.state)
        masks.append(mask_ids(matcher))
        assert matcher.accept_token(tok)
    for k in range(1, len(ids) + 1):
        matcher.rollback(1)
        assert matcher.state == states[-k] and mask_ids(matcher) == masks[-k]
    with pytest.raises(ValueError):
        matcher.rollback(1)


def test_accept_tokens_is_all_or_nothing(compiled, info):
    matcher = matcher_for(compiled)
    good, bad = encode(info, '{"name":"x"'), encode(info, ',"nope"')
    assert matcher.accept_tokens(good)
    state = matcher.state
    assert not matcher.accept_tokens(bad)
    assert matcher.state == state


def test_multibyte_character_split_across_tokens(compiled, info):
    matcher = matcher_for(compiled)
    byte_tokens = info.single_byte_tokens()
    assert matcher.accept_tokens(encode(info, '{"name":"'))
    for b in "é".encode():  # two byte-level tokens, neither a character on its own
        assert matcher.accept_token(byte_tokens[b])
    assert matcher.accept_tokens(encode(info, '","age":1}')) and matcher.can_finish()


def test_max_length_counts_characters_not_bytes(compiled, info):
    matcher = matcher_for(compiled)
    assert matcher.accept_tokens(encode(info, '{"name":"éééééééé","age":1}'))  # 8 characters, 16 bytes
    matcher = matcher_for(compiled)
    assert not matcher.accept_tokens(encode(info, '{"name":"ééééééééé"'))


def test_jump_forward_string(compiled, info):
    matcher = matcher_for(compiled)
    assert matcher.find_jump_forward_string() == '{"name":"'
    matcher.accept_tokens(encode(info, '{"name":"Al'))
    assert matcher.find_jump_forward_string() == ""  # a choice: more name, or the closing quote
    matcher.accept_tokens(encode(info, '"'))
    assert matcher.find_jump_forward_string() == ',"age":'


def test_jump_forward_tokens_retokenize_at_the_boundary(compiled, info):
    matcher = matcher_for(compiled)
    matcher.accept_tokens(encode(info, '{"name":"Al"'))
    plan = matcher.find_jump_forward_tokens()
    assert plan is not None and plan.text == ',"age":'
    matcher.rollback(plan.rollback)
    assert matcher.accept_tokens(list(plan.token_ids))
    assert matcher.accept_tokens(encode(info, "30}")) and matcher.can_finish()
    # the tokens are what the tokenizer makes of the text, so the model sees a natural tokenization
    assert info.tokenizer.decode(list(plan.token_ids)).endswith(',"age":')


def test_apply_token_bitmask_sets_minus_inf():
    torch.manual_seed(0)
    logits = torch.randn(2, 70)
    bitmask = torch.zeros(2, 3, dtype=torch.int32)
    bitmask[0, 0] = 0b1011  # tokens 0, 1, 3
    bitmask[1, 2] = 1 << 5  # token 69
    bitmask[1, 0] = -(1 << 31)  # token 31 (the sign bit)
    original = logits.clone()
    apply_token_bitmask_(logits, bitmask)
    finite = torch.isfinite(logits)
    assert finite[0].nonzero().flatten().tolist() == [0, 1, 3]
    assert finite[1].nonzero().flatten().tolist() == [31, 69]
    assert torch.equal(logits[finite], original[finite])


def test_apply_token_bitmask_on_selected_rows():
    logits = torch.zeros(3, 40)
    bitmask = torch.zeros(1, 2, dtype=torch.int32)
    bitmask[0, 1] = 1  # token 32
    apply_token_bitmask_(logits, bitmask, indices=torch.tensor([2]))
    assert torch.isfinite(logits[:2]).all()
    assert torch.isfinite(logits[2]).nonzero().flatten().tolist() == [32]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_apply_token_bitmask_cuda():
    logits = torch.randn(4, 1000, device="cuda")
    bitmask = torch.randint(-(2**31), 2**31 - 1, (4, 32), dtype=torch.int32)
    expected = logits.cpu().masked_fill(~unpack_bitmask(bitmask, 1000), float("-inf"))
    apply_token_bitmask_(logits, bitmask)
    assert torch.equal(logits.cpu(), expected)

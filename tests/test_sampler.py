"""Behaviour of the batched `Sampler`: greedy, filters, penalties, bias, masks, seeds and logprobs.

Each rule is checked against a plain reference written here, on small vocabularies so the file runs in seconds.
"""

from __future__ import annotations

import math

import pytest
import torch

from sprig.runtime.engine.generate_request import SamplingParams
from sprig.runtime.engine.sampler import (
    Sampler,
    SamplingBatch,
    apply_top_k_top_p,
    mix_seed,
    process_logits,
    unpack_allowed_mask,
)

torch.set_num_threads(1)
V = 50
EOS = 0


def make_batch(params: list[SamplingParams], outputs: list[list[int]] | None = None,
               prompts: list[list[int]] | None = None, vocab: int = V, **kw: object) -> SamplingBatch:
    outputs = outputs if outputs is not None else [[] for _ in params]
    prompts = prompts if prompts is not None else [[] for _ in params]
    return SamplingBatch.build(params, prompts, outputs, vocab, eos_token_ids=[EOS], **kw)  # type: ignore[arg-type]


def sp(**kw: object) -> SamplingParams:
    return SamplingParams.from_dict(kw).validate(V)


def random_logits(rows: int, vocab: int = V, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def draw(params: SamplingParams, logits_row: torch.Tensor, times: int, seed: int = 0) -> torch.Tensor:
    """`times` independent draws for one request: one batch with the same row repeated."""
    batch = make_batch([params] * times, vocab=logits_row.numel())
    return Sampler(seed=seed).sample(logits_row.expand(times, -1), batch).next_token_ids


def test_greedy_is_argmax() -> None:
    logits = random_logits(8)
    out = Sampler(seed=0).sample(logits, make_batch([sp(temperature=0)] * 8))
    assert torch.equal(out.next_token_ids, logits.argmax(-1))
    assert out.logprobs is None and out.top_logprob_ids is None


def test_top_k_one_and_tiny_top_p_are_greedy() -> None:
    logits = random_logits(6)
    greedy = logits.argmax(-1)
    for params in (sp(top_k=1), sp(temperature=1e-9), sp(top_p=1e-6), sp(top_p=1e-6, temperature=1.5),
                   sp(min_p=1.0)):
        for seed in range(3):
            out = Sampler(seed=seed).sample(logits, make_batch([params] * 6))
            assert torch.equal(out.next_token_ids, greedy), params


def test_top_k_samples_only_the_k_best() -> None:
    row = random_logits(1)[0]
    ids = draw(sp(top_k=5, temperature=2.0), row, 2000)
    assert set(ids.tolist()) == set(row.topk(5).indices.tolist())  # all five appear, nothing else


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    row = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert set(draw(sp(top_p=0.75), row, 2000).tolist()) == {0, 1}  # 0.5 < 0.75 <= 0.8
    assert set(draw(sp(top_p=0.85), row, 2000).tolist()) == {0, 1, 2}
    assert set(draw(sp(top_p=0.5), row, 2000).tolist()) == {0}


def test_min_p_drops_ids_below_fraction_of_top_probability() -> None:
    row = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.06, 0.04]))
    # threshold 0.25 * 0.4 = 0.1: ids 3 and 4 go
    assert set(draw(sp(min_p=0.25), row, 3000).tolist()) == {0, 1, 2}
    assert set(draw(sp(min_p=0.0), row, 3000).tolist()) == {0, 1, 2, 3, 4}


def test_filters_compose_top_k_then_top_p() -> None:
    row = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    # top-k 3 renormalises to 4/9, 3/9, 2/9; top_p 0.7 then needs ids 0 and 1 (7/9 >= 0.7)
    assert set(draw(sp(top_k=3, top_p=0.7), row, 2000).tolist()) == {0, 1}


def test_sampled_distribution_matches_softmax_over_temperature() -> None:
    row = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, 2.0, 0.2, -2.0])
    t, n = 0.8, 20000
    ids = draw(sp(temperature=t), row, n, seed=1234)
    observed = torch.bincount(ids, minlength=8).double()
    expected = torch.softmax(row.double() / t, -1) * n
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 30.0, chi2  # 7 degrees of freedom: P(chi2 > 30) ~ 1e-4, and the seed is fixed


def reference_penalties(logits: torch.Tensor, prompt: list[int], output: list[int], p: SamplingParams) -> torch.Tensor:
    """One row, written plainly: repetition (HF) on prompt+output ids, then frequency and presence on output ids."""
    x = logits.clone()
    for tok in set(prompt) | set(output):
        v = float(x[tok])
        x[tok] = v / p.repetition_penalty if v > 0 else v * p.repetition_penalty
    for tok in set(output):
        x[tok] -= p.frequency_penalty * output.count(tok) + p.presence_penalty
    return x


def test_penalties_change_the_right_logits_by_the_right_amounts() -> None:
    logits = random_logits(4)
    prompts = [[1, 2, 3], [4, 4, 5], [], [7]]
    outputs = [[3, 3, 9], [5, 10, 10, 10], [11], [7, 8]]
    params = [sp(frequency_penalty=0.5, presence_penalty=0.25), sp(repetition_penalty=1.3),
              sp(frequency_penalty=-1.0, repetition_penalty=0.8, presence_penalty=-0.5), sp()]
    batch = make_batch(params, outputs, prompts)
    x = logits.clone()
    process_logits(x, batch, None)
    for row in range(4):
        ref = reference_penalties(logits[row], prompts[row], outputs[row], params[row])
        torch.testing.assert_close(x[row], ref, rtol=0, atol=1e-6)
    assert torch.equal(x[3], logits[3])  # no penalty: bit-identical
    assert batch.penalties is not None
    assert make_batch([sp()] * 2, [[1], [2]]).penalties is None  # nothing built when nobody needs it


def test_logit_bias_is_added_and_plus_100_forces_a_token() -> None:
    logits = random_logits(3)
    params = [sp(logit_bias={"7": 100.0}), sp(logit_bias={7: 100.0}, temperature=0), sp(temperature=0)]
    for seed in range(3):
        out = Sampler(seed=seed).sample(logits, make_batch(params))
        assert out.next_token_ids[:2].tolist() == [7, 7]
        assert int(out.next_token_ids[2]) == int(logits[2].argmax())
    x = logits.clone()
    process_logits(x, make_batch([sp(logit_bias={3: -2.5, 4: 1.5})] * 3), None)
    assert torch.allclose(x[:, 3], logits[:, 3] - 2.5) and torch.allclose(x[:, 4], logits[:, 4] + 1.5)


def test_min_new_tokens_bans_eos_and_stop_ids_until_reached() -> None:
    logits = torch.zeros(3, V)
    logits[:, EOS] = 50.0
    logits[:, 9] = 40.0
    params = [sp(min_new_tokens=2, stop_token_ids=[9], temperature=0)] * 2 + [sp(min_new_tokens=1, ignore_eos=True,
                                                                                 temperature=0)]
    out = Sampler().sample(logits, make_batch(params, [[5], [5, 6], []]))
    assert int(out.next_token_ids[0]) not in (EOS, 9)  # 1 token so far < 2
    assert int(out.next_token_ids[1]) == EOS  # reached
    assert int(out.next_token_ids[2]) == EOS  # ignore_eos: EOS is not a stop, so not banned


def test_allowed_mask_bool_and_int32_bitmask() -> None:
    logits = random_logits(2)
    allowed = torch.zeros(2, V, dtype=torch.bool)
    allowed[0, [3, 40]] = True
    allowed[1, 33] = True
    words = (V + 31) // 32
    bitmask = torch.zeros(2, words, dtype=torch.int32)
    for r, c in allowed.nonzero().tolist():
        bitmask[r, c // 32] |= torch.tensor(1 << (c % 32), dtype=torch.int64).to(torch.int32)
    assert torch.equal(unpack_allowed_mask(bitmask, V), allowed)
    best0 = 3 if logits[0, 3] > logits[0, 40] else 40
    for mask in (allowed, bitmask):
        greedy = Sampler().sample(logits, make_batch([sp(temperature=0)] * 2), mask).next_token_ids.tolist()
        assert greedy == [best0, 33]
        sampled = Sampler(seed=1).sample(logits.expand(2, V).repeat(50, 1), make_batch([sp()] * 100), mask.repeat(50, 1))
        assert set(sampled.next_token_ids[0::2].tolist()) <= {3, 40} and set(sampled.next_token_ids[1::2].tolist()) == {33}


def test_bit_31_and_narrow_masks() -> None:
    mask = torch.tensor([[-(2**31)]], dtype=torch.int32)  # only bit 31 set
    assert unpack_allowed_mask(mask, 40)[0].nonzero().flatten().tolist() == [31]
    narrow = torch.ones(1, 30, dtype=torch.bool)  # a tokenizer smaller than the model vocab: padded ids banned
    assert unpack_allowed_mask(narrow, 40)[0, 30:].any().item() is False


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("as_bitmask", [False, True])
def test_grammar_wins_over_min_new_tokens_when_they_conflict(temperature: float, as_bitmask: bool) -> None:
    eos = 37  # why: not id 0, where a row of equal logits would land by the lowest-index tie rule anyway
    logits = random_logits(64)
    allowed = torch.zeros(64, V, dtype=torch.bool)
    allowed[:, eos] = True  # the grammar can only end
    mask = torch.zeros(64, (V + 31) // 32, dtype=torch.int32) if as_bitmask else allowed
    if as_bitmask:
        mask[:, eos // 32] = 1 << (eos % 32)
    params = [sp(min_new_tokens=5, temperature=temperature)] * 64
    batch = SamplingBatch.build(params, [[]] * 64, [[1]] * 64, V, eos_token_ids=[eos])
    out = Sampler(seed=0).sample(logits, batch, mask)
    assert out.next_token_ids.tolist() == [eos] * 64


def test_seeded_rows_reproduce_alone_and_in_any_batch() -> None:
    logits = random_logits(5, seed=3)
    params = [sp(seed=11, temperature=1.2, top_p=0.9), sp(seed=22), sp(), sp(temperature=0), sp(seed=11, top_k=7)]
    outputs = [[1, 2], [3], [], [4], []]
    together = Sampler(seed=1).sample(logits, make_batch(params, outputs)).next_token_ids
    for i in (0, 1, 4):
        alone = Sampler(seed=99).sample(logits[i:i + 1], make_batch([params[i]], [outputs[i]])).next_token_ids
        assert int(alone) == int(together[i])
    order = [4, 2, 0, 3, 1, 1]
    shuffled = Sampler(seed=5).sample(logits[order], make_batch([params[i] for i in order],
                                                                [outputs[i] for i in order])).next_token_ids
    reproducible = [j for j, i in enumerate(order) if i != 2]  # row 2 is unseeded: it may differ
    assert [int(shuffled[j]) for j in reproducible] == [int(together[order[j]]) for j in reproducible]


def test_a_seeded_needle_is_the_same_in_random_haystacks() -> None:
    rng = torch.Generator().manual_seed(0)
    needle = sp(seed=1234, temperature=0.9, top_p=0.95, top_k=30, min_p=0.01, frequency_penalty=0.2)
    history = [4, 4, 9]
    row = random_logits(1, seed=9)
    expected = int(Sampler(seed=0).sample(row, make_batch([needle], [history])).next_token_ids[0])
    for trial in range(12):
        size = int(torch.randint(2, 12, (1,), generator=rng))
        at = int(torch.randint(0, size, (1,), generator=rng))
        others = [sp(temperature=float(torch.rand(1, generator=rng)) + 0.1, top_p=0.5 + 0.5 * float(torch.rand(1, generator=rng)),
                     seed=None if trial % 2 else trial) for _ in range(size - 1)]
        params = others[:at] + [needle] + others[at:]
        outputs = [[1, 2]] * at + [history] + [[3]] * (size - 1 - at)
        logits = random_logits(size, seed=100 + trial)
        logits[at] = row[0]
        out = Sampler(seed=trial).sample(logits, make_batch(params, outputs)).next_token_ids
        assert int(out[at]) == expected


def reference_top_k_top_p(row: torch.Tensor, k: int, p: float) -> set[int]:
    """Plainly: keep the k best, renormalise, then the most likely ids until their mass reaches p."""
    order = row.argsort(descending=True).tolist()[:k]
    probs = torch.softmax(row[order].double(), -1).tolist()
    kept, mass = set(), 0.0
    for tok, prob in zip(order, probs, strict=True):
        kept.add(tok)
        mass += prob
        if mass >= p:
            break
    return kept


def test_top_k_top_p_filter_matches_a_plain_reference() -> None:
    logits = random_logits(40, seed=5)
    ks = torch.tensor([V if i % 3 == 0 else 1 + (7 * i) % V for i in range(40)])
    ps = torch.tensor([1.0 if i % 4 == 0 else 0.05 + 0.9 * ((13 * i) % 40) / 40 for i in range(40)])
    x = logits.clone()
    apply_top_k_top_p(x, ks, ps)
    for i in range(40):
        kept = set(torch.isfinite(x[i]).nonzero().flatten().tolist())
        assert kept == reference_top_k_top_p(logits[i], int(ks[i]), float(ps[i])), i
        assert torch.equal(x[i][list(kept)], logits[i][list(kept)])  # survivors are untouched


def test_seeded_sequence_survives_preemption_and_differs_across_steps_and_seeds() -> None:
    logits = torch.zeros(1, V)  # uniform: the draws are all noise

    def run(seed: int, steps: int, start: list[int] | None = None) -> list[int]:
        out = list(start or [])
        for _ in range(steps):
            batch = make_batch([sp(seed=seed)], [out])
            out.append(int(Sampler(seed=len(out)).sample(logits, batch).next_token_ids[0]))
        return out

    full = run(7, 12)
    assert run(7, 5, full[:7]) == full  # resumed after 7 tokens (a fresh Sampler, a rebuilt batch)
    assert len(set(full)) > 3  # the step index changes the noise
    assert run(8, 12) != full
    assert mix_seed(7, 0) != mix_seed(7, 1) != mix_seed(8, 0)


def test_greedy_rows_are_independent_of_their_neighbours() -> None:
    logits = random_logits(4)
    params = [sp(temperature=0, frequency_penalty=1.0), sp(temperature=0.9, logit_bias={1: 5}), sp(temperature=0),
              sp(repetition_penalty=1.5, top_p=0.5)]
    outputs = [[1, 1], [2], [3], [1]]
    together = Sampler(seed=0).sample(logits, make_batch(params, outputs)).next_token_ids
    for i in (0, 2):
        alone = Sampler(seed=0).sample(logits[i:i + 1], make_batch([params[i]], [outputs[i]])).next_token_ids
        assert int(alone) == int(together[i])


def test_logprobs_are_raw_model_logprobs_and_only_as_many_as_asked() -> None:
    logits = random_logits(3)
    params = [sp(temperature=0, logit_bias={5: 100}), sp(temperature=0), sp()]
    batch = make_batch(params, return_logprob=[True, False, True], top_logprobs_num=[3, 0, 1])
    out = Sampler(seed=0).sample(logits, batch)
    raw = torch.log_softmax(logits, -1)
    assert out.next_token_ids[0] == 5
    assert out.logprobs is not None and out.top_logprobs is not None and out.top_logprob_ids is not None
    assert math.isclose(float(out.logprobs[0]), float(raw[0, 5]), rel_tol=1e-6)  # before the bias
    assert math.isnan(float(out.logprobs[1]))  # row 1 did not ask
    assert out.top_logprob_ids.shape == (3, 3)  # K = the largest count asked
    top0 = raw[0].topk(3)
    assert out.top_logprob_ids[0].tolist() == top0.indices.tolist()
    torch.testing.assert_close(out.top_logprobs[0], top0.values)
    assert out.top_logprobs_of(1) == [] and len(out.top_logprobs_of(2)) == 1
    assert out.top_logprobs_of(2)[0][0] == int(raw[2].argmax())


def test_top_logprobs_alone_implies_logprobs() -> None:
    logits = random_logits(2)
    out = Sampler().sample(logits, make_batch([sp(temperature=0)] * 2, top_logprobs_num=[0, 2]))
    assert out.logprobs is not None and not math.isnan(float(out.logprobs[1]))
    assert [i for i, _ in out.top_logprobs_of(1)] == logits[1].topk(2).indices.tolist()


def test_bad_inputs_are_refused_before_touching_logits() -> None:
    with pytest.raises(ValueError, match="token ids"):
        make_batch([sp(frequency_penalty=1.0)], [[V]])  # an id the model does not have
    with pytest.raises(ValueError, match="logits"):
        Sampler().sample(torch.zeros(3, V), make_batch([sp()] * 2))
    with pytest.raises(ValueError, match="top_logprobs_num"):
        make_batch([sp()], top_logprobs_num=[-1])


def test_half_precision_logits_are_processed_in_float32() -> None:
    logits = random_logits(2).to(torch.bfloat16)
    out = Sampler().sample(logits, make_batch([sp(temperature=0)] * 2))
    assert torch.equal(out.next_token_ids, logits.float().argmax(-1))

"""Speculative decoding, sampling: the output distribution is the target's, and seeded requests repeat exactly.

The chi-square test: a looping prompt, temperature 4 over the loop's four tokens (a logit bias lifts them, top-k
keeps them), so the n-gram proposer drafts at every step after the first and the target keeps ~1 in 4 drafts;
N requests per arm, three tokens each, compared as a 2 x 64 contingency table of the joint (t1, t2, t3) (t0 is
sampled after prefill, never verified). Its power is stated below (noncentral chi-square at Cohen's w = 0.1) and
shown on the data: the same test, same N, tells temperature 4 from temperature 2.
"""

from __future__ import annotations

from collections import Counter

import pytest
from scipy import stats

from sprig import Engine

LOOP = [50, 60, 70, 80]
PROMPT = LOOP * 2 + LOOP[:3]
N = 4000
ALPHA = 0.001
EFFECT_W = 0.1  # Cohen's "small" effect on the joint table


def params(temperature: float, **extra: object) -> dict:
    return {"max_new_tokens": 4, "temperature": temperature, "top_k": 4, "ignore_eos": True,
            "logit_bias": {str(t): 30.0 for t in LOOP}, **extra}


def joint_counts(path: str, algo: str | None, temperature: float, seed: int) -> tuple[Counter, dict]:
    with Engine(path, dtype="float32", max_total_tokens=32768, speculative_algorithm=algo, random_seed=seed,
                speculative_disable_adaptive=True, max_running_requests=512, num_threads=1) as engine:
        results = engine.generate(input_ids=[PROMPT] * N, sampling_params=params(temperature))
        spec_stats = engine.stats()
    return Counter(tuple(r["output_ids"][1:4]) for r in results), spec_stats


def chi_square(a: Counter, b: Counter) -> tuple[float, int]:
    """p-value and degrees of freedom of the 2 x K test, cells expected below 5 merged into one."""
    keys = sorted(set(a) | set(b))
    big = [k for k in keys if (a[k] + b[k]) / 2 >= 5]
    rest = [k for k in keys if k not in big]
    table = [[a[k] for k in big] + ([sum(a[k] for k in rest)] if rest else []),
             [b[k] for k in big] + ([sum(b[k] for k in rest)] if rest else [])]
    _, p, dof, _ = stats.chi2_contingency(table)
    return float(p), int(dof)


def power(dof: int) -> float:
    """The chance this test (2N samples, level ALPHA) rejects when the two distributions differ by Cohen's w."""
    critical = stats.chi2.ppf(1 - ALPHA, dof)
    return float(stats.ncx2.sf(critical, dof, 2 * N * EFFECT_W**2))


@pytest.fixture(scope="module")
def path(tiny_paths) -> str:
    return str(tiny_paths["tiny-qwen3"])


def test_speculative_sampling_keeps_the_target_distribution(path):
    plain, _ = joint_counts(path, None, 4.0, seed=1)
    spec, spec_stats = joint_counts(path, "ngram", 4.0, seed=2)
    assert spec_stats["spec_verify_steps"] >= 1.5 * N  # most requests verified twice (k shrinks to fit 4 tokens)
    assert 0.1 < spec_stats["spec_accept_rate"] < 0.9  # drafts both kept and rejected
    p, dof = chi_square(plain, spec)
    print(f"chi-square p = {p:.3f} over {dof} dof; power at w={EFFECT_W}, alpha={ALPHA}: {power(dof):.3f}")
    assert power(dof) > 0.9
    assert p > ALPHA
    # The same test, same N, does see a real change of distribution: temperature 2 instead of 4.
    colder, _ = joint_counts(path, "ngram", 2.0, seed=3)
    p_colder, _ = chi_square(plain, colder)
    print(f"temperature 2 vs 4: p = {p_colder:.2e}")
    assert p_colder < ALPHA


def test_seeded_requests_repeat_and_match_plain_decoding(path):
    sampled = [params(1.5, seed=s, max_new_tokens=24, frequency_penalty=0.3, repetition_penalty=1.1)
               for s in range(16)]
    outputs = {}
    for algo in (None, "ngram", "ngram-again"):
        with Engine(path, dtype="float32", max_total_tokens=8192, num_threads=1,
                    speculative_algorithm=None if algo is None else "ngram") as engine:
            results = engine.generate(input_ids=[PROMPT] * len(sampled), sampling_params=sampled)
            outputs[algo] = [r["output_ids"] for r in results]
            if algo is not None:
                assert engine.stats()["spec_accepted_tokens"] > 0
    assert outputs["ngram"] == outputs["ngram-again"]
    assert outputs["ngram"] == outputs[None]  # the verifier draws each position's own seeded noise


@pytest.mark.parametrize("extra", [
    {"repetition_penalty": 1.3},
    {"frequency_penalty": 0.8, "presence_penalty": 0.5},
    {"min_new_tokens": 12, "stop_token_ids": [LOOP[0]]},
    {"logit_bias": {str(LOOP[1]): 5.0}, "top_p": 0.5},
], ids=["repetition", "frequency-presence", "min-new-tokens", "bias"])
def test_greedy_with_penalties_bans_and_bias_is_token_identical(path, extra):
    prompts = [PROMPT, LOOP * 5, [7, 8, 9, 7, 8, 9, 7, 8]]
    sp = {"max_new_tokens": 24, "temperature": 0, **extra}
    outputs = {}
    for algo in (None, "ngram"):
        with Engine(path, dtype="float32", max_total_tokens=8192, num_threads=1, speculative_algorithm=algo) as e:
            outputs[algo] = [r["output_ids"] for r in e.generate(input_ids=prompts, sampling_params=sp)]
            if algo is not None:
                assert e.stats()["spec_verify_steps"] > 0
    assert outputs["ngram"] == outputs[None]

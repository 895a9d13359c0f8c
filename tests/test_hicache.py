"""The host KV tier seen from outside the engine: its options, what it reports, and its faults.

A fault (a full host tier, a full disk, a cache file that cannot be written) never fails a request: the engine
recomputes instead, logs why and counts it, and greedy output is what it is without the tier.
"""

from __future__ import annotations

import logging
import random
import shutil

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sprig import Engine
from sprig.runtime.cli import build_parser
from sprig.runtime.config import config_from_args
from sprig.runtime.server.metrics import ServerMetrics

GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
SMALL_POOL = {"dtype": "float32", "max_total_tokens": 256, "page_size": 16, "chunked_prefill_size": 64}


def documents_and_questions(seed: int = 0) -> list[list[int]]:
    """Four 96-token documents asked about in turn: more than the 256-token pool holds, so they are evicted."""
    rng = random.Random(seed)
    docs = [[rng.randrange(3, 2000) for _ in range(96)] for _ in range(4)]
    return [docs[i % 4] + [rng.randrange(3, 2000) for _ in range(8)] for i in range(16)]


def outputs(engine: Engine, prompts: list[list[int]]) -> list[list[int]]:
    return [engine.generate(input_ids=p, sampling_params=GREEDY)["output_ids"] for p in prompts]


@pytest.fixture(scope="module")
def path(tiny_paths) -> str:
    return str(tiny_paths["tiny-llama"])


@pytest.fixture(scope="module")
def without_tier(path) -> list[list[int]]:
    with Engine(path, **SMALL_POOL) as engine:
        return outputs(engine, documents_and_questions())


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(("options", "field"), [
    ({"enable_hierarchical_cache": True, "hicache_ratio": 0}, "hicache_ratio"),
    ({"enable_hierarchical_cache": True, "hicache_size": -1}, "hicache_size"),
    ({"enable_hierarchical_cache": True, "hicache_storage_backend": "s3"}, "hicache_storage_backend"),
    ({"hicache_storage_backend": "file"}, "hicache_storage_backend"),
    ({"enable_hierarchical_cache": True, "disable_radix_cache": True}, "enable_hierarchical_cache"),
    ({"enable_hierarchical_cache": True, "hicache_swap_min_tokens": -1}, "hicache_swap_min_tokens"),
])
def test_bad_tier_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=field):
        Engine(None, **options)


def test_sglang_flag_names_map_to_engine_keywords():
    args = build_parser().parse_args(["generate", "--prompt", "x", "--enable-hierarchical-cache", "--hicache-size",
                                      "4", "--hicache-ratio", "3", "--hicache-storage-backend", "file",
                                      "--hicache-storage-dir", "/data/kv"])
    cfg = config_from_args(args)
    assert (cfg.enable_hierarchical_cache, cfg.hicache_size, cfg.hicache_ratio) == (True, 4.0, 3.0)
    assert (cfg.hicache_storage_backend, cfg.hicache_storage_dir) == ("file", "/data/kv")


# ---------------------------------------------------------------- what it reports


def test_meta_info_and_metrics_count_cached_tokens_by_tier(path, without_tier):
    with Engine(path, enable_hierarchical_cache=True, hicache_ratio=8, **SMALL_POOL) as engine:
        prompts = documents_and_questions()
        results = [engine.generate(input_ids=p, sampling_params=GREEDY) for p in prompts]
        metrics = {f.name: f for f in text_string_to_metric_families(ServerMetrics(lambda: engine).render().decode())}
    assert [r["output_ids"] for r in results] == without_tier
    details = [r["meta_info"]["cached_tokens_details"] for r in results]
    assert all(d["device"] + d["host"] == r["meta_info"]["cached_tokens"] for d, r in zip(details, results,
                                                                                        strict=True))
    assert sum(d["host"] for d in details) > 0  # documents came back from the host tier

    def sample(name: str, **labels: str) -> float:
        return next(s.value for s in metrics[name].samples if s.name.endswith("_total") and s.labels == labels)

    assert sample("sprig_cache_hit_tokens", tier="host") == sum(d["host"] for d in details)
    assert sample("sprig_hicache_bytes", direction="offload") > 0
    assert sample("sprig_hicache_bytes", direction="load") > 0
    assert sample("sprig_hicache_seconds", direction="load") > 0


def test_meta_info_has_no_tier_details_without_a_tier(path):
    with Engine(path, **SMALL_POOL) as engine:
        meta = engine.generate(input_ids=[5, 6, 7], sampling_params=GREEDY)["meta_info"]
    assert "cached_tokens_details" not in meta


# ---------------------------------------------------------------- faults: recompute, never fail


def run_with_fault(path: str, caplog, **options) -> tuple[list[list[int]], dict]:
    with caplog.at_level(logging.WARNING, logger="sprig.runtime.engine.host_tier"), \
            Engine(path, enable_hierarchical_cache=True, **SMALL_POOL, **options) as engine:
        results = [engine.generate(input_ids=p, sampling_params=GREEDY) for p in documents_and_questions()]
        stats = engine.stats()
    assert all(r["meta_info"]["finish_reason"]["type"] == "length" for r in results)  # no failed request
    return [r["output_ids"] for r in results], stats


def test_a_full_host_tier_recomputes_with_a_logged_reason(path, without_tier, caplog):
    out, stats = run_with_fault(path, caplog, hicache_size=1e-9)  # one page: no document fits
    assert out == without_tier
    assert stats["hicache_enabled"] and stats["hicache_fallbacks"]["host_full"] > 0
    assert "host_full" in caplog.text


def test_a_full_disk_runs_without_the_tier_and_says_why(path, without_tier, caplog, tmp_path):
    too_big_gb = 2 * shutil.disk_usage(tmp_path).free / 1e9  # more than this disk can hold
    out, stats = run_with_fault(path, caplog, hicache_size=too_big_gb, hicache_storage_backend="file",
                                hicache_storage_dir=str(tmp_path))
    assert out == without_tier
    assert not stats["hicache_enabled"] and stats["hicache_fallbacks"]["tier_unavailable"] == 1
    assert "disk full" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_file_runs_without_the_tier_and_says_why(path, without_tier, caplog, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    out, stats = run_with_fault(path, caplog, hicache_storage_backend="file", hicache_storage_dir=str(blocker))
    assert out == without_tier
    assert not stats["hicache_enabled"] and stats["hicache_fallbacks"]["tier_unavailable"] == 1
    assert "cannot create the cache file" in caplog.text


def test_the_file_backend_serves_like_memory(path, without_tier, tmp_path):
    with Engine(path, enable_hierarchical_cache=True, hicache_ratio=8, hicache_storage_backend="file",
                hicache_storage_dir=str(tmp_path), **SMALL_POOL) as engine:
        assert outputs(engine, documents_and_questions()) == without_tier
        stats = engine.stats()
    assert stats["hicache_host_hit_tokens"] > 0 and not any(stats["hicache_fallbacks"].values())

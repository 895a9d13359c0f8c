"""LoRA adapters over HTTP: `lora_path` on /generate and `model: "NAME"` / `"BASE:NAME"` on the OpenAI routes, the
adapters listed by /v1/models with their `parent`, run-time loads and unloads behind the API key and confined to
--lora-roots, and the status of each bad input (404 unknown adapter, 400 bad adapter naming it and the module, 401
without the key, 403 outside the roots); no bad input leaks a pool slot."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import torch
from test_server_helpers import ServerProcess, assert_openai_error, tiny_model

from sprig import Engine
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.lora_adapter import LoraError, random_adapter_weights, write_adapter

ADMIN = "sk-admin-0123456789"
USER = "sk-user-0123456789"
GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    cfg = load_model_config(tiny_model())
    root, outside = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("outside")
    all_linear = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    made = {
        "a": write_adapter(root / "a", random_adapter_weights(cfg, 8, all_linear, seed=1, std=0.3), 8, 16.0,
                           all_linear),
        "b": write_adapter(root / "b", random_adapter_weights(cfg, 16, ["q_proj", "v_proj"], seed=2, std=0.3), 16,
                           16.0, ["q_proj", "v_proj"]),
        "big": write_adapter(root / "big", random_adapter_weights(cfg, 128, ["k_proj"], seed=3), 128, 16.0,
                             ["k_proj"]),
        "outside": write_adapter(outside / "x", random_adapter_weights(cfg, 8, ["q_proj"], seed=4), 8, 8.0,
                                 ["q_proj"]),
    }
    wrong = random_adapter_weights(cfg, 8, ["down_proj"], seed=5)
    wrong["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"] = torch.zeros(8, 100)
    made["wrong"] = write_adapter(root / "wrong", wrong, 8, 8.0, ["down_proj"])
    return root, made


@pytest.fixture(scope="module")
def server(folders, tmp_path_factory):
    root, made = folders
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "user", "key": USER}]}))
    with ServerProcess("--api-key", ADMIN, "--api-keys", str(keys), "--lora-paths", f"a={made['a']}",
                       "--lora-roots", str(root), "--max-loras-per-batch", "2", "--max-lora-rank", "64") as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        yield c


def _generate(http, lora_path=None, **extra) -> httpx.Response:
    body = {"input_ids": list(range(5, 25)), "sampling_params": GREEDY, **extra}
    if lora_path is not None:
        body["lora_path"] = lora_path
    return http.post("/generate", json=body)


def test_models_list_adapters_with_their_parent(http):
    cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
    base = next(c for c in cards.values() if c["parent"] is None)
    assert cards["a"]["parent"] == base["id"] and cards["a"]["root"].endswith("/a")
    assert http.get("/v1/models/a").json()["parent"] == base["id"]


def test_generate_and_openai_routes_run_the_adapter(http):
    plain = _generate(http).json()["output_ids"]
    tuned = _generate(http, "a").json()["output_ids"]
    assert tuned != plain
    base = next(c["id"] for c in http.get("/v1/models").json()["data"] if c["parent"] is None)
    for model in ("a", f"{base}:a"):
        body = {"model": model, "prompt": list(range(5, 25)), "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "logprobs": 1}
        out = http.post("/v1/completions", json=body).json()
        assert out["choices"][0]["text"] == _generate(http, "a").json()["text"], model


def test_unknown_adapters_get_404_naming_them(http):
    err = assert_openai_error(_generate(http, "nope"), 404, "lora_path", "lora_not_found")
    assert "adapter nope" in err["message"]
    base = next(c["id"] for c in http.get("/v1/models").json()["data"] if c["parent"] is None)
    body = {"model": f"{base}:nope", "prompt": "hi", "max_tokens": 2}
    assert "adapter nope" in assert_openai_error(http.post("/v1/completions", json=body), 404, "model")["message"]
    assert_openai_error(http.post("/v1/completions", json={**body, "model": "nope"}), 404, "model",
                        "model_not_found")


def test_bad_loads_get_their_status(http, server, folders):
    root, made = folders
    body = {"lora_name": "x", "lora_path": str(made["b"])}
    assert_openai_error(httpx.post(server.url + "/load_lora_adapter", json=body), 401)
    assert_openai_error(http.post("/load_lora_adapter", json=body, headers={"Authorization": f"Bearer {USER}"}), 403)
    out = assert_openai_error(http.post("/load_lora_adapter", json={"lora_name": "x",
                                                                    "lora_path": str(made["outside"])}), 403)
    assert "outside the configured --lora-roots" in out["message"]
    err = assert_openai_error(http.post("/load_lora_adapter", json={"lora_name": "big", "lora_path": str(made["big"])}),
                              400, "k_proj")
    assert "adapter big: module layers.0.k_proj has rank 128" in err["message"]
    err = assert_openai_error(http.post("/load_lora_adapter", json={"lora_name": "wrong",
                                                                    "lora_path": str(made["wrong"])}), 400, "down_proj")
    assert "adapter wrong: module layers.0.down_proj" in err["message"]
    assert_openai_error(http.post("/load_lora_adapter", json={"lora_name": "a2", "lora_path": str(root / "none")}), 400)
    assert_openai_error(http.post("/load_lora_adapter", json={"lora_name": "a", "lora_path": str(made["b"])}), 400)
    assert_openai_error(http.post("/unload_lora_adapter", json={"lora_name": "nope"}), 404)
    assert {c["id"] for c in http.get("/v1/models").json()["data"]} >= {"a"}
    assert "big" not in {c["id"] for c in http.get("/v1/models").json()["data"]}


def test_load_serve_and_unload_after_running_requests_finish(http, folders):
    _, made = folders
    out = http.post("/load_lora_adapter", json={"lora_name": "b", "lora_path": str(made["b"])}).json()
    assert out["success"] and set(out["loaded_adapters"]) == {"a", "b"}
    mixed = http.post("/generate", json={"input_ids": [list(range(5, 25))] * 3, "sampling_params": GREEDY,
                                         "lora_path": ["a", "b", None]}).json()
    assert [r["output_ids"] for r in mixed] == [_generate(http, n).json()["output_ids"] for n in ("a", "b", None)]
    long = {}

    def run_long() -> None:
        long["result"] = _generate(http, "b", sampling_params={**GREEDY, "max_new_tokens": 1500}).json()
        long["done"] = time.monotonic()

    thread = threading.Thread(target=run_long)
    thread.start()
    time.sleep(0.3)  # the long request is running
    assert "done" not in long
    asked = time.monotonic()
    unloaded = http.post("/unload_lora_adapter", json={"lora_name": "b"})
    waited = time.monotonic() - asked
    thread.join()
    assert unloaded.status_code == 200 and set(unloaded.json()["loaded_adapters"]) == {"a"}
    # It answered once the request had finished, which ran to its end (the engine delivers its result right after).
    assert len(long["result"]["output_ids"]) == 1500 and long["result"]["meta_info"]["finish_reason"]["type"] == "length"
    assert waited > 0.2 and long["done"] - asked < waited + 1.0
    assert "adapter b is not loaded" in assert_openai_error(_generate(http, "b"), 404, "lora_path")["message"]


def test_no_bad_input_leaks_a_pool_slot(folders):
    root, made = folders
    with Engine(tiny_model(), dtype="float32", num_threads=1, max_total_tokens=2048, lora_roots=[str(root)],
                max_loras_per_batch=2, max_lora_rank=64) as engine:
        manager = engine.core.lora
        assert manager is not None
        for name, path in (("big", made["big"]), ("wrong", made["wrong"]), ("x", made["outside"]),
                           ("none", root / "none")):
            with pytest.raises(LoraError):
                engine.lora.load(name, str(path))
        with pytest.raises(LoraError, match="adapter nope is not loaded"):
            engine.generate(input_ids=[5, 6, 7], sampling_params=GREEDY, lora_path="nope")
        assert manager.entries == {} and sorted(manager._free) == [0, 1]
        engine.lora.load("a", str(made["a"]))
        engine.lora.load("b", str(made["b"]))
        engine.generate(input_ids=[[5, 6, 7]] * 2, sampling_params=GREEDY, lora_path=["a", "b"])
        assert all(e.pinned == 0 and e.holders == 0 for e in manager.entries.values())
        assert engine.lora.unload("a", 30) and engine.lora.unload("b", 30)
        assert manager.entries == {} and sorted(manager._free) == [0, 1]
        assert int(manager.pool.ranks.abs().sum()) == 0

"""Tiny random-weight Hugging Face checkpoints that sprig builds itself.

Tests and the demo model need real checkpoint folders (config.json, safetensors, tokenizer files with a chat
template) but nothing may be downloaded, so they are built here: a byte-level BPE tokenizer trained on text the
package ships, a transformers config, and seeded random weights saved with `save_pretrained`. Each folder is
built once into a cache directory (``$SPRIG_CACHE_DIR``, default ``~/.cache/sprig``) keyed by a hash of its recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

DATA_DIR = Path(__file__).parent / "data"
BUILDER_VERSION = 1

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class CheckpointRecipe:
    """Everything that determines a built checkpoint; its hash names the cache folder."""

    name: str
    architecture: str  # a key of ARCH_CONFIG_CLASSES
    tokenizer_vocab: int = 2048
    vocab_size: int | None = None  # model vocab; None = tokenizer size; larger = padded vocab like real models
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None
    intermediate_size: int = 128
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    initializer_range: float = 0.2  # larger than HF's 0.02 so greedy argmaxes are far from ties
    seed: int = 0
    extra_config: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "v": BUILDER_VERSION}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


RECIPES: dict[str, CheckpointRecipe] = {
    "tiny-llama": CheckpointRecipe(
        "tiny-llama",
        "LlamaForCausalLM",
        vocab_size=2100,
        extra_config=(
            ("rope_parameters", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 256}),
        ),
    ),
    "tiny-mistral": CheckpointRecipe("tiny-mistral", "MistralForCausalLM", num_kv_heads=1, seed=1,
                                     extra_config=(("sliding_window", None),)),
    "tiny-qwen2": CheckpointRecipe("tiny-qwen2", "Qwen2ForCausalLM", attention_bias=True, tie_word_embeddings=True,
                                   seed=2, extra_config=(("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e6,
                                                                              "factor": 4.0,
                                                                              "original_max_position_embeddings": 512}),)),
    "tiny-qwen3": CheckpointRecipe("tiny-qwen3", "Qwen3ForCausalLM", num_heads=4, num_kv_heads=4, head_dim=32, seed=3,
                                   extra_config=(("rope_parameters", {"rope_type": "linear", "rope_theta": 1e6,
                                                                      "factor": 2.0}),)),
    # MoE: experts smaller than the dense MLP, dense layers between sparse ones, top-k of 2-3 with and without
    # renormalization, Qwen2-MoE's shared expert (routers and experts get random weights like every linear).
    "tiny-mixtral": CheckpointRecipe("tiny-mixtral", "MixtralForCausalLM", intermediate_size=96, seed=4,
                                     extra_config=(("num_local_experts", 4), ("num_experts_per_tok", 2),
                                                   ("sliding_window", None))),
    "tiny-qwen2-moe": CheckpointRecipe("tiny-qwen2-moe", "Qwen2MoeForCausalLM", num_layers=3, seed=5,
                                       extra_config=(("num_experts", 6), ("num_experts_per_tok", 2),
                                                     ("moe_intermediate_size", 48),
                                                     ("shared_expert_intermediate_size", 80),
                                                     ("norm_topk_prob", False), ("mlp_only_layers", [1]))),
    "tiny-qwen3-moe": CheckpointRecipe("tiny-qwen3-moe", "Qwen3MoeForCausalLM", num_layers=4, head_dim=32, seed=6,
                                       extra_config=(("num_experts", 8), ("num_experts_per_tok", 3),
                                                     ("moe_intermediate_size", 32), ("norm_topk_prob", True),
                                                     ("decoder_sparse_step", 2))),
    "demo": CheckpointRecipe("demo", "LlamaForCausalLM", tokenizer_vocab=4096, hidden_size=256, num_layers=4,
                             num_heads=8, num_kv_heads=2, intermediate_size=704, max_position_embeddings=4096,
                             tie_word_embeddings=True, initializer_range=0.1, seed=7),
    "llama-100m": CheckpointRecipe("llama-100m", "LlamaForCausalLM", tokenizer_vocab=4096, vocab_size=32000,
                                   hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=4,
                                   intermediate_size=2048, max_position_embeddings=4096, initializer_range=0.02,
                                   seed=11),
}
TINY_ARCHITECTURES = ["tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"]
# Gemma 1-3 and OLMo-2, each part set so that leaving it out changes the logits: soft-caps low enough to bite, a
# sliding window shorter than the test prompts, query_pre_attn_scalar != head_dim, distinct local / global rope.
_GEMMA2_PARTS = (("query_pre_attn_scalar", 24), ("attn_logit_softcapping", 2.0), ("final_logit_softcapping", 3.0),
                 ("sliding_window", 8))
RECIPES |= {
    "tiny-gemma": CheckpointRecipe("tiny-gemma", "GemmaForCausalLM", num_kv_heads=1, head_dim=16, seed=4),
    "tiny-gemma2": CheckpointRecipe("tiny-gemma2", "Gemma2ForCausalLM", head_dim=16, seed=5,
                                    extra_config=_GEMMA2_PARTS),
    "tiny-gemma3": CheckpointRecipe(
        "tiny-gemma3", "Gemma3ForCausalLM", num_layers=3, head_dim=16, tie_word_embeddings=True, seed=6,
        extra_config=(("query_pre_attn_scalar", 24), ("sliding_window", 8),
                      ("layer_types", ["sliding_attention", "full_attention", "sliding_attention"]),
                      ("rope_parameters", {"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                              "rope_theta": 1e6},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}))),
    "tiny-olmo2": CheckpointRecipe("tiny-olmo2", "Olmo2ForCausalLM", seed=8),
}
GEMMA_OLMO_CHECKPOINTS = ["tiny-gemma", "tiny-gemma2", "tiny-gemma3", "tiny-olmo2"]
CONFIG_CLASSES = {"Gemma3ForCausalLM": "Gemma3TextConfig"}  # where the config is not named after the model

# Phi-3, Granite, GPT-NeoX and StableLM, each part set so that leaving it out changes the logits: biases and norm
# weights random, multipliers far from 1, partial rotary, LongRoPE in both regimes (its long factors when the served
# context passes original_max_position_embeddings, see rope.py), head_dim 32 so the rotated part has 4+ frequencies.
_LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0,
             "short_factor": [1.0, 1.3, 1.9, 2.6, 3.4, 4.1, 5.0, 6.2],
             "long_factor": [1.1, 2.0, 3.5, 5.5, 8.0, 11.0, 15.0, 20.0]}
FAMILY_RECIPES: dict[str, CheckpointRecipe] = {
    "tiny-phi3-long": CheckpointRecipe(
        "tiny-phi3-long", "Phi3ForCausalLM", num_heads=2, num_kv_heads=1, head_dim=32, seed=21,
        extra_config=(("rope_parameters", {**_LONGROPE, "partial_rotary_factor": 0.5,
                                           "original_max_position_embeddings": 2}),
                      ("original_max_position_embeddings", 2)),
    ),
    "tiny-phi3-short": CheckpointRecipe(
        "tiny-phi3-short", "Phi3ForCausalLM", num_heads=2, num_kv_heads=2, head_dim=32, seed=22,
        extra_config=(("rope_parameters", {**_LONGROPE, "short_factor": [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0,
                                                                           4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0],
                                           "long_factor": [9.0] * 16, "factor": 8.0,
                                           "original_max_position_embeddings": 2048}),
                      ("original_max_position_embeddings", 2048)),
    ),
    "tiny-granite": CheckpointRecipe(
        "tiny-granite", "GraniteForCausalLM", seed=23, tie_word_embeddings=True,
        extra_config=(("embedding_multiplier", 3.0), ("residual_multiplier", 0.4), ("attention_multiplier", 0.3),
                      ("logits_scaling", 2.5), ("attention_bias", True), ("mlp_bias", True)),
    ),
    "tiny-gpt-neox": CheckpointRecipe(
        "tiny-gpt-neox", "GPTNeoXForCausalLM", num_heads=2, num_kv_heads=2, seed=24,
        extra_config=(("rotary_pct", 0.25), ("use_parallel_residual", True), ("hidden_act", "gelu")),
    ),
    "tiny-gpt-neox-sequential": CheckpointRecipe(
        "tiny-gpt-neox-sequential", "GPTNeoXForCausalLM", num_heads=2, num_kv_heads=2, seed=25,
        extra_config=(("rotary_pct", 0.5), ("use_parallel_residual", False), ("hidden_act", "gelu_new")),
    ),
    "tiny-stablelm": CheckpointRecipe(
        "tiny-stablelm", "StableLmForCausalLM", num_heads=2, num_kv_heads=1, seed=26,
        extra_config=(("partial_rotary_factor", 0.25), ("use_parallel_residual", True), ("use_qkv_bias", True)),
    ),
    "tiny-stablelm-sequential": CheckpointRecipe(
        "tiny-stablelm-sequential", "StableLmForCausalLM", num_heads=2, num_kv_heads=2, seed=27,
        extra_config=(("partial_rotary_factor", 0.5), ("use_parallel_residual", False)),
    ),
}
RECIPES.update(FAMILY_RECIPES)
FAMILY_CHECKPOINTS = list(FAMILY_RECIPES)
TINY_MOE_ARCHITECTURES = ["tiny-mixtral", "tiny-qwen2-moe", "tiny-qwen3-moe"]


def cache_dir() -> Path:
    return Path(os.environ.get("SPRIG_CACHE_DIR", Path.home() / ".cache" / "sprig"))


def checkpoint_path(name_or_recipe: str | CheckpointRecipe) -> Path:
    """Return the folder of a built checkpoint, building it first if needed."""
    recipe = RECIPES[name_or_recipe] if isinstance(name_or_recipe, str) else name_or_recipe
    target = cache_dir() / "checkpoints" / f"{recipe.name}-{recipe.key()}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{recipe.name}-", dir=target.parent))
    try:
        build_checkpoint(recipe, tmp)
        try:
            os.rename(tmp, target)  # atomic: a concurrent builder of the same recipe simply loses the race
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def demo_model_path() -> Path:
    return checkpoint_path("demo")


def train_tokenizer(vocab_size: int):
    """Train a byte-level BPE tokenizer on the shipped corpus (deterministic for a given vocab size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = sorted(str(p) for p in DATA_DIR.glob("corpus*.txt"))
    tok.train(files, trainer)
    return tok


def _save_tokenizer(tok, folder: Path) -> None:
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 1 << 20,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                      "normalized": False, "single_word": False}
            for t in SPECIAL_TOKENS
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))


def build_checkpoint(recipe: CheckpointRecipe, folder: Path) -> None:
    """Write tokenizer files, config.json, generation_config.json and safetensors weights into `folder`."""
    import torch
    import transformers

    with _stage_bar(f"building the {recipe.name} checkpoint (first run)", 4) as stage:
        stage("tokenizer")
        tok = train_tokenizer(recipe.tokenizer_vocab)
        _save_tokenizer(tok, folder)
        stage("transformers import")  # most of the build: transformers imports model code lazily
        config_cls = getattr(transformers, CONFIG_CLASSES.get(recipe.architecture,
                                                              recipe.architecture.replace("ForCausalLM", "Config")))
        model_cls = getattr(transformers, recipe.architecture)
        stage("random weights")
        eos_ids = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
        config = config_cls(**_config_kwargs(recipe, tok.get_vocab_size(), eos_ids))
        config.architectures = [recipe.architecture]
        torch.manual_seed(recipe.seed)
        model = model_cls(config)
        _randomize_norms(model, recipe.seed)
        stage("saving")
        transformers.utils.logging.disable_progress_bar()  # this build's own bar says it
        model.save_pretrained(folder, safe_serialization=True)
        gen = transformers.GenerationConfig(eos_token_id=eos_ids, pad_token_id=eos_ids[1], bos_token_id=None)
        gen.save_pretrained(folder)


def _config_kwargs(recipe: CheckpointRecipe, tokenizer_size: int, eos_ids: list[int]) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(
        vocab_size=recipe.vocab_size or tokenizer_size,
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        intermediate_size=recipe.intermediate_size,
        max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=recipe.tie_word_embeddings,
        initializer_range=recipe.initializer_range,
        bos_token_id=None,
        eos_token_id=eos_ids,
        pad_token_id=eos_ids[1],
    )
    if recipe.head_dim is not None:
        kwargs["head_dim"] = recipe.head_dim
    if recipe.architecture in ("LlamaForCausalLM", "MistralForCausalLM"):
        kwargs["attention_bias"] = recipe.attention_bias
    kwargs.update(dict(recipe.extra_config))
    return kwargs


@contextmanager
def _stage_bar(desc: str, stages: int) -> Iterator[Callable[[str], None]]:
    """A bar of `stages` steps; calling the yielded function starts the next one, named beside the bar.
    Shown only when stderr is a terminal (tqdm's `disable=None`): silent in tests and in log files."""
    with tqdm(total=stages, desc=desc, unit="step", disable=None) as bar:
        started = False

        def stage(name: str) -> None:
            nonlocal started
            if started:
                bar.update()
            started = True
            bar.set_postfix_str(name)

        yield stage
        bar.update()


def _randomize_norms(model, seed: int) -> None:
    """Norm weights start at 1 and biases at 0; perturb them so a wrong norm or bias would show in the logits."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))

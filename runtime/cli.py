"""The `sprig` command line: generate, serve, bench, router.

Global flags (`--log-level`, `--debug`) work before or after the subcommand; every help shows the defaults. A user
error (bad option, missing model, unusable device) is one line on stderr; `--debug` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator

from sprig.runtime.config import add_engine_args, config_from_args
from sprig.runtime.errors import USER_ERRORS, describe

EXIT_USAGE = 2
EXIT_FAILURE = 1


LOG_LEVELS = ["debug", "info", "warning", "error"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows `(default: X)` after each flag's help, unless the help already says it or there is nothing to show;
    a command's examples (its epilog) keep their lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = any(action.default is v for v in (None, False, argparse.SUPPRESS))  # `is`: a default of 0 is shown
        if "default" in text or unset or not action.option_strings:
            return text
        return super()._get_help_string(action) or text


def _fail(message: str, debug: bool = False) -> int:
    if debug:
        traceback.print_exc()
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
    parser = argparse.ArgumentParser(prog="sprig", description="structured-generation and prefix-sharing LLM runtime",
                                     formatter_class=HelpFormatter)
    _add_global_args(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text for one or more prompts")
    add_engine_args(gen)
    gen.add_argument("--prompt", action="append", required=True, help="a prompt (repeat for several)")
    gen.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate at most per prompt")
    gen.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this much probability mass")
    gen.add_argument("--top-k", type=int, default=-1, help="sample among the k most likely tokens (-1: all)")
    gen.add_argument("--seed", type=int, default=None,
                     help="per-request seed for reproducible sampling (default: unseeded)")
    gen.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    gen.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    gen.add_argument("--json", action="store_true", help="one JSON result object per prompt")
    gen.set_defaults(func=cmd_generate)

    _add_optional_commands(sub)
    for sub_parser in _subparsers(parser):
        sub_parser.formatter_class = HelpFormatter
        _add_global_args(sub_parser, argparse.SUPPRESS)  # why: SUPPRESS keeps the value given before the command
    parser.set_defaults(log_level="warning", debug=False)
    return parser


def _add_global_args(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--log-level", default=default, choices=LOG_LEVELS,
                        help="log level (default: warning; accepted before or after the command)")
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show the traceback of an error, not only its one-line message")


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below `parser` (commands and their own subcommands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from _subparsers(child)


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


def _multi_process(args: argparse.Namespace) -> bool:
    """Whether the command runs several ranks (tensor and/or pipeline parallel)."""
    return getattr(args, "tp_size", 1) > 1 or getattr(args, "pp_size", 1) > 1


def _torchrun_rank(args: argparse.Namespace) -> int | None:
    """Under torchrun, every rank but 0 runs the worker loop (its shard or stage) instead of the command."""
    if not _multi_process(args) or int(os.environ.get("RANK", "0")) == 0:
        return None
    from sprig.runtime.distributed.tp_worker import run_torchrun_worker

    return run_torchrun_worker(config_from_args(args))


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command's modules still import: no traceback
        return 130
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        worker_status = _torchrun_rank(args)
        if worker_status is not None:
            return worker_status
        if _multi_process(args):
            from sprig.runtime.distributed.tp_group import FailurePolicy, recorded_failure, set_failure_policy

            set_failure_policy(FailurePolicy.EXIT_PROCESS)  # why: a command whose rank died must end, not linger
            try:
                status = int(args.func(args) or 0)
                failure = recorded_failure()
            finally:  # why: main() run in process (tests) must not leave later engines stopping the process
                set_failure_policy(FailurePolicy.RAISE)
            return status if failure is None else EXIT_FAILURE
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        return _fail(describe(e), args.debug)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

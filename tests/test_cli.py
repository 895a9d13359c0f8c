"""`sprig generate` prints results, and bad input gives one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest


def sprig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sprig.runtime.cli", *args], capture_output=True, text=True,
                          timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                            **{k: v for k, v in __import__("os").environ.items()
                                               if k in ("HOME", "SPRIG_CACHE_DIR", "PYTHONPATH")}})


def test_generate_json_prints_one_result_per_prompt(tiny_paths):
    out = sprig("generate", "--model", str(tiny_paths["tiny-llama"]), "--prompt", "Hello", "--prompt", "Licensed",
                "--max-new-tokens", "5", "--json", "--num-threads", "1")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 2
    for res in lines:
        assert set(res) == {"text", "output_ids", "meta_info"}
        assert res["meta_info"]["completion_tokens"] == len(res["output_ids"]) <= 5
        assert res["meta_info"]["finish_reason"]["type"] in ("stop", "length")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/no/such/folder"], "model folder not found"),
        (["--dtype", "float8"], "unsupported dtype 'float8'"),
        (["--quantization", "fp4"], "unsupported quantization 'fp4'"),
        (["--temperature", "-1"], "temperature"),
        (["--device", "tpu"], "device 'tpu' is not one of cpu, cuda, cuda:N"),
        (["--device", "cuda:64"], "device 'cuda:64'"),  # no CUDA, or no 65th GPU: one line either way
    ],
)
def test_bad_input_is_one_line_and_exit_2(tiny_paths, args, message):
    base = ["generate", "--prompt", "hi", "--num-threads", "1"]
    if "--model" not in args:
        base += ["--model", str(tiny_paths["tiny-llama"])]
    out = sprig(*base, *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_missing_config_and_unsupported_architecture(tmp_path, tiny_paths):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_paths["tiny-llama"], folder)
    (folder / "config.json").unlink()
    out = sprig("generate", "--model", str(folder), "--prompt", "hi")
    assert out.returncode == 2 and "no config.json" in out.stderr
    shutil.copy(tiny_paths["tiny-llama"] / "config.json", folder / "config.json")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    out = sprig("generate", "--model", str(folder), "--prompt", "hi")
    assert out.returncode == 2 and "supported: LlamaForCausalLM" in out.stderr


@pytest.mark.parametrize("command", [
    ["serve", "--model", "/no/such/folder", "--port", "0", "--num-threads", "1"],
    ["serve", "--model", "/no/such/folder", "--port", "0", "--num-threads", "1", "--dp-size", "2"],
    ["bench", "serve", "--base-url", "http://127.0.0.1:1", "--num-prompts", "1"],  # nothing listens on port 1
])
def test_serve_and_bench_user_errors_are_one_line_too(command):
    out = sprig(*command)
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("sprig: error: "), out.stderr
    assert ("model folder not found" if command[0] == "serve" else "cannot list the models") in out.stderr


def test_debug_shows_the_traceback_after_the_command_too(tiny_paths):
    out = sprig("generate", "--prompt", "hi", "--model", "/no/such/folder", "--debug")
    assert out.returncode == 2 and "Traceback" in out.stderr
    assert out.stderr.rstrip().splitlines()[-1] == "sprig: error: model folder not found: /no/such/folder"


def test_global_flags_are_accepted_before_and_after_the_command():
    from sprig.runtime.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "--log-level", "info"]).log_level == "info"
    assert parser.parse_args(["--log-level", "error", "serve"]).log_level == "error"
    nested = ["--log-level", "error", "bench", "serve", "--base-url", "http://x", "--log-level", "debug"]
    assert parser.parse_args(nested).log_level == "debug"
    args = parser.parse_args(["generate", "--prompt", "x"])
    assert (args.log_level, args.debug) == ("warning", False)


def _all_parsers(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out += _all_parsers(child, f"{path} {name}")
    return out


def test_every_flag_has_help_and_help_shows_defaults():
    from sprig.runtime.cli import build_parser

    parsers = _all_parsers(build_parser(), "sprig")
    assert {path for path, _ in parsers} >= {"sprig generate", "sprig serve", "sprig router", "sprig bench serve"}
    missing = [(path, a.option_strings) for path, p in parsers for a in p._actions
               if a.option_strings and not (a.help or "").strip()]
    assert not missing, missing
    serve = dict(parsers)["sprig serve"].format_help()
    assert "(default: 30000)" in " ".join(serve.split())  # --port
    assert "(default: 16)" in " ".join(serve.split())  # --page-size
    # A flag that takes a value says what happens without it, argparse's way or in its own words; only those
    # whose absence means nothing at all (no key file, no output file) or that are required stay quiet.
    quiet = {"--api-keys", "--api-key", "--extra-body", "--output", "--stop"}
    silent = sorted({a.option_strings[-1] for path, p in parsers for a in p._actions
                     if a.option_strings and a.nargs != 0 and not a.required and a.option_strings[-1] not in quiet
                     and "default" not in p._get_formatter()._get_help_string(a)})
    assert not silent, silent


def test_serve_help_runs_from_the_command_line():
    out = sprig("serve", "--help", "--log-level", "info")
    assert out.returncode == 0 and "--incremental-streaming-output" in out.stdout and "(default:" in out.stdout


def test_serve_help_groups_its_flags_by_concern_and_ends_with_examples():
    from sprig.runtime.cli import build_parser

    serve = dict(_all_parsers(build_parser(), "sprig"))["sprig serve"]
    groups = [g.title for g in serve._action_groups if g._group_actions]
    assert groups == ["options", "model", "memory and KV cache", "scheduling", "structured output",
                      "speculative decoding", "LoRA adapters", "parallelism and threads", "server", "router (data parallelism)"]
    ungrouped = [a.option_strings[0] for g in serve._action_groups if g.title == "options" for a in g._group_actions]
    assert sorted(ungrouped) == ["--debug", "--log-level", "-h"]  # only the global flags stay outside a group
    text = serve.format_help()
    assert text.rstrip().splitlines()[-1].lstrip().startswith("sprig serve --")
    assert "\n  sprig serve --model demo " in text  # the examples keep their lines


def test_main_run_in_process_leaves_the_failure_policy_as_it_found_it(tmp_path):
    from sprig.runtime.cli import main
    from sprig.runtime.distributed import tp_group

    # A multi-process command sets "stop this process on a rank's failure"; run in process (as tests do), it must
    # not stay set, or a later engine's failing rank would SIGTERM the caller (it once ended a whole pytest run).
    assert main(["serve", "--model", str(tmp_path / "m.gguf"), "--tp-size", "2", "--port", "0"]) == 2
    assert tp_group._policy is tp_group.FailurePolicy.RAISE


def test_an_unknown_tool_call_parser_is_one_line_listing_the_known_ones(tiny_paths):
    out = sprig("serve", "--model", str(tiny_paths["tiny-llama"]), "--port", "0", "--tool-call-parser", "nope")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "unknown --tool-call-parser 'nope'; known: " in out.stderr and "qwen25" in out.stderr

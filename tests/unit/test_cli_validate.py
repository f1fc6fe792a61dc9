"""The ``grpo-rollout`` command line: help and version, and ``validate-config`` reporting every problem at once."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest
from typer.testing import CliRunner

from grpo_rollout import __version__
from grpo_rollout.cli.main import app

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    # a bad config must end in a clean exit, never an exception escaping the command
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, ANSI.sub("", result.output)


@pytest.mark.parametrize("args, needles", [
    (["--help"], ["validate-config", "train", "serve", "--version"]),
    (["--version"], [f"grpo-rollout {__version__}"]),
    (["train", "--help"], ["Usage: grpo-rollout train", "--resume"]),
    (["serve", "--help"], ["Usage: grpo-rollout serve", "--max-model-len"]),
    (["validate-config", "--help"], ["Usage: grpo-rollout validate-config", "--skip-data", "--quiet"]),
])
def test_help_and_version_exit_zero(args, needles):
    code, out = invoke(*args)
    assert code == 0
    for needle in needles:
        assert needle in out


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``python -m grpo_rollout.cli.main ARGS`` in a separate process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "grpo_rollout.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_help_and_version_in_a_real_process():
    assert cli("--help").returncode == 0
    assert cli("validate-config", "--help").returncode == 0
    proc = cli("--version")
    assert proc.returncode == 0 and f"grpo-rollout {__version__}" in proc.stdout


FIVE_MISTAKES = {
    "sampling.temprature": ("sampling", "temprature", 0.7),        # unknown key
    "training.learning_rate": ("training", "learning_rate", "fast"),  # wrong type
    "training.loss_type": ("training", "loss_type", "ppo"),        # not an allowed value
    "sampling.num_generations": ("sampling", "num_generations", 1),  # out of range
    "vllm.url": ("vllm", "mode", "attach"),                         # attach without a url
}


def test_five_mistakes_are_all_reported_without_a_traceback(project):
    cfg = project.baseline()
    for section, key, value in FIVE_MISTAKES.values():
        cfg[section][key] = value
    cfg["training"]["micro_batch_size"] = 2  # keep 2 prompts × 1 generation divisible: exactly five mistakes
    path = project.write_config(cfg)
    proc = cli("validate-config", str(path), cwd=project.root)
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode != 0
    assert "Traceback" not in out
    for key in FIVE_MISTAKES:
        assert key in out
    assert "5 error(s), 0 warning(s)" in out
    assert "did you mean `sampling.temperature`?" in out
    assert "is valid" not in out
    # the verdict is the last line, below the resolved config
    assert out.strip().splitlines()[-1].endswith(f"{path.name} has 5 error(s): see the table of problems above")


def test_valid_config_prints_summary_and_exits_zero(project):
    path = project.write_config(project.baseline())
    code, out = invoke("validate-config", str(path))
    assert code == 0
    assert f"{path} is valid" in out
    assert "Config problems" not in out
    assert "num_generations: 4" in out  # the resolved config
    assert re.search(r"sequences per step \(prompts × num_generations\)\s*│?\s*8\b", out)  # 2 prompts × 4
    assert re.search(r"total sequences\s*│?\s*80\b", out)  # × 10 steps


def test_quiet_omits_the_summary(project):
    code, out = invoke("validate-config", "--quiet", str(project.write_config(project.baseline())))
    assert code == 0 and "is valid" in out
    assert "Batch arithmetic" not in out and "num_generations: 4" not in out


@pytest.mark.parametrize("override, key, needle", [
    ("sampling.temperature=0", "sampling.temperature", "must be > 0"),
    ("foo", "foo", "override is not of the form key=value"),
    ("sampling.temperature=[0.5", "sampling.temperature", "override could not be applied"),
    ("training.micro_batch_size=3", "training.micro_batch_size", "is not divisible"),
])
def test_bad_override_is_reported(project, override, key, needle):
    code, out = invoke("validate-config", str(project.write_config(project.baseline())), override)
    assert code == 1
    assert key in out and needle in out


def test_overrides_fix_a_config(project):
    cfg = project.baseline()
    cfg["sampling"]["temperature"] = 0.0
    path = project.write_config(cfg)
    assert invoke("validate-config", str(path))[0] == 1
    code, out = invoke("validate-config", str(path), "sampling.temperature=0.7", "rewards.0.weight=2")
    assert code == 0, out
    assert "temperature: 0.7" in out and "weight: 2.0" in out


def test_missing_file_and_bad_yaml(project):
    code, out = invoke("validate-config", str(project.root / "nope.yaml"))
    assert code == 1 and "config file not found" in out
    code, out = invoke("validate-config", str(project.write("bad.yaml", "sampling: [1,\n")))
    assert code == 1 and "not valid YAML" in out


def test_skip_data_does_not_load_the_dataset(project):
    cfg = project.baseline()
    cfg["data"]["train"] = "not_there.jsonl"
    path = project.write_config(cfg)
    code, out = invoke("validate-config", str(path))
    assert code == 1 and "data.train" in out
    code, out = invoke("validate-config", "--skip-data", str(path))
    assert code == 0, out
    assert "is valid" in out


def test_warnings_alone_do_not_fail(project):
    module = project.module("def rollout(prompts, **kw):\n    return {}\n\n"
                            "def needs_foo(completions, foo, **kw):\n    return [foo] * len(completions)\n")
    cfg = project.baseline()
    cfg["rollout"] = {"function": f"{module}:rollout"}
    cfg["rewards"] = [{"function": f"{module}:needs_foo"}]
    code, out = invoke("validate-config", str(project.write_config(cfg)))
    assert code == 0
    assert "0 error(s), 1 warning(s)" in out and "rewards[0].function" in out and "is valid" in out


def test_errors_are_followed_by_the_resolved_config(project):
    cfg = project.baseline()
    cfg["sampling"]["temperature"] = 0.0
    code, out = invoke("validate-config", str(project.write_config(cfg)))
    assert code == 1
    assert "sampling.temperature" in out and "must be > 0" in out
    assert "Resolved config" in out and "num_generations: 4" in out and "temperature: 0.0" in out
    assert out.index("must be > 0") < out.index("num_generations: 4")  # problems first, then the config
    assert "is valid" not in out


def test_quiet_with_errors_prints_only_the_problems(project):
    cfg = project.baseline()
    cfg["sampling"]["temperature"] = 0.0
    code, out = invoke("validate-config", "--quiet", str(project.write_config(cfg)))
    assert code == 1 and "must be > 0" in out
    assert "Resolved config" not in out and "num_generations: 4" not in out


def test_num_generations_1_shows_one_error(project):
    cfg = project.baseline()
    cfg["sampling"]["num_generations"] = 1
    code, out = invoke("validate-config", str(project.write_config(cfg)))
    assert code == 1
    assert "1 error(s), 0 warning(s)" in out and "is not divisible" not in out


def test_schema_is_in_the_help():
    code, out = invoke("--help")
    assert code == 0 and "schema" in out
    code, out = invoke("schema", "--help")
    assert code == 0 and "--output" in out and "JSON Schema" in out


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_output_dir_under_proc_is_named(monkeypatch):
    """The user's input: /proc passes ``os.access`` for root, then train stopped on a bare FileNotFoundError."""
    monkeypatch.chdir(REPO)
    code, out = invoke("validate-config", "--quiet", "configs/quickstart.yaml", "training.output_dir=/proc/x")
    assert code == 1 and "Traceback" not in out
    assert "training.output_dir" in out and "/proc/x" in out and "creating a folder in /proc" in out
    assert "choose a folder you can write to" in out


def test_output_dir_on_a_read_only_file_system_is_named(monkeypatch, tmp_path):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("grpo_rollout.preflight.paths.tempfile.TemporaryDirectory", read_only)
    monkeypatch.chdir(REPO)
    code, out = invoke("validate-config", "--quiet", "configs/quickstart.yaml", f"training.output_dir={tmp_path}/run")
    assert code == 1 and "training.output_dir" in out and "Read-only file system" in out


def closed_early(*args: str) -> Tuple[int, str]:
    """``python -m grpo_rollout.cli.main ARGS`` whose stdout's reader closes the pipe before reading a line: the exit
    status and stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "grpo_rollout.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=300), err


@pytest.mark.parametrize("args", [("tasks",), ("--help",), ("validate-config", "configs/quickstart.yaml")])
def test_output_cut_short_ends_quietly(args):
    """The user's `grpo-rollout tasks | head -3` exited 1 (rich's broken-pipe exit; click's for --help): a cut output
    ends as a shell tool's does, 141 (SIGPIPE), with nothing on stderr."""
    if args == ("tasks",):
        pytest.importorskip("reasoning_gym")
    assert closed_early(*args) == (141, "")


def test_the_users_pipe_into_head():
    pytest.importorskip("reasoning_gym")
    line = f"set -o pipefail; '{sys.executable}' -m grpo_rollout.cli.main tasks | head -3"
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode in (0, 141) and proc.stderr == "" and len(proc.stdout.splitlines()) == 3

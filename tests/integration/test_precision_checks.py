"""Precision faults of issue 28.10: a server made to serve another dtype than the trainer computes in through
``grpo-rollout serve --vllm-arg`` (b), ``model.dtype: float16`` without loss scaling (c), and a run that never said
in which dtypes it computes and stores (c). The check of an attached server's dtype is in
``test_sampling_filters_server.py`` (it needs a real server)."""

from __future__ import annotations

import io
import os

import pytest
import yaml
from rich.console import Console

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config


def test_float16_is_refused_naming_the_fix(project, errs):
    cfg = project.baseline()
    cfg["model"]["dtype"] = "float16"
    [problem] = errs(project.check(cfg, load_data=False), "model.dtype")
    assert "without loss scaling" in problem.message
    assert problem.fix.startswith("set model.dtype: bfloat16")
    cfg["model"]["dtype"] = "bfloat16"
    assert not errs(project.check(cfg, load_data=False), "model.dtype")


def _serve(tmp_path, monkeypatch, config_text, extra, dtype=None) -> tuple:
    from grpo_rollout.cli.serve_cmd import run_serve

    if config_text is not None:
        (tmp_path / "c.yaml").write_text(config_text)
        (tmp_path / "config.json").write_text("{}")  # tmp_path is the model folder validate-config sees
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *a: started.append(a[1]))
    out = io.StringIO()
    code = run_serve(Console(file=out, width=300), tmp_path / "c.yaml" if config_text is not None else None,
                     model=str(tmp_path), host=None, port=None, max_model_len=None, api_key=None, extra=extra,
                     dtype=dtype)
    return code, out.getvalue(), started


def test_serve_without_a_config_takes_the_dtype_as_its_own_option(tmp_path, monkeypatch):
    """A new user's finding: `serve --model M --vllm-arg=--dtype=bfloat16` (no config) was told to "set model.dtype"
    with no config to set it in."""
    code, said, started = _serve(tmp_path, monkeypatch, None, ["--dtype=bfloat16"])
    assert code == 1 and not started
    assert "pass `--dtype bfloat16` to grpo-rollout serve instead" in said
    code, said, started = _serve(tmp_path, monkeypatch, None, [], dtype="bfloat16")
    assert code == 0 and started
    argv = started[0]
    assert argv[argv.index("--dtype") + 1] == "bfloat16"


def test_serve_refuses_a_vllm_arg_that_overrides_the_configs_dtype(tmp_path, monkeypatch):
    """``grpo-rollout serve CFG --vllm-arg=--dtype=bfloat16`` over a float32 config served bfloat16 with no word (only
    ``vllm.extra_args`` was checked); a trainer from that config then sampled from other numbers than it computes."""
    config = f"model: {{name_or_path: {tmp_path}}}\nvllm: {{mode: attach, url: 'http://127.0.0.1:1'}}\n"
    code, said, started = _serve(tmp_path, monkeypatch, config, ["--seed=0", "--dtype=bfloat16"])
    assert code == 1 and not started
    assert "--vllm-arg[1]" in said and "model.dtype = float32" in said and "model.dtype: bfloat16 in its config" in said
    code, said, started = _serve(tmp_path, monkeypatch, config, ["--seed=0"])  # any other flag passes through
    assert started and started[0][-1] == "--seed=0"


@pytest.mark.model
@pytest.mark.parametrize("lora", [False, True])
def test_the_run_says_its_compute_and_master_dtypes(tmp_path, tiny_model, lora):
    said = []

    class Recording(RichReporter):
        def message(self, text: str) -> None:
            said.append(text)

    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 1})
    cfg.model.dtype = "bfloat16"
    if lora:
        cfg.model.lora.r = 4
    train(cfg, base_dir=tmp_path, reporter=Recording(quiet=True))
    expected = ("compute bfloat16 (torch.autocast); frozen base weights bfloat16; LoRA adapters, their gradients and "
                "AdamW state float32" if lora else
                "compute bfloat16 (torch.autocast); master weights, gradients and AdamW state float32")
    assert f"Precision: {expected}" in said
    text = (tmp_path / "out" / "config.yaml").read_text()
    assert text.splitlines()[0] == f"# precision: {expected}"
    assert yaml.safe_load(text)["model"]["dtype"] == "bfloat16"  # still the run's config

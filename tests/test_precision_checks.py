"""Precision faults of issue 28.10: a server made to serve another dtype than the trainer computes in through
``grpo-rollout serve --vllm-arg`` (b). The check of an attached server's dtype is in
``test_sampling_filters_server.py`` (it needs a real server)."""

from __future__ import annotations

import io
import os

from rich.console import Console


def _serve(tmp_path, monkeypatch, config_text: str, extra) -> tuple:
    from grpo_rollout.cli.serve_cmd import run_serve

    (tmp_path / "c.yaml").write_text(config_text)
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *a: started.append(a[1]))
    out = io.StringIO()
    code = run_serve(Console(file=out, width=300), tmp_path / "c.yaml", model=str(tmp_path), host=None, port=None,
                     max_model_len=None, api_key=None, extra=extra)
    return code, out.getvalue(), started


def test_serve_refuses_a_vllm_arg_that_overrides_the_configs_dtype(tmp_path, monkeypatch):
    """``grpo-rollout serve CFG --vllm-arg=--dtype=bfloat16`` over a float32 config served bfloat16 with no word (only
    ``vllm.extra_args`` was checked); a trainer from that config then sampled from other numbers than it computes."""
    config = f"model: {{name_or_path: {tmp_path}}}\nvllm: {{mode: attach, url: 'http://127.0.0.1:1'}}\n"
    code, said, started = _serve(tmp_path, monkeypatch, config, ["--seed=0", "--dtype=bfloat16"])
    assert code == 1 and not started
    assert "--vllm-arg[1]" in said and "model.dtype = float32" in said and "set model.dtype: bfloat16" in said
    code, said, started = _serve(tmp_path, monkeypatch, config, ["--seed=0"])  # any other flag passes through
    assert started and started[0][-1] == "--seed=0"


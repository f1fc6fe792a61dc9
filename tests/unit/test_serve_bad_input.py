"""`grpo-rollout serve` with bad input says what is wrong and starts nothing (a new user's trial: a folder that does
not exist and an out-of-range port each ended in a vLLM traceback)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app


@pytest.fixture
def no_exec(monkeypatch):
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("the server was started"))


def test_a_model_folder_that_does_not_exist_is_named(no_exec, tmp_path):
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path / "nonexistent")])
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"the model folder {tmp_path / 'nonexistent'} does not exist" in text and "(--model)" in text


@pytest.mark.parametrize("flag, value", [("--port", "99999"), ("--port", "-1"), ("--max-model-len", "0")])
def test_an_out_of_range_number_is_refused_by_the_option(no_exec, flag, value):
    result = CliRunner().invoke(app, ["serve", "--model", "builtin:smollm2-135m-instruct", flag, value])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for" in result.output and flag in result.output

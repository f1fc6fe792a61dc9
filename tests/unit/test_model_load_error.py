"""A model transformers cannot load ends `train` and `eval` in one panel naming it and the fix (found by a new user:
an unreachable hub id gave a 300-line traceback, and a folder without a tokenizer "install sentencepiece or
tiktoken", naming neither the path nor model.name_or_path)."""

from __future__ import annotations

import pytest

from grpo_rollout.models.pretrained import ModelLoadError, load_model_and_tokenizer


@pytest.mark.parametrize("files", [{}, {"config.json": '{"model_type": "llama"}'}])
def test_a_folder_that_is_not_a_whole_model_is_one_error_naming_it_and_the_fix(tmp_path, files):
    folder = tmp_path / "broken"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(ModelLoadError, match=r"cannot load the model '.*broken': \w+Error: .*Fix model.name_or_path"):
        load_model_and_tokenizer(str(folder))


def test_an_unknown_hub_id_offline_is_one_error_naming_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here: the hub is not asked, only its cache
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="cannot load the model 'nosuchorg/nosuchmodel'") as info:
        load_model_and_tokenizer("nosuchorg/nosuchmodel")
    assert isinstance(info.value, ValueError) and "builtin:smollm2-135m-instruct" in str(info.value)


def test_train_prints_it_as_one_panel_without_a_traceback(tmp_path):
    from grpo_rollout.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")  # a folder that looks like a model but does not load
    (tmp_path / "data.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n' * 4)
    (tmp_path / "c.yaml").write_text(
        f"model: {{name_or_path: {tmp_path / 'empty'}}}\ndata: {{train: data.jsonl}}\n"
        "rewards: [{function: grpo_rollout.rewards.library:accuracy}]\n"
        "sampling: {num_generations: 2, max_completion_length: 8}\n"
        f"training: {{output_dir: {tmp_path / 'out'}, max_steps: 1, prompts_per_step: 2, micro_batch_size: 4}}\n"
        "vllm: {mode: 'off'}\nlogging: {report_to: []}\n")
    result = CliRunner().invoke(app, ["train", str(tmp_path / "c.yaml")])
    assert result.exit_code == 1 and "ModelLoadError" in result.output and "Traceback" not in result.output
    assert "cannot load the model" in " ".join(result.output.split()), result.output

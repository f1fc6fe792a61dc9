"""Issue 51.10: a run whose rewards never varied said nothing until its final panel, and the panel said only "model
saved to: checkpoint-3" (1.6 GB written) without "0 of 3 steps updated the weights". Here, without a model: the dry
run's note, the console's warning after FLAT_STEPS_WARNED flat steps in a row, the panel's count and where the model
is, and a checkpoint that does not write unchanged weights again (trainer/update/no_signal.py, trainer/checkpoint.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.trainer.checkpoint import (STATE_FILE, holds_weights, list_checkpoints, reusable_weights,
                                             save_checkpoint, weights_on_disk)
from grpo_rollout.distributed import Dist
from grpo_rollout.trainer.reporting.summary import summary_text
from grpo_rollout.trainer.run import TrainResult
from grpo_rollout.trainer.update.no_signal import (FLAT_STEPS_WARNED, SignalWatch, no_signal_note,
                                                    updated_weights)


# --- the dry run's note -----------------------------------------------------------------------------------------------

def test_the_dry_run_notes_groups_that_all_scored_alike():
    every = no_signal_note([0.0, 0.0, 0.0, 0.0], 2, 8)
    assert every.startswith("No learning signal: every completion scored 0.000, so every advantage is 0 and a step "
                            "would not change the weights. With 2 completions a prompt this may be chance (training "
                            "samples 8)")
    assert "a reward that varies between them" in every and "sampling.num_generations" in every \
        and "sampling.temperature" in every and "easier prompts" in every
    alike = no_signal_note([1.0, 1.0, 0.5, 0.5], 2, 2)  # each group flat, the groups differ: still no signal
    assert alike.startswith("No learning signal: the completions of each prompt scored alike,") and "chance" not in alike


@pytest.mark.parametrize("rewards, g", [([0.0, 1.0, 0.0, 0.0], 2),   # one group varies: there is a signal
                                        ([0.0, 0.0, 0.0, 1e-9], 2),  # the smallest difference is one
                                        ([1.0, 1.0], 1),             # a group of one is never compared
                                        ([], 2)])
def test_no_note_when_a_group_varies(rewards, g):
    assert no_signal_note(rewards, g, 8) is None


# --- which steps changed the weights, and the console ----------------------------------------------------------------

def _result(no_signal=False, skipped=0, iterations=1):
    return SimpleNamespace(stats=SimpleNamespace(no_signal=no_signal), skipped=skipped, num_iterations=iterations)


def test_a_step_changes_the_weights_unless_it_had_no_signal_or_every_update_was_skipped():
    assert updated_weights({"no_signal_skipped": 0, "nonfinite_skipped": 0})
    assert not updated_weights({"no_signal_skipped": 1, "nonfinite_skipped": 0})
    assert not updated_weights({"no_signal_skipped": 0, "nonfinite_skipped": 1})
    two = {"no_signal_skipped": 0, "loss/iteration_1": 0.1, "loss/iteration_2": 0.2}
    assert updated_weights({**two, "nonfinite_skipped": 1}) and not updated_weights({**two, "nonfinite_skipped": 2})
    said = []
    watch = SignalWatch(said.append)
    for result in (_result(), _result(no_signal=True), _result(skipped=1), _result(skipped=1, iterations=2)):
        watch.after_update(0, result)
    assert watch.updated == 2 and watch.unchanged_since is None
    assert said == ["Step 1: every group's rewards were equal (all advantages 0, no KL or entropy term): no update "
                    "this step, its forward and backward passes skipped; the weights, AdamW's moments and the "
                    "learning-rate schedule are unchanged"]


def test_the_console_warns_once_after_k_flat_steps_in_a_row():
    said = []
    watch = SignalWatch(said.append)
    flat, varied = {"frac_reward_zero_std": 1.0}, {"frac_reward_zero_std": 0.75}
    steps = [flat] * (FLAT_STEPS_WARNED - 1) + [varied] + [flat] * (2 * FLAT_STEPS_WARNED + 1)
    for step, metrics in enumerate(steps):
        watch.after_step(step, metrics)
    first = FLAT_STEPS_WARNED + 1  # the run of flat steps after the varied one, 1-based
    [warning] = said  # K - 1 flat steps said nothing; the next run said it once, not again at 2K
    assert warning.startswith(f"No learning signal in steps {first}-{first + FLAT_STEPS_WARNED - 1}: every group's "
                              f"rewards were equal in {FLAT_STEPS_WARNED} steps in a row (frac_reward_zero_std 1.0)")
    assert "sampling.num_generations" in warning and warning.endswith("the completions are in completions.jsonl.")


# --- the final panel --------------------------------------------------------------------------------------------------

def _history(*updated, first=1, flat=True):
    return [{"step": first + i, "reward": 0.0, "no_signal_skipped": int(not u and flat),
             "nonfinite_skipped": int(not u and not flat)} for i, u in enumerate(updated)]


def test_the_panel_counts_the_steps_that_updated_the_weights(tmp_path):
    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    text = TrainResult(tmp_path, ckpt, 3, _history(False, False, False)).summary
    assert ("0 of 3 steps updated the weights (3 without learning signal: every group's rewards were equal)"
            in text.splitlines())
    assert f"model saved to: {ckpt}" in text.splitlines()
    text = summary_text(TrainResult(tmp_path, ckpt, 5, _history(True, False, first=4, flat=False)))
    assert "1 of 2 steps of this session updated the weights (1 whose updates were skipped for a NaN/inf loss)" \
        in text.splitlines()
    assert f"model saved to: {ckpt}" in text.splitlines()
    assert "2 of 2 steps updated the weights" in TrainResult(tmp_path, ckpt, 2, _history(True, True)).summary


# --- checkpoints of unchanged weights ---------------------------------------------------------------------------------

class Model:
    """What save_checkpoint calls of a model: save_pretrained, which writes one weight file (counted)."""

    def __init__(self):
        self.saves = 0

    def save_pretrained(self, folder, **_):
        self.saves += 1
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"w" * 1000)
        (Path(folder) / "config.json").write_text("{}")


TOKENIZER = SimpleNamespace(save_pretrained=lambda folder: (Path(folder).mkdir(parents=True, exist_ok=True),
                                                            (Path(folder) / "tokenizer.json").write_text("{}")))


def _save(out, step, model, unchanged=None, keep=None):
    return save_checkpoint(out, step, model, TOKENIZER, {"optimizer": None, "scheduler": {}, "rng_by_rank": [{}]},
                           keep=keep, unchanged=unchanged)


def test_a_runs_first_save_writes_its_weights_even_unchanged(tmp_path):
    """The base model's weights are written once into the run's folder: every checkpoint loads with from_pretrained
    (a folder naming the base model instead broke the notebook's AutoModelForCausalLM.from_pretrained)."""
    model = Model()
    assert weights_on_disk(tmp_path, None) is None and reusable_weights(None, Dist()) is None
    first = _save(tmp_path, 2, model)
    assert model.saves == 1 and holds_weights(first) and (first / "config.json").is_file()
    assert weights_on_disk(tmp_path, "latest") == first
    assert torch.load(first / STATE_FILE, weights_only=False)["step"] == 2


def test_unchanged_since_a_checkpoint_its_files_are_linked_and_survive_its_deletion(tmp_path):
    model = Model()
    first = _save(tmp_path, 1, model)
    second = _save(tmp_path, 2, model, unchanged=first, keep=1)  # keep 1: checkpoint-1 is deleted after
    assert model.saves == 1 and not first.exists()
    assert (second / "model.safetensors").read_bytes() == b"w" * 1000 and holds_weights(second)
    assert (second / STATE_FILE).is_file()
    third = _save(tmp_path, 3, model, unchanged=second)
    assert os.stat(third / "model.safetensors").st_ino == os.stat(second / "model.safetensors").st_ino  # one file
    assert os.stat(third / STATE_FILE).st_ino != os.stat(second / STATE_FILE).st_ino  # each its own state
    assert weights_on_disk(tmp_path, "latest") == third


def test_what_a_save_may_reuse(tmp_path):
    one = Dist()
    assert reusable_weights(None, one) is None
    assert reusable_weights(tmp_path / "checkpoint-1", one) is None  # gone (or never whole): written
    saved = _save(tmp_path, 1, Model())
    assert reusable_weights(saved, one) == saved


def test_saving_says_what_was_not_written_again(tmp_path):
    said = []
    watch = SignalWatch(said.append)
    assert watch.unchanged_since is None  # a fresh run: its first save writes the weights
    watch.saved(tmp_path / "checkpoint-3", None)
    assert watch.unchanged_since == tmp_path / "checkpoint-3"
    watch.saved(tmp_path / "checkpoint-4", tmp_path / "checkpoint-2")
    watch.saved(tmp_path / "checkpoint-5", None)
    assert said == ["checkpoint-4: the weights are unchanged since checkpoint-2; its files are linked, not written "
                    "again"]
    assert watch.unchanged_since == tmp_path / "checkpoint-5"

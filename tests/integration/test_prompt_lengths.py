"""validate-config measures the prompts against ``sampling.max_prompt_length`` (issue 51): a verifiers taskset's
520-token system prompt passed it against ``max_prompt_length: 64`` and was cut at run time. Measured as the run
renders them (chat template, the tool-calling rollout's tools), on a local model's tokenizer."""

from __future__ import annotations

import json

import pytest

from config_helpers import make
from grpo_rollout.preflight.dataset import check_dataset

pytestmark = [pytest.mark.model]

TOOL = '''
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor, a whole number that the model reads from the question and writes as a JSON integer.
        b: the second factor, a whole number that the model reads from the question and writes as a JSON integer.
    """
    return a * b
'''


def _problems(tiny_model, tmp_path, prompts, limit, **changes):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    (tmp_path / "tools.py").write_text(TOOL)
    config = make(model__name_or_path=str(tiny_model), data__train="train.jsonl", sampling__max_prompt_length=limit,
                  **changes)
    problems = []
    check_dataset(config, problems, tmp_path)
    return [p for p in problems if p.key == "sampling.max_prompt_length"]


def _length(tiny_model, text):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return len(tokenizer(tokenizer.apply_chat_template(text, tokenize=False, add_generation_prompt=True),
                         add_special_tokens=False)["input_ids"])


AGENT = dict(rollout__function="grpo_rollout.rollouts.agent:agent_rollout")


def test_a_long_system_prompt_is_an_error_for_the_recording_endpoint(tiny_model, tmp_path):
    system = [{"role": "system", "content": "Follow the rules. " * 130}, {"role": "user", "content": "Hi"}]
    prompts = [[{"role": "user", "content": "Hi"}], system]
    [problem] = _problems(tiny_model, tmp_path, prompts, 64, **AGENT)
    n = _length(tiny_model, system)
    assert n > 500 and problem.is_error
    assert f"1 of the first 2 prompts are longer than max_prompt_length=64" in problem.message
    assert f"row 1, has {n}" in problem.message and "refuses such a request" in problem.message
    assert problem.fix.startswith(f"set sampling.max_prompt_length: {n}")


def test_the_exact_edge(tiny_model, tmp_path):
    prompts = [[{"role": "user", "content": "What is 2 + 3? " * 5}]]
    n = _length(tiny_model, prompts[0])
    assert _problems(tiny_model, tmp_path, prompts, n, **AGENT) == []
    assert len(_problems(tiny_model, tmp_path, prompts, n - 1, **AGENT)) == 1


def test_tools_count_for_the_tool_calling_rollout(tiny_model, tmp_path):
    """Short prompts that the tool descriptions (the system prompt this template gets) push over the limit."""
    prompts = [[{"role": "user", "content": "What is 6 times 7?"}]]
    n = _length(tiny_model, prompts[0])
    tools = dict(rollout__function="grpo_rollout.rollouts.tool_calling:tool_calling_rollout",
                 rollout__kwargs={"tools": ["tools.py:multiply"]})
    [problem] = _problems(tiny_model, tmp_path, prompts, n + 5, **tools)
    assert problem.is_error and "(chat template, tools included)" in problem.message
    assert _problems(tiny_model, tmp_path, prompts, n + 5, **AGENT) == []  # the same prompt without the tools fits


def test_a_single_turn_prompt_over_the_limit_is_a_warning(tiny_model, tmp_path):
    [problem] = _problems(tiny_model, tmp_path, ["word " * 100], 32)
    assert not problem.is_error and "it is cut from the left" in problem.message


def test_nothing_is_measured_without_a_local_tokenizer(tiny_model, tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "word " * 100}) + "\n")
    config = make(model__name_or_path="someone/some-model", data__train="train.jsonl", sampling__max_prompt_length=8,
                  **AGENT)
    problems = []
    check_dataset(config, problems, tmp_path)
    assert [p for p in problems if p.key == "sampling.max_prompt_length"] == []

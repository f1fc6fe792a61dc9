"""Agents as they are (issue 41), played against a scripted model: the documented examples run the tools the model
calls (the ``openai`` client's and the OpenAI Agents SDK's, with chat completions and with its default Responses
model), and the ``completions`` route keeps a text sequence while each prompt extends it."""

from __future__ import annotations

import pytest

from agent_helpers import load_policy, play, scripted

pytestmark = [pytest.mark.model]


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model)


def test_the_example_runs_the_tools_the_model_calls(policy, tmp_path):
    """A scripted model calls add(2, 3), reads 5, answers 5 and checks: the tool exchange is one sequence (the tool's
    answer inserted, mask 0), the check a second one; the score is the example's own."""
    _, tokenizer = policy
    out = play((scripted(tokenizer), tokenizer), tmp_path, "run",
                rows=[{"prompt": "What is 2 + 3?", "answer": 5}], n=1, prompts=["What is 2 + 3?"])
    [result], [[first]] = out["agent_result"], out["segments"]
    assert result == {"score": 1.0, "answer": "5", "check": "Yes", "calls": 3}
    text = tokenizer.decode(first["completion_ids"])
    assert text.index("<tool_call>") < text.index("5", text.index("</tool_call>")) and text.rstrip().endswith("5<|im_end|>")
    inserted = [t for t, m in zip(first["completion_ids"], first["completion_mask"]) if m == 0]
    assert "5" in tokenizer.decode(inserted) and first["completion_mask"][0] == 1
    assert tokenizer.decode(out["completion_ids"][0]) == "Yes<|im_end|>" and out["completion_mask"][0] == [1, 1]


def test_the_agents_sdk_example_runs_the_tools_the_model_calls(policy, tmp_path):
    _, tokenizer = policy
    out = play((scripted(tokenizer), tokenizer), tmp_path, "sdk_run", rows=[{"prompt": "What is 2 + 3?", "answer": 5}],
                n=1, prompts=["What is 2 + 3?"])
    assert out["agent_result"] == [{"score": 1.0, "answer": "5"}] and out["num_turns"] == [2]
    assert out["segments"] == [[]]  # the SDK sends the whole conversation each call: one sequence
    [ids], [mask] = out["completion_ids"], out["completion_mask"]
    inserted = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    assert "5" in inserted and tokenizer.decode([t for t, m in zip(ids, mask) if m]).endswith("5<|im_end|>")
    # the tools reached the model: this template does not render them, so a system prompt describes them
    assert "- add(a: integer, b: integer): Add two integers." in tokenizer.decode(out["prompt_ids"][0])


@pytest.mark.parametrize("stream", [False, True])
def test_the_agents_sdks_default_responses_model_plays_through_the_responses_route(policy, tmp_path, stream):
    """The SDK's default model speaks the Responses API: the tool call goes out as a function_call item and comes back
    with its function_call_output, which map back to the chat messages the endpoint answered (one sequence)."""
    _, tokenizer = policy
    out = play((scripted(tokenizer), tokenizer), tmp_path, "sdk_responses", n=1, prompts=["What is 2 + 3?"],
               rows=[{"prompt": "What is 2 + 3?", "stream": stream}])
    assert out["agent_result"] == [{"answer": "5"}] and out["num_turns"] == [2] and out["segments"] == [[]]
    [ids], [mask] = out["completion_ids"], out["completion_mask"]
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]).endswith("5<|im_end|>")
    assert "Use add for sums." in tokenizer.decode(out["prompt_ids"][0])  # instructions: the system message


class StopsAt:
    """Answers "Action: add 2 3\nObservation: 7" cut after the request's first stop string (no end token then, as a
    server stops), and "Final: 5" once an observation is in the prompt; log-prob -0.5 per token."""

    max_prompt_length = None

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids = tokenizer, {tokenizer.eos_token_id}

    async def agenerate(self, prompt_ids, n=1, stop=None, **kwargs):
        from grpo_rollout.generation.base import GenerationResult

        text = "Final: 5" if "Observation: 5" in self.tokenizer.decode(prompt_ids[0]) else "Action: add 2 3\nObservation: 7"
        cut = next((text[:text.index(s) + len(s)] for s in stop or () if s in text), None)
        ids = self.tokenizer.encode(cut or text, add_special_tokens=False) + ([] if cut else [self.tokenizer.eos_token_id])
        return GenerationResult([list(p) for p in prompt_ids], [ids] * n, [[-0.5] * len(ids)] * n, ["stop"] * n)


def test_a_stop_string_ends_the_answer_and_the_episode_goes_on(policy, tmp_path):
    """A ReAct agent's stop=["Observation:"]: the model stops there (the stop string is in the trained tokens, as
    sampled), the answer the agent gets leaves it out (as OpenAI's do), and its next turn continues the sequence."""
    _, tokenizer = policy
    out = play((StopsAt(tokenizer), tokenizer), tmp_path, "react", rows=[{"prompt": "What is 2 + 3?"}], n=1,
               prompts=["What is 2 + 3?"])
    assert out["agent_result"] == [{"seen": ["Action: add 2 3\n", "Final: 5"]}]
    assert out["num_turns"] == [2] and out["segments"] == [[]]
    [ids], [mask] = out["completion_ids"], out["completion_mask"]
    sampled = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert sampled.startswith("Action: add 2 3\nObservation:") and "Observation: 7" not in sampled
    assert "Observation: 5" in tokenizer.decode([t for t, m in zip(ids, mask) if not m])  # the agent's, inserted


def test_text_completions_continue_a_sequence_while_their_prompt_extends_it(policy, tmp_path):
    _, tokenizer = policy
    from scripted_client import ScriptedClient

    client = ScriptedClient(tokenizer, lambda prompt: (" done" if prompt.endswith("Summary:") else " four", False))
    out = play((client, tokenizer), tmp_path, "text_agent", rows=[{"prompt": "2 + 2?"}], n=1, prompts=["2 + 2?"])
    assert out["agent_result"][0]["texts"] == [" four", " four", " done"] and out["num_turns"] == [3]
    [[first]] = out["segments"]  # the first two calls: one sequence, the question between them inserted
    assert tokenizer.decode(first["prompt_ids"]) == "Question: 2 + 2?\nAnswer:"
    assert tokenizer.decode(first["completion_ids"]) == " four\nQuestion: And again?\nAnswer: four"
    four = len(tokenizer.encode(" four"))
    assert first["completion_mask"] == [1] * four + [0] * (len(first["completion_ids"]) - 2 * four) + [1] * four
    assert tokenizer.decode(out["prompt_ids"][0]) == "Summary:" and tokenizer.decode(out["completion_ids"][0]) == " done"

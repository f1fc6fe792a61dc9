"""The environment rollout on the tiny random model (real sampling with ``TransformersClient``): observation tokens
are masked, sampled tokens and log-probs are exactly the sampler's, rewards add up, errors are reported."""

from __future__ import annotations

import asyncio
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_rollout.rollouts.rollout_call import call_rollout

from grpo_rollout.generation.sampling_settings import SamplingSettings
from grpo_rollout.rollouts.contract import RolloutContext
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.environment import environment_rollout, load_env
from grpo_rollout.rollouts.multi_turn import render
from tool_calling_helpers import ORDER, RecordingClient, check_sample, first_wait, spans

END = "<|im_end|>"


class CountingEnv:
    """Asks for ``row['word']``, answers every turn with a short observation and 0.25 reward; done after 3 turns."""

    instances = []

    def __init__(self, turns: int = 3):
        self.turns, self.seen = turns, []
        CountingEnv.instances.append(self)

    def reset(self, row):
        self.row = row
        return f"Say {row['word']}."

    def step(self, text):
        self.seen.append(text)
        done = len(self.seen) >= self.turns
        return (None if done else f"Turn {len(self.seen)} over. Again."), 0.25, done


class ChatEnv:
    """Async methods; chat-message prompt and observations; rewards None until the end."""

    def __init__(self):
        self.count = 0

    async def reset(self, row):
        return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": row["word"]}]

    async def step(self, text):
        await asyncio.sleep(0)
        self.count += 1
        if self.count == 2:
            return None, 1.0, True
        return [{"role": "user", "content": "More."}], None, False


SLOW_STEPS: list = []  # ORDER numbers at which SlowEnv's slow steps began


class SlowEnv(CountingEnv):
    def step(self, text):
        if self.row["word"] == "slow":
            SLOW_STEPS.append(next(ORDER))
            time.sleep(3.0)
        return super().step(text)


class BrokenEnv(CountingEnv):
    def step(self, text):
        return "only an observation"


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)


def _run(tiny, env, rows, **kwargs):
    model, tokenizer = tiny
    client = RecordingClient(model, tokenizer)
    kwargs = {"n": 2, "seed": 0, "max_completion_length": 100, "max_turns": 5, "max_turn_tokens": 6, **kwargs}
    out = environment_rollout([r["word"] for r in rows], client=client, tokenizer=tokenizer, rows=rows, env=env,
                              **kwargs)
    return out, client


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_observations_masked_and_sampled_tokens_exact(tiny):
    _, tokenizer = tiny
    CountingEnv.instances = []
    rows = [{"word": "apple"}, {"word": "pear"}]
    out, client = _run(tiny, CountingEnv, rows)
    assert len(out["completion_ids"]) == 4 and len(out["prompt_ids"]) == 4
    for i, env in enumerate(CountingEnv.instances):
        assert env.row == rows[i // 2]  # each of the n envs of a prompt plays that prompt's row
        ids, mask, lps = out["completion_ids"][i], out["completion_mask"][i], out["logprobs"][i]
        runs = check_sample(out["prompt_ids"][i], ids, lps, mask, client, tokenizer)
        assert [v for v, _ in runs] == [1, 0, 1, 0, 1]
        # the environment saw exactly what was sampled (special tokens skipped)
        sampled = [ids[s:e] for (s, e, v) in spans(ids, mask) if v == 1]
        assert env.seen == [tokenizer.decode(x, skip_special_tokens=True) for x in sampled]
        for k, (_, text) in enumerate(runs[1::2], start=1):
            closing = "\n" if runs[2 * k - 2][1].endswith(END) else END + "\n"  # turn ended by <|im_end|> or cut
            assert text == f"{closing}<|im_start|>user\nTurn {k} over. Again.{END}\n<|im_start|>assistant\n"
        assert out["num_turns"][i] == 3 and out["env_reward"][i] == 0.75 and out["env_done"][i]
        assert tokenizer.decode(out["prompt_ids"][i]) == render(tokenizer, [{"role": "user",
                                                                             "content": f"Say {rows[i // 2]['word']}."}],
                                                                True)
    # each turn asked for at most max_turn_tokens, and never more than the remaining budget
    assert {r["max_tokens"] for r in client.records} == {6}
    # turns cut by max_turn_tokens in episodes the environment ended are not truncated completions
    assert any(r["finish"] == "length" for r in client.records) and out["truncated"] == [False] * 4


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_async_env_chat_messages_and_done(tiny):
    out, client = _run(tiny, ChatEnv, [{"word": "hi"}])
    for i in range(2):
        runs = check_sample(out["prompt_ids"][i], out["completion_ids"][i], out["logprobs"][i],
                            out["completion_mask"][i], client, tiny[1])
        assert [v for v, _ in runs] == [1, 0, 1]
        assert f"<|im_start|>user\nMore.{END}\n<|im_start|>assistant\n" in runs[1][1]
        assert out["env_reward"][i] == 1.0 and out["num_turns"][i] == 2


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_budget_and_max_turns(tiny):
    out, _ = _run(tiny, CountingEnv, [{"word": "x"}], max_completion_length=20, max_turn_tokens=None)
    assert all(len(ids) <= 20 for ids in out["completion_ids"])
    assert out["num_turns"] == [1, 1] and out["truncated"] == [True, True]  # the first turn used the whole budget
    out, _ = _run(tiny, CountingEnv, [{"word": "x"}], max_turns=2)
    assert out["num_turns"] == [2, 2] and out["env_done"] == [False, False] and out["env_reward"] == [0.5, 0.5]


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_slow_env_does_not_stall_others(tiny):
    out, client = _run(tiny, SlowEnv, [{"word": "slow"}, {"word": "fast"}], n=1)
    start, end = first_wait(client.records, tiny[1], "slow")
    assert any(start <= o <= end for o in SLOW_STEPS)  # the window is the slow step
    fast = [r for r in client.records if "fast" in tiny[1].decode(list(r["prompt"]))]
    assert any(start <= r["start"] <= end for r in fast), "generation paused while an environment stepped"


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_through_call_rollout_with_rows(tiny):
    model, tokenizer = tiny
    client = RecordingClient(model, tokenizer)
    sampling = {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                "max_completion_length": 80, "seed": 3}
    out = call_rollout(environment_rollout, ["ignored"], SamplingSettings.from_rollout_kwargs(sampling),
                       {"env": f"{__file__}:CountingEnv", "max_turns": 3, "max_turn_tokens": 5},
                       RolloutContext(client=client, tokenizer=tokenizer, rows=[{"word": "plum"}], step=0),
                       vocab_size=len(tokenizer))
    assert out.extras["env_reward"] == [0.75, 0.75] and out.extras["num_turns"] == [3, 3]
    assert out.completion_mask[0].count(0) > 0


@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_environment_errors(tiny):
    with pytest.raises(RolloutError, match=r"must return \(observation, reward or None, done\)"):
        _run(tiny, BrokenEnv, [{"word": "x"}])
    with pytest.raises(RolloutError, match="reset"):
        load_env(dict)
    with pytest.raises(RolloutError, match="no_such_module"):
        load_env("no_such_module:Env")
    with pytest.raises(RolloutError, match="one dataset row per prompt"):
        environment_rollout(["a", "b"], client=None, tokenizer=None, rows=[{}], env=CountingEnv, n=2)
    assert environment_rollout.validate_kwargs({"env": f"{__file__}:CountingEnv"}) == []
    assert environment_rollout.validate_kwargs({})[0][0] == "rollout.kwargs.env"


class RaisingEnv(CountingEnv):
    def step(self, text):
        raise KeyError("missing_state")


class BadRewardEnv(CountingEnv):
    def step(self, text):
        return "again", float("inf"), False


class BadResetEnv(CountingEnv):
    def reset(self, row):
        return 12345


class BadObservationEnv(CountingEnv):
    def step(self, text):
        return 42, None, False


class ExitingEnv(CountingEnv):
    async def step(self, text):
        import sys

        sys.exit(2)


class NoContentResetEnv(CountingEnv):
    def reset(self, row):
        return [{"role": "user"}]


class NumberContentEnv(CountingEnv):
    def step(self, text):
        return {"role": "user", "content": 5}, 0.0, False


class StringDoneEnv(CountingEnv):
    def step(self, text):
        return "again", None, "false"


class HugeRewardEnv(CountingEnv):
    def step(self, text):
        return "again", 1e308, False


def make_env(**kwargs):
    return CountingEnv(**kwargs)


@pytest.mark.parametrize("env, message", [
    (RaisingEnv, r"RaisingEnv.step raised KeyError: 'missing_state'"),
    (BadRewardEnv, r"BadRewardEnv.step returned reward inf; expected a finite number or None"),
    (BadResetEnv, r"BadResetEnv.reset must return the first prompt: a string or a list of chat messages, got '12345'"),
    (BadObservationEnv, r"BadObservationEnv.step: an environment observation must be a string"),
    (ExitingEnv, r"ExitingEnv.step raised SystemExit: 2"),
    (NoContentResetEnv, r"NoContentResetEnv.reset must return the first prompt"),
    (NumberContentEnv, r"NumberContentEnv.step: an environment observation must be a string, a chat message"),
    (StringDoneEnv, r"StringDoneEnv.step returned done='false'; expected True or False"),
    (HugeRewardEnv, r"HugeRewardEnv.step: the episode's rewards add up to inf; scale them down"),
    (make_env, r"env make_env is a function, not a class"),
])
@pytest.mark.model  # builds a model from the embedded GGUF's tokenizer
def test_broken_environments_are_named_in_the_error(tiny, env, message):
    with pytest.raises(RolloutError, match=message):
        _run(tiny, env, [{"word": "x"}])


@pytest.mark.parametrize("kwargs, key, message", [
    ({"max_turn": 3}, "rollout.kwargs.max_turn", "has no setting `max_turn`"),
    ({"env_kwarg": {}}, "rollout.kwargs.env_kwarg", "has no setting `env_kwarg`"),
    ({"env_kwargs": {"turnz": 2}}, "rollout.kwargs.env_kwargs", "CountingEnv() does not accept"),
    ({"env_kwargs": [1, 2]}, "rollout.kwargs.env_kwargs", "must be a mapping"),
    ({"max_turns": 2.5}, "rollout.kwargs.max_turns", "must be an integer >= 1"),
    ({"max_turns": "three"}, "rollout.kwargs.max_turns", "must be an integer >= 1"),
    ({"max_turn_tokens": -4}, "rollout.kwargs.max_turn_tokens", "must be an integer >= 1 or null"),
    ({"stop": 5}, "rollout.kwargs.stop", "must be a list of non-empty strings"),
    ({"stop": [""]}, "rollout.kwargs.stop", "must be a list of non-empty strings"),
])
def test_validate_kwargs_reports_each_bad_setting(kwargs, key, message):
    problems = environment_rollout.validate_kwargs({"env": f"{__file__}:CountingEnv", **kwargs})
    assert [p[0] for p in problems] == [key] and message in problems[0][1], problems
    if "no setting" in message:
        assert problems[0][2] == f"did you mean `{key.rsplit('.', 1)[1]}s`?"


class NeedsSize:
    def __init__(self, *, size):
        self.size = size

    def reset(self, row):
        return "hi"

    def step(self, text):
        return None, 1.0, True


def test_validate_kwargs_checks_the_constructor_and_that_env_is_a_class():
    [(key, message, fix)] = environment_rollout.validate_kwargs({"env": f"{__file__}:NeedsSize"})
    assert key == "rollout.kwargs.env_kwargs" and "missing a required argument: 'size'" in message
    assert fix == "its parameters: size"
    assert environment_rollout.validate_kwargs({"env": f"{__file__}:NeedsSize", "env_kwargs": {"size": 3}}) == []
    [(key, message, _)] = environment_rollout.validate_kwargs({"env": f"{__file__}:make_env"})
    assert key == "rollout.kwargs.env" and "is a function, not a class" in message


def test_validate_kwargs_accepts_sampling_aliases_and_good_settings():
    assert environment_rollout.validate_kwargs({"env": f"{__file__}:CountingEnv", "env_kwargs": {"turns": 2},
                                                "max_tokens": 64, "temperature": 1.0, "max_turns": 3,
                                                "max_turn_tokens": None, "stop": ["."]}) == []

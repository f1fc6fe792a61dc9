"""call_rollout (grpo_rollout.rollouts.rollout_call): what a rollout is passed, and its errors named at the user's line."""

from __future__ import annotations

import pytest

from grpo_rollout.generation.sampling_settings import SamplingSettings
from grpo_rollout.rollouts.contract import RolloutContext
from grpo_rollout.rollouts.rollout_call import call_rollout

from grpo_rollout.rollouts.contract import RolloutError
from contract_helpers import N, VOCAB


# --- call_rollout ---------------------------------------------------------------------------------------------------

SAMPLING = {"n": N, "temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "max_completion_length": 8, "seed": 0}
SETTINGS = SamplingSettings.from_rollout_kwargs(SAMPLING)  # what the trainer hands call_rollout
CONTEXT = RolloutContext(client="CLIENT", tokenizer="TOKENIZER", rows=[{"q": 1}, {"q": 2}], step=7)


def _result_for(prompts, n):
    return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * (len(prompts) * n), "logprobs": None}


def test_call_rollout_passes_only_named_context():
    seen = {}

    def rollout(prompts, n, temperature, client, step):
        seen.update(prompts=prompts, n=n, temperature=temperature, client=client, step=step)
        return _result_for(prompts, n)

    out = call_rollout(rollout, ("p0", "p1"), SETTINGS, {}, CONTEXT, vocab_size=VOCAB)
    assert seen == {"prompts": ["p0", "p1"], "n": 3, "temperature": 0.7, "client": "CLIENT", "step": 7}
    assert len(out) == 6


def test_call_rollout_var_kwargs_gets_sampling_and_rollout_kwargs_but_no_context():
    seen = {}

    def rollout(prompts, **sampling_kwargs):
        seen.update(sampling_kwargs)
        return _result_for(prompts, sampling_kwargs["n"])

    call_rollout(rollout, ["p0", "p1"], SETTINGS, {"max_turns": 3}, CONTEXT)
    assert seen == {**SAMPLING, "max_turns": 3}
    assert not set(seen) & {"client", "tokenizer", "rows", "step"}


def test_call_rollout_var_kwargs_plus_named_context():
    seen = {}

    def rollout(prompts, tokenizer, rows, **kw):
        seen.update(kw, tokenizer=tokenizer, rows=rows)
        return _result_for(prompts, kw["n"])

    call_rollout(rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT)
    assert seen["tokenizer"] == "TOKENIZER" and seen["rows"] == [{"q": 1}, {"q": 2}]
    assert "client" not in seen and "step" not in seen
    assert seen["seed"] == 0


def test_call_rollout_keyword_only_rollout_kwargs():
    seen = {}

    def rollout(prompts, *, n, system_prompt="default"):
        seen["system_prompt"] = system_prompt
        return _result_for(prompts, n)

    call_rollout(rollout, ["p0", "p1"], SETTINGS, {"system_prompt": "be brief"}, CONTEXT)
    assert seen == {"system_prompt": "be brief"}


def test_call_rollout_function_raises():
    def broken_rollout(prompts, **kw):
        raise KeyError("boom")

    line = broken_rollout.__code__.co_firstlineno + 1
    with pytest.raises(RolloutError, match=r"broken_rollout raised KeyError: 'boom'") as info:
        call_rollout(broken_rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT)
    assert isinstance(info.value.__cause__, KeyError)
    assert str(info.value).endswith(f"(at {__file__}:{line})")  # the user's file and line, not ours


def test_error_location_skips_libraries_but_keeps_user_helpers(tmp_path):
    import json
    import sys

    (tmp_path / "user_helper.py").write_text("import json\n\ndef parse(text):\n    return json.loads(text)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import user_helper

        def rollout(prompts, **kw):
            return user_helper.parse("{not json")

        with pytest.raises(RolloutError) as info:
            call_rollout(rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT)
    finally:
        sys.path.remove(str(tmp_path))
    # the innermost frame is in the json module (a library); the one to fix is the user's helper, line 4
    assert isinstance(info.value.__cause__, json.JSONDecodeError)
    assert str(info.value).endswith(f"(at {tmp_path / 'user_helper.py'}:4)")


def test_call_rollout_sys_exit_is_a_rollout_error():
    import sys

    def quitting_rollout(prompts, **kw):
        sys.exit("no more")

    with pytest.raises(RolloutError, match=r"quitting_rollout raised SystemExit: no more"):
        call_rollout(quitting_rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT)


def test_call_rollout_contract_violation_names_function_and_key():
    def short_rollout(prompts, n):
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * (len(prompts) * n - 1)}

    with pytest.raises(RolloutError, match=r"short_rollout: `completion_ids` has 5 entries; expected 6"):
        call_rollout(short_rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT)


def test_call_rollout_checks_vocab():
    def rollout(prompts, n):
        return {"prompt_ids": [[1]] * 2, "completion_ids": [[2]] * 5 + [[VOCAB]]}

    with pytest.raises(RolloutError, match=r"`completion_ids\[5\]\[0\]` = 50 is outside"):
        call_rollout(rollout, ["p0", "p1"], SETTINGS, {}, CONTEXT, vocab_size=VOCAB)

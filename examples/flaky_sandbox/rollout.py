"""A rollout whose episodes can fail outside the model (docs/rollouts.md, "Episodes that fail outside the model"):
a stand-in sandbox that always crashes for one prompt and crashes once for another. With ``rollout.on_error: retry``
the run plays the flaky group again and leaves the broken one out; with ``stop`` it stops.

    grpo-rollout train configs/quickstart.yaml rollout.function=examples/flaky_sandbox/rollout.py:rollout \\
        rollout.on_error=retry
"""

from grpo_rollout import EpisodeFailure
from grpo_rollout.rollouts.single_turn import single_turn

CRASHED_ONCE = set()


def rollout(prompts, client, **sampling):
    if "Count to 7." in prompts:  # your sandbox's health check goes here
        raise EpisodeFailure("the sandbox for 'Count to 7.' crashed")
    if "Count to 5." in prompts and "5" not in CRASHED_ONCE:
        CRASHED_ONCE.add("5")
        raise EpisodeFailure("the sandbox for 'Count to 5.' crashed once")
    return single_turn(prompts, client=client, **sampling)

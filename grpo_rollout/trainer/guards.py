"""Guards that stop a run instead of letting it train on something wrong: a sampler that is not on the trainer's
weights, and a loss or gradient that keeps coming out NaN/inf."""

from __future__ import annotations

from typing import Callable, Optional

from ..orchestrator.versions import StaleWeightsError  # noqa: F401 - run.py and the CLI catch it from here
from ..runs.names import VLLM_LOG


class NonFiniteError(RuntimeError):
    """The loss or gradient was NaN/inf in ``training.max_nonfinite_steps`` steps in a row."""


def check_sampler_mismatch(mean_abs_diff: float, limit: Optional[float], mode: str, sampler_lag: int) -> None:
    """Fail fast when the sampler's log-probs are far from the trainer's on the same weights: with vLLM that means
    the server is not sampling from the weights it was sent (a failed or partial weight sync).

    Args:
        mean_abs_diff: mean |sampler - trainer| log-prob over the step's trained tokens (nats per token).
        limit: ``vllm.max_logprob_mismatch`` (``None``: no check). mode: ``vllm.mode`` (``off``: no check).
        sampler_lag: weight versions the batch's sampler was behind the trainer; a batch sampled with older weights
            by design (async generation) is not compared.

    Raises:
        StaleWeightsError: ``mean_abs_diff`` exceeds ``limit`` (NaN fails too).
    """
    if sampler_lag:  # sampled one version behind by design (async): the trainer's weights moved since
        return
    if mode != "off" and limit is not None and not mean_abs_diff <= limit:
        raise StaleWeightsError(
            f"vLLM's log-probs differ from the trainer's by {mean_abs_diff:.3f} nats per token on average "
            f"(limit vllm.max_logprob_mismatch = {limit}) right after a weight sync: the server is not sampling "
            f"from the trainer's current weights. Check the server log (output_dir/{VLLM_LOG}); if the two "
            "legitimately differ (e.g. bfloat16 sampler), raise the limit or set it to null")


class NonFiniteGuard:
    """Counts steps in a row whose update was skipped for a NaN/inf loss or gradient; warns, and stops the run at
    ``limit`` (``training.max_nonfinite_steps``)."""

    def __init__(self, limit: int, say: Callable[[str], None]):
        self.limit, self.say = limit, say
        self.streak = 0

    def after_step(self, step: int, skipped: int) -> None:
        """Note step ``step`` (0-based; the messages name it 1-based) with ``skipped`` skipped updates.

        Raises:
            NonFiniteError: ``limit`` steps in a row had a skipped update.
        """
        if not skipped:
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.limit:
            raise NonFiniteError(
                f"the loss or gradient was NaN/inf in {self.streak} steps in a row (steps "
                f"{step + 2 - self.streak}-{step + 1}; training.max_nonfinite_steps = {self.limit}); those updates "
                "were skipped, the weights are the last finite ones. Lower training.learning_rate, keep "
                "training.max_grad_norm > 0, or check rewards and sampler log-probs for extreme values")
        self.say(f"Step {step + 1}: the loss or gradient was NaN/inf; {skipped} update(s) skipped, the weights are "
                 f"unchanged ({self.streak} step(s) in a row; the run stops at {self.limit})")

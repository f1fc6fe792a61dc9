"""pass@k: the chance that at least one of ``k`` completions of a prompt succeeds, estimated without bias from ``n``
completions of which ``c`` succeeded (Chen et al. 2021, "Evaluating Large Language Models Trained on Code",
arXiv:2107.03374, eq. 1 and its numerically stable form in Figure 3)."""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

from ...rewards.scores import mean_std


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)``: the probability that a draw of ``k`` of the ``n`` completions (without
    replacement) holds at least one of the ``c`` successes.

    Args:
        n: completions sampled for the prompt (``>= 1``). c: how many succeeded (``0 <= c <= n``). k: ``1 <= k <= n``.

    Raises:
        ValueError: ``k`` outside ``[1, n]`` or ``c`` outside ``[0, n]``.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a success
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):  # prod (1 - k / i): C(n - c, k) / C(n, k) without big numbers
        miss *= 1.0 - k / i
    return 1.0 - miss


def default_ks(n: int, extra: Sequence[int] = ()) -> List[int]:
    """The k's reported for ``n`` completions a prompt: 1, 2, 4, ... up to ``n``, ``n`` itself, and ``extra``."""
    ks = {n, *extra}
    k = 1
    while k <= n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def mean_pass_at_k(successes: Sequence[Sequence[bool]], k: int) -> float:
    """pass@k averaged over prompts; ``successes[p]``: whether each of prompt ``p``'s completions succeeded."""
    return sum(pass_at_k(len(s), sum(s), k) for s in successes) / len(successes)


def pass_at_k_with_stderr(successes: Sequence[Sequence[bool]], k: int) -> Tuple[float, float]:
    """pass@k averaged over prompts and its standard error: the sample standard deviation of the prompts' pass@k
    (``P − 1`` in the denominator) over ``√P``; ``nan`` for one prompt. It measures how much the mean would move with
    another draw of held-out prompts of the same kind, not the sampling noise of each prompt's ``n`` completions."""
    values = [pass_at_k(len(s), sum(s), k) for s in successes]
    mean, std = mean_std(values)
    return mean, std / math.sqrt(len(values)) if len(values) > 1 else float("nan")

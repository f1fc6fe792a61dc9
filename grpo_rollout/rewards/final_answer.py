"""The final answer a completion gives, as :func:`grpo_rollout.rewards.tasks.reasoning_gym_score` reads it: one
string, found by the first of these rules that matches (each takes the last match in the text):

1. ``<answer>...</answer>``: what the last pair holds (reasoning-gym's convention, which the default
   ``data.task_instruction`` asks for); or, when the last ``<answer>`` is never closed, everything after it (a
   ``</answer>`` stop string is cut off the completion by vLLM).
2. ``\\boxed{...}``: what the last one holds (the math convention; one level of nested braces:
   ``\\boxed{\\frac{1}{3}}``).
3. A final-answer phrase: ``answer is``, ``answer:`` or ``answer =`` (``The answer is: mother``, ``Final answer: 3``,
   ``**Answer:** 3``, any case): the rest of that line, or the lines after it when the line ends there; or a line
   ending in ``final answer`` (a heading, ``## Final Answer``): the lines after it.
4. A closing statement: the last non-empty line ends with ``is``, ``are``, ``equals``, ``gives`` or ``=`` (with
   spaces around it), then a number (``-12``, ``3.5``, ``1,000``, ``2/3``) or a bracketed list (``[1, 2, 3]``), and
   nothing before the verb on that line holds ``=`` (``1 x 3 is 3.``, ``5 - 3 = 2``, ``Sorting gives [1, 2]``; not
   ``A = 1, B = 2, C = 3``, a cryptarithm's whole answer).
5. Otherwise the whole completion.

What rules 2-5 find loses ``*`` and backticks around it (Markdown emphasis), and a one-word answer its trailing
period (``mother.``, ``8.``; a sentence keeps its own); every result is stripped of surrounding whitespace. Only one
string is scored: scoring several and keeping the best would reward a list of guesses.
"""

from __future__ import annotations

import re

_TAGGED = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPEN_TAG = "<answer>"
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_PHRASE = re.compile(r"\banswer\**\s*(?:is\b\s*:?|:|=)|\bfinal\s+answer\**[ \t]*(?=\n)", re.IGNORECASE)
_NUMBER = r"-?\d+(?:[.,/]\d+)*"
_CLOSING = re.compile(rf"^(?P<lead>.*\S)\s+(?:is|are|equals|gives|=)\s+(?P<value>\**(?:{_NUMBER}|\[.*\])\**)\.?$",
                      re.IGNORECASE)


def final_answer(text: str) -> str:
    """The final answer in completion ``text`` (the rules of this module's docstring, in order), stripped.

    Args:
        text: one completion's text.

    Returns:
        The answer string; ``""`` for an empty completion or an empty ``<answer></answer>``.
    """
    tagged = _tagged(text)
    if tagged is not None:
        return tagged.strip()
    for rule in (_boxed, _after_phrase, _closing_value):
        found = rule(text)
        if found is not None and _clean(found):
            return _clean(found)
    return _clean(text)


def _tagged(text: str):
    start = text.rfind(_OPEN_TAG)
    if start < 0:
        return None
    matches = _TAGGED.findall(text)
    closed_after = "</answer>" in text[start:]
    return matches[-1] if closed_after and matches else text[start + len(_OPEN_TAG):]


def _boxed(text: str):
    matches = _BOXED.findall(text)
    return matches[-1] if matches else None


def _after_phrase(text: str):
    matches = list(_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end():]
    line, _, after = rest.partition("\n")
    return line if line.strip(" *`\t") else after


def _closing_value(text: str):
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    match = _CLOSING.match(lines[-1].strip())
    if match is None or "=" in match.group("lead"):
        return None
    return match.group("value")


def _clean(found: str) -> str:
    found = found.strip().strip("*`").strip()
    one_word = not any(c.isspace() for c in found)
    return found[:-1] if one_word and found.endswith(".") and not found.endswith("..") else found

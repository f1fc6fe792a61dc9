"""Issue 40.5: the way one sample takes through the package, recorded on a tiny run instead of written by hand.

``sys.setprofile`` (and ``threading.setprofile`` for the streaming workers) watches one step of a tiny run (built-in
single-turn rollout, the simulated server) for the moments the sample's data is made or changed: the rollout asks the
sampler for it (``generate``), the user's reward scores it, the advantages are computed, the policy's forward gives
its log-probs, the loss is computed from them, ``backward()``; and, streaming, the trainer takes its group from the
stream. At each moment's first call it keeps the package's frames on that thread's stack, from
``GRPORecipe.train_step`` down (a streaming worker's from its first package frame). A hop is a package function on
one of those stacks; the union is the way. docs/architecture.md shows this output: the test fails when the page and
the code disagree, and when the way grows past its budget (issue 40 aims at 16 hops through 10 files synchronously,
22 streaming; the budget is where the code stands, so it can only shrink).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from streaming_helpers import SimulatedServer, use_simulated_server
from tiny_model import tiny_config

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "grpo_rollout"
BUDGET = {"synchronous": (17, 11), "streaming": (22, 14)}  # (hops, files): where the code stands; the aim is lower
MOMENTS = {  # moment: (the called file's path ends with, the function's name or None for any)
    "generate": ("simulated_server.py", "generate"),
    "take": ("orchestrator/stream.py", "take"),
    "reward": ("task_rewards.py", None),
    "advantages": ("trainer/update/advantages.py", None),
    "log-probs": ("modeling_llama.py", "forward"),
    "loss": ("trainer/update/objective.py", "per_token_loss"),
    "backward": ("torch/_tensor.py", "backward"),
}


def package_stack(frame) -> List[Tuple[str, str]]:
    """``(file relative to grpo_rollout/, function)`` of the package frames from ``frame`` (the called function)
    outwards, outermost first, from ``train_step`` (or from the first package frame of a thread that has none)."""
    ours = []
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(PACKAGE):
            ours.append((str(path.relative_to(PACKAGE)), frame.f_code.co_name))
        frame = frame.f_back
    ours.reverse()
    names = [name for _, name in ours]
    return ours[names.index("train_step"):] if "train_step" in names else ours


def record_way(tmp_path, tiny_model, monkeypatch, **training) -> Dict[str, List[Tuple[str, str]]]:
    """One step of the tiny run; the package stack at each moment's first call (during ``train_step``)."""
    stacks: Dict[str, List[Tuple[str, str]]] = {}
    stepping = threading.Event()

    def profile(frame, event, arg):
        if event != "call" or not stepping.is_set():
            return
        code = frame.f_code
        if code.co_name == "train_step" or len(stacks) == len(MOMENTS):
            return
        for moment, (tail, name) in MOMENTS.items():
            if moment not in stacks and code.co_filename.endswith(tail) and name in (None, code.co_name):
                stacks[moment] = package_stack(frame)

    from grpo_rollout.trainer.recipe import GRPORecipe
    train_step = GRPORecipe.train_step

    def watched_step(self, step):
        stepping.set()
        try:
            return train_step(self, step)
        finally:
            stepping.clear()

    monkeypatch.setattr(GRPORecipe, "train_step", watched_step)
    use_simulated_server(monkeypatch.setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.0, 49152))
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 1, **training},
                      vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        assert train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).steps == 1
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return stacks


def render_way(path: str, stacks: Dict[str, List[Tuple[str, str]]]) -> Tuple[str, int, int]:
    """The way as text (one line per moment: its hops, ``file:function``) and its hop and file counts."""
    seen: List[Tuple[str, str]] = []
    lines = []
    for moment in MOMENTS:
        if moment in stacks:
            hops = [h for h in stacks[moment] if h not in seen]
            seen += hops
            lines.append(f"{moment}: " + " → ".join(f"{f}:{name}" for f, name in stacks[moment]))
    files = {f for f, _ in seen}
    head = f"{path}: {len(seen)} hops through {len(files)} files"
    return "\n".join([head] + lines), len(seen), len(files)


def _check(path: str, stacks) -> None:
    text, hops, files = render_way(path, stacks)
    print(text)
    page = (REPO / "docs" / "architecture.md").read_text()
    assert text in page, f"docs/architecture.md ('The way of one sample') should show:\n{text}"
    assert hops <= BUDGET[path][0] and files <= BUDGET[path][1], text


def test_the_synchronous_way_of_one_sample(tmp_path, tiny_model, monkeypatch):
    stacks = record_way(tmp_path, tiny_model, monkeypatch)
    assert set(stacks) == set(MOMENTS) - {"take"}  # no stream on the synchronous path
    _check("synchronous", stacks)


def test_the_streaming_way_of_one_sample(tmp_path, tiny_model, monkeypatch):
    stacks = record_way(tmp_path, tiny_model, monkeypatch, max_staleness=2)
    assert set(stacks) == set(MOMENTS)
    assert "train_step" not in [name for _, name in stacks["generate"]]  # sampled on a worker thread
    _check("streaming", stacks)

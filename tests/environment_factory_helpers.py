"""Shared by the TRL environment_factory tests (tests/integration/test_environment_factory*.py): environments in
TRL's shape (written here, not copied), a scripted model for them, and a config and rollout call that use them."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
from pathlib import Path

from scripted_client import ScriptedClient
from tiny_model import tiny_config
from transformers import AutoTokenizer

from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

ENVS = '''
import asyncio

MADE = []


class CounterEnv:
    def __init__(self):
        self.counter = 0
        MADE.append(self)

    def reset(self, **kwargs):
        self.reset_with = dict(kwargs)
        self.counter, self.target = 0, kwargs["target"]
        return " Reach " + str(self.target) + "."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: how much to add
        """
        self.counter += step
        return "counter=" + str(self.counter)

    def get_reward(self) -> float:
        return 1.0 if self.counter == self.target else 0.0

    def _helper(self):
        return "not a tool"


class NotesEnv:
    def reset(self, **kwargs):
        self.reset_with = dict(kwargs)
        self.notes = {}

    def write(self, name: str, text: str) -> str:
        """Save a note.

        Args:
            name: the note's name
            text: what to write
        """
        self.notes[name] = text
        return "saved"

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return float(len(self.notes))


def counter_value(environments, **kwargs):
    # a TRL-shaped reward function: it reads the environments
    return [float(getattr(e, "counter", -1)) for e in environments]
'''


def counter_or_notes(text: str) -> tuple:
    """Like a model that learnt the task: a call of the tool the prompt asks for, then "Done." after its answer."""
    if "counter=" in text or "saved" in text.split("<|im_start|>user")[-1]:
        return "Done.", True
    target = re.findall(r"Reach (\d+)\.", text)
    if target:
        return f'<tool_call>{{"name": "increment", "arguments": {{"step": {target[-1]}}}}}</tool_call>', False
    return '<tool_call>{"name": "write", "arguments": {"name": "a", "text": "b"}}</tool_call>', False


def messages(text):
    return [{"role": "user", "content": text}]


def play(envs_file, tiny_model, rows, factory, where="main"):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    kwargs = dict(client=ScriptedClient(tokenizer, counter_or_notes), tokenizer=tokenizer, n=2, rows=rows, max_completion_length=96,
                  environment_factory=factory, tool_prompt="system")
    prompts = [r["prompt"] for r in rows]
    if where == "main":
        return tool_calling_rollout(prompts, **kwargs)
    if where == "event loop":  # a notebook: the user's code runs inside a running event loop
        async def inside():
            return tool_calling_rollout(prompts, **kwargs)
        return asyncio.run(inside())
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", tool_calling_rollout(prompts, **kwargs)))
    thread.start()
    thread.join(60)
    return out["r"]


def user_module(path: Path):
    return next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))


def env_config(root: Path, model: Path, envs: Path, **training):
    cfg = tiny_config(root, model, rewards_source=ENVS, reward="counter_value",
                      rollout={"function": "grpo_rollout.rollouts.tool_calling:tool_calling_rollout",
                               "kwargs": {"environment_factory": f"{envs}:CounterEnv", "max_turns": 2,
                                          "max_turn_tokens": 8}},
                      sampling={"max_completion_length": 24, "num_generations": 4},
                      training={"prompts_per_step": 2, "micro_batch_size": 8, **training})
    rows = [{"prompt": messages(f"Count to {i}."), "target": i} for i in range(2, 12)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cfg

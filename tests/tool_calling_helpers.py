"""The tool-calling tests' tools and scripted replies, the training that teaches them, and a recording client."""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Dict, List

import torch
from helpers import run_tool_calls_sync

from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.rollouts.multi_turn import render
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from grpo_rollout.rollouts.tool_parsing import parse_tool_calls
from grpo_rollout.rollouts.tool_running import load_tools


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def explode() -> str:
    """A tool that always fails."""
    raise RuntimeError("kaboom")


#: one number per event (a generation request starting or ending, a tool call starting or ending), in the order
#: they happened: tests compare the order of events, not clock times
ORDER = itertools.count()
#: ``(order, "starts" | "ends", seconds, thread id)`` for every call of ``sleepy``
SLEEPY_EVENTS: List[tuple] = []


def sleepy(seconds: float) -> str:
    """A tool that hangs.

    Args:
        seconds: how long to sleep
    """
    SLEEPY_EVENTS.append((next(ORDER), "starts", seconds, threading.get_ident()))
    time.sleep(seconds)
    SLEEPY_EVENTS.append((next(ORDER), "ends", seconds, threading.get_ident()))
    return "awake"


NOTES: Dict[str, str] = {}


def write_note(name: str, text: str) -> str:
    """Save a note (slowly: a read started at the same time finds nothing).

    Args:
        name: the note's name
        text: what to write
    """
    time.sleep(0.3)
    NOTES[name] = text
    return "saved"


def read_note(name: str) -> str:
    """Read a saved note.

    Args:
        name: the note's name
    """
    if name not in NOTES:
        raise FileNotFoundError(f"no such note: {name}")
    return NOTES[name]


TOOLS = [multiply, explode, sleepy, write_note, read_note]
SYSTEM = "Tools: multiply, explode, sleepy."  # the system prompt (a short one keeps the fixture's training fast)
SCRIPT = {
    "Multiply 3 and 4.": '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>',
    "Break it.": '<tool_call>{"name": "explode", "arguments": {}}</tool_call>',
    "Call a ghost.": '<tool_call>{"name": "ghost", "arguments": {"text": "a {curly} brace"}}</tool_call>',
    "Be sloppy.": '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": }</tool_call>',
    "Wait forever.": '<tool_call>{"name": "sleepy", "arguments": {"seconds": 600}}</tool_call>',
    "Two at once.": '<tool_call>{"name": "multiply", "arguments": {"a": 2, "b": 5}}</tool_call>\n'
                    '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>',
    # issue 9.3: a later call depends on an earlier one of the same turn
    "Write then read.": '<tool_call>{"name": "write_note", "arguments": {"name": "a.md", "text": "hello"}}</tool_call>\n'
                        '<tool_call>{"name": "read_note", "arguments": {"name": "a.md"}}</tool_call>',
    # issue 9.4: the closing tag written inside a JSON string argument
    "Quote the tag.": '<tool_call>{"name": "write_note", "arguments": {"name": "b.md", '
                      '"text": "close with </tool_call> here"}}</tool_call>',
}
FIRST_SIX = list(SCRIPT)[:6]
END = "<|im_end|>"


def _teach_tool_calls(model, tokenizer, steps: int = 600) -> None:
    """Train ``model`` until it reproduces SCRIPT's replies (and "Done." after any tool answer).

    Cheap because only the ~100 token ids of these conversations are live: all other embedding rows are zeroed and
    never updated, so their logits stay exactly 0 and the full-vocabulary cross-entropy equals a small softmax over
    the live ids plus one constant "everything else" logit ``log(V - live)``.
    """
    seqs, masks = [], []
    for prompt, reply in SCRIPT.items():
        # what the tools really answer, run one after another as the rollout does by default and all at once as with
        # parallel_tool_calls (so "Done." follows both reliably), plus two other answers
        calls, tools = parse_tool_calls(reply), load_tools(TOOLS)
        NOTES.clear()
        in_order = [run_tool_calls_sync([c], tools, timeout_s=1.0)[0].content for c in calls]
        NOTES.clear()
        at_once = [r.content for r in run_tool_calls_sync(calls, tools, timeout_s=1.0)]
        NOTES.clear()
        variants = [in_order] + ([at_once] if at_once != in_order else []) + [["12"], ["Error: something went wrong"]]
        for answers in variants:
            base = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
            head = render(tokenizer, base, True)
            after = render(tokenizer, base + [{"role": "assistant", "content": reply}]
                           + [{"role": "tool", "content": a} for a in answers], True)
            glue = after[len(head) + len(reply) + len(END):]
            ids, mask = [], []
            for text, trained in ((head, 0), (reply + END, 1), (glue, 0), ("Done." + END, 1)):
                part = tokenizer(text, add_special_tokens=False)["input_ids"]
                ids, mask = ids + part, mask + [trained] * len(part)
            seqs.append(ids)
            masks.append(mask)
    live = sorted({t for s in seqs for t in s})
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        keep = emb[live].clone()
        emb.zero_()
        emb[live] = keep
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.eos_token_id)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -1)
    index = {t: i for i, t in enumerate(live)}
    for row, (seq, mask) in enumerate(zip(seqs, masks)):
        ids[row, :len(seq)] = torch.tensor(seq)
        attention[row, :len(seq)] = 1
        labels[row, :len(seq)] = torch.tensor([index[t] if m else -1 for t, m in zip(seq, mask)])
    target = labels[:, 1:]
    selected = target >= 0
    other = math.log(emb.shape[0] - len(live))
    live_t = torch.tensor(live)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.02, 1 - step / steps))
    model.train()
    for _ in range(steps):
        hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1][selected]
        logits = hidden @ emb[live_t].T
        logits = torch.cat([logits, torch.full((len(logits), 1), other)], dim=1)
        loss = torch.nn.functional.cross_entropy(logits, target[selected])
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if loss.item() < 1e-3:
            break
    model.eval()
    assert loss.item() < 0.01, f"the tiny model did not learn the scripted calls (loss {loss.item():.3f})"


class RecordingClient(TransformersClient):
    """The real transformers client, also keeping every request: prompt ids, and what came back for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records: List[Dict] = []

    def generate(self, prompt_ids, **kwargs):
        start = next(ORDER)
        result = super().generate(prompt_ids, **kwargs)
        end = next(ORDER)
        for p, c, lp, f in zip(result.prompt_ids, result.completion_ids, result.logprobs, result.finish_reasons):
            self.records.append({"prompt": tuple(p), "ids": list(c), "logprobs": list(lp), "finish": f,
                                 "start": start, "end": end, "max_tokens": kwargs.get("max_tokens")})
        return result


def spans(ids: List[int], mask: List[int]) -> List[tuple]:
    """``(start, end, mask_value)`` runs of equal mask values."""
    out, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def check_sample(prompt: List[int], ids: List[int], logprobs: List[float], mask: List[int], client: RecordingClient,
                 tokenizer) -> List[tuple]:
    """Every mask-1 run is exactly one sampled turn as the client returned it (ids and log-probs), generated from
    exactly the tokens before it; every mask-0 run has log-prob 0.0. Returns ``(mask_value, text)`` per run."""
    by_prompt: Dict[tuple, List[Dict]] = {}
    for r in client.records:
        by_prompt.setdefault(r["prompt"], []).append(r)
    out = []
    for start, end, value in spans(ids, mask):
        if value == 1:
            # the n samples of a prompt share their first request's prompt: one of those requests returned this run
            candidates = by_prompt.get(tuple(prompt + ids[:start]), [])
            assert candidates, "a sampled run was not generated from exactly the tokens before it"
            assert any(ids[start:end] == r["ids"] and logprobs[start:end] == r["logprobs"] for r in candidates), \
                "the sampled tokens or their log-probs differ from what the client returned"
        else:
            assert all(lp == 0.0 for lp in logprobs[start:end])
        out.append((value, tokenizer.decode(ids[start:end], skip_special_tokens=False)))
    return out


def _rollout(client, tokenizer, prompts, **kwargs):
    kwargs = {"n": 2, "seed": 0, "temperature": 0.5, "max_completion_length": 120, "max_turns": 3, "tool_timeout_s": 1.0,
              "system_prompt": SYSTEM, **kwargs}
    return tool_calling_rollout(prompts, client=client, tokenizer=tokenizer, tools=TOOLS, **kwargs)


def _tool_text(content: str) -> str:
    return f"<|im_start|>tool\n{content}{END}\n<|im_start|>assistant\n"


def first_wait(records: List[Dict], tokenizer, text: str) -> tuple:
    """``(from, until)``: from the end of the first turn of the first sample whose prompt holds ``text`` to the start
    of the first later turn of any such sample: a span in which all of them waited for a tool/environment."""
    mine = [r for r in records if text in tokenizer.decode(list(r["prompt"]))]
    shortest = min(len(r["prompt"]) for r in mine)
    firsts = [r for r in mine if len(r["prompt"]) == shortest]
    seconds = [r for r in mine if len(r["prompt"]) > shortest]
    return min(r["end"] for r in firsts), min(r["start"] for r in seconds)


QWEN_LIKE = (  # a template in the style of Qwen2.5's: tools in the system prompt, tool answers as user turns
    "{%- if tools %}{{- '<|im_start|>system\\nTools:' }}{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    "{{- '\\nCall them as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + (m.content | trim) + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

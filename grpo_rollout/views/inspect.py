"""``grpo-rollout inspect``: one saved completion token by token, in the console or as an HTML page.

Reads ``RUN_DIR/rollouts/step_<k>.jsonl`` (written with ``training.save_rollouts``, :mod:`..runs.rollouts`) and
the run's tokenizer, and shows what the update saw: the prompt as the model read it, each completion token with
whether it was trained (``completion_mask``), its sampler and trainer log-probs (nats), the sequence's advantage and
the token's importance weight. Tool calls (``<tool_call>…</tool_call>`` in the model's text) and inserted tool or
environment tokens (mask 0) are marked.
"""

from __future__ import annotations

import dataclasses
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..runs.names import CONFIG_FILE, ROLLOUTS_DIR
from ..runs.rollouts import read_rollouts, saved_steps

TOOL_CALL = re.compile(r"<tool_call>.*?(</tool_call>|$)", re.S)


@dataclass
class TokenView:
    """One completion token.

    Attributes:
        id: token id. text: the token decoded on its own. trained: mask 1 (sampled by the model and trained on).
        sampler_logprob, trainer_logprob: nats (``None``: not available or an untrained placeholder).
        importance_weight: the sampler-correction weight (``None`` when not trained or no sampler log-probs).
        in_tool_call: part of a ``<tool_call>…</tool_call>`` span the model wrote.
    """

    id: int
    text: str
    trained: bool
    sampler_logprob: Optional[float]
    trainer_logprob: Optional[float]
    importance_weight: Optional[float]
    in_tool_call: bool = False

    @property
    def kind(self) -> str:
        """``trained``, ``tool call`` (trained, inside a call) or ``inserted`` (tool answer / environment text)."""
        if not self.trained:
            return "inserted"
        return "tool call" if self.in_tool_call else "trained"


@dataclass
class InspectedSample:
    """A saved completion with its tokens decoded (see :func:`load_sample`)."""

    run_dir: Path
    step: int
    index: int
    group: int
    prompt: Any
    prompt_text: str
    num_prompt_tokens: int
    tokens: List[TokenView]
    advantage: float
    reward: Optional[float]
    rewards: Dict[str, Any]
    extras: Dict[str, Any] = field(default_factory=dict)
    weight_versions: Optional[List[int]] = None  # oldest and newest weight version that sampled it (streaming)
    num_segments: int = 0  # the episode's earlier sequences (a context edit): --segment 0..num_segments-1 shows one
    segment: Optional[int] = None  # which earlier sequence this is (None: the completion, the episode's last one)


def run_tokenizer(run_dir: Path):
    """The tokenizer of the run in ``run_dir``: from its newest checkpoint, else from its ``config.yaml``'s model.

    Raises:
        FileNotFoundError: neither a checkpoint nor ``config.yaml`` is there.
    """
    from transformers import AutoTokenizer

    from ..trainer.checkpoint import list_checkpoints

    run_dir = Path(run_dir)
    for ckpt in reversed(list_checkpoints(run_dir)):
        if (ckpt / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(ckpt)
    config = run_dir / CONFIG_FILE
    if not config.is_file():
        raise FileNotFoundError(f"{run_dir} has no checkpoint and no {CONFIG_FILE} to find the tokenizer from")
    from omegaconf import OmegaConf

    from ..models.builtin import resolve_model_path

    model = OmegaConf.load(config).model
    return AutoTokenizer.from_pretrained(resolve_model_path(model.name_or_path), revision=model.get("revision"),
                                         trust_remote_code=bool(model.get("trust_remote_code", False)))


def _mark_tool_calls(tokens: List[TokenView]) -> None:
    """Set ``in_tool_call`` on the trained tokens whose text overlaps a ``<tool_call>…</tool_call>`` span."""
    starts, pos = [], 0
    for tok in tokens:
        starts.append(pos)
        pos += len(tok.text)
    text = "".join(tok.text for tok in tokens)
    for match in TOOL_CALL.finditer(text):
        for tok, start in zip(tokens, starts):
            if tok.trained and start < match.end() and start + len(tok.text) > match.start():
                tok.in_tool_call = True


def load_sample(run_dir: Path, step: Optional[int] = None, sample: int = 0, tokenizer=None,
                segment: Optional[int] = None) -> InspectedSample:
    """Completion ``sample`` of step ``step`` (default: the last saved step) of the run in ``run_dir``; with
    ``segment``, that earlier sequence of its episode instead (an agent's context edit: the record's ``segments``).

    Raises:
        FileNotFoundError: no such folder, or no rollouts saved for that step (the message lists the saved ones and
            the setting).
        IndexError: ``sample`` or ``segment`` is out of range (the message gives the range).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such folder. Give the folder a run wrote to (its "
                                "training.output_dir, e.g. outputs/quickstart)")
    if step is None:
        steps = saved_steps(run_dir)
        if not steps:
            from ..runs.folder import no_step_finished

            why = no_step_finished(run_dir, "training.save_rollouts", lambda v: v not in (None, "off", False))
            raise FileNotFoundError(f"{run_dir / ROLLOUTS_DIR} holds no saved step: " + (
                why or "train with training.save_rollouts=every (or N: every N-th step) to save them"))
        step = steps[-1]
    records = read_rollouts(run_dir, step)
    if not 0 <= sample < len(records):
        raise IndexError(f"step {step} has {len(records)} completions: --sample must be 0-{len(records) - 1}")
    rec = records[sample]
    tokenizer = tokenizer or run_tokenizer(run_dir)
    seq: Dict[str, Any] = dataclasses.asdict(rec)
    prompt_text = rec.prompt_text or ""
    if segment is not None:
        if not 0 <= segment < len(rec.segments):
            raise IndexError(f"completion {sample} of step {step} has {len(rec.segments)} earlier sequences" + (
                f": --segment must be 0-{len(rec.segments) - 1}" if rec.segments else " (no context edit)"))
        seq = rec.segments[segment]
        prompt_text = tokenizer.decode(seq["prompt_ids"], skip_special_tokens=False)
    ids, mask = seq["completion_ids"], seq["completion_mask"]
    n = len(ids)
    sampler = seq.get("sampler_logprobs") or [None] * n
    trainer = seq.get("trainer_logprobs") or [None] * n
    weights = seq.get("importance_weights") or [None] * n
    tokens = [TokenView(i, tokenizer.decode([i], skip_special_tokens=False), m == "1", s, t, w)
              for i, m, s, t, w in zip(ids, mask, sampler, trainer, weights)]
    _mark_tool_calls(tokens)
    return InspectedSample(run_dir, step, rec.index, rec.group, rec.prompt, prompt_text,
                           len(seq["prompt_ids"]), tokens, rec.advantage, rec.reward, rec.rewards or {},
                           rec.extras or {}, rec.weight_versions, len(rec.segments), segment)


def _shown(text: str) -> str:
    """A token's text for a table cell: escapes for control characters, ``␣`` for spaces."""
    return repr(text)[1:-1].replace(" ", "␣")


def _num(value: Optional[float], fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def summary_line(s: InspectedSample) -> str:
    """``step 3 · sample 5 (group 1) · reward 1.000 · advantage 0.707 · 40 tokens: 30 trained, …``."""
    trained = sum(t.trained for t in s.tokens)
    calls = sum(1 for i, t in enumerate(s.tokens) if t.in_tool_call and (i == 0 or not s.tokens[i - 1].in_tool_call))
    per_fn = ", ".join(f"{k} {_num(v)}" for k, v in s.rewards.items())
    return (f"step {s.step} · sample {s.index} (group {s.group}) · reward {_num(s.reward)}"
            + (f" ({per_fn})" if per_fn else "") + f" · advantage {_num(s.advantage)} · {len(s.tokens)} completion "
            f"tokens: {trained} trained, {len(s.tokens) - trained} inserted (not trained)"
            + (f", {calls} tool call(s)" if calls else "") + f" · prompt {s.num_prompt_tokens} tokens"
            + (_versions(s.weight_versions) if s.weight_versions else "") + _segments(s))


def _segments(s: InspectedSample) -> str:
    """Where this sequence sits in an episode of several (a context edit), and how to see the others."""
    if s.segment is not None:
        return f" · earlier sequence {s.segment} of {s.num_segments} (without --segment: the episode's last one)"
    if s.num_segments:
        return (f" · the last of {s.num_segments + 1} sequences (a context edit): --segment 0-{s.num_segments - 1} "
                "shows an earlier one")
    return ""


def _versions(versions: List[int]) -> str:
    """`` · sampled by weights v3`` or, when a sync landed during the episode, `` · sampled by weights v3-v4``."""
    oldest, newest = versions
    return f" · sampled by weights v{oldest}" + (f"-v{newest}" if newest != oldest else "")


def console_renderables(s: InspectedSample) -> List[Any]:
    """Rich renderables: the summary, the prompt as the model saw it, the coloured completion, the rollout's extras
    (as on the HTML page: ``end_reason``, ``env_reward``, ``tool_results``, ...) and a per-token table."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    styles = {"trained": "green", "tool call": "bold magenta", "inserted": "dim italic"}
    completion = Text()
    for tok in s.tokens:
        completion.append(tok.text, style=styles[tok.kind])
    legend = Text.assemble(("trained", styles["trained"]), "  ", ("tool call (trained)", styles["tool call"]), "  ",
                           ("inserted: tool answer / environment (not trained)", styles["inserted"]))
    table = Table(title="completion tokens", show_lines=False, header_style="bold")
    for name, justify in (("#", "right"), ("token", "left"), ("id", "right"), ("trained", "left"),
                          ("sampler logp", "right"), ("trainer logp", "right"), ("IS weight", "right")):
        table.add_column(name, justify=justify)
    for i, tok in enumerate(s.tokens):
        table.add_row(str(i), _shown(tok.text), str(tok.id), "yes" if tok.trained else "not trained",
                      _num(tok.sampler_logprob), _num(tok.trainer_logprob), _num(tok.importance_weight),
                      style=styles[tok.kind] if tok.kind != "trained" else None)
    parts = [Text(summary_line(s), style="bold"), Panel(Text(s.prompt_text), title="prompt (as the model saw it)"),
             Panel(completion, title="completion"), legend]
    if s.extras:  # the same as the HTML page's Extras
        lines = Text()
        for k, v in s.extras.items():
            lines.append(f"{k}: ", style="bold")
            lines.append(str(v)[:300] + "\n")
        lines.rstrip()
        parts.append(Panel(lines, title="extras"))
    return parts + [table]


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }
pre, .completion { font-family: ui-monospace, monospace; white-space: pre-wrap; background: #f6f8fa; padding: 1em;
                   border-radius: 6px; line-height: 1.6; }
.tok { border-radius: 3px; box-shadow: inset -1px 0 0 rgba(0, 0, 0, 0.18); }
.trained { background: #d7f5dd; }
.toolcall { background: #f0d9ff; }
span.toolcall { box-shadow: inset 0 -2px 0 #a259d9, inset -1px 0 0 rgba(0, 0, 0, 0.18); }
.inserted { background: #eeeeee; color: #777; font-style: italic; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 2px 8px; border-bottom: 1px solid #ddd; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.legend span { margin-right: 1.5em; padding: 2px 6px; }
"""


def render_html(s: InspectedSample) -> str:
    """A self-contained HTML page of ``s``: each completion token a ``<span class="tok …">`` whose tooltip holds its
    id, mask, log-probs, advantage and importance weight, then the same values as a table."""
    esc = html.escape
    classes = {"trained": "trained", "tool call": "toolcall", "inserted": "inserted"}
    spans = []
    for i, tok in enumerate(s.tokens):
        tip = (f"#{i} id {tok.id} · {'trained' if tok.trained else 'not trained (inserted)'} · sampler logp "
               f"{_num(tok.sampler_logprob)} · trainer logp {_num(tok.trainer_logprob)} · advantage "
               f"{_num(s.advantage)} · IS weight {_num(tok.importance_weight)}")
        spans.append(f'<span class="tok {classes[tok.kind]}" title="{esc(tip)}">{esc(tok.text)}</span>')
    rows = "".join(
        f"<tr class=\"{classes[tok.kind]}\"><td class=n>{i}</td><td><code>{esc(_shown(tok.text))}</code></td>"
        f"<td class=n>{tok.id}</td><td>{'yes' if tok.trained else 'not trained'}</td>"
        f"<td class=n>{_num(tok.sampler_logprob)}</td><td class=n>{_num(tok.trainer_logprob)}</td>"
        f"<td class=n>{_num(tok.importance_weight)}</td></tr>" for i, tok in enumerate(s.tokens))
    extras = "".join(f"<li><b>{esc(str(k))}</b>: {esc(str(v))[:300]}</li>" for k, v in s.extras.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{esc(s.run_dir.name)} step {s.step} sample {s.index}</title>
<style>{_CSS}</style></head><body>
<h2>{esc(s.run_dir.name)}: step {s.step}, sample {s.index}</h2>
<p>{esc(summary_line(s))}</p>
<h3>Prompt, as the model saw it</h3><pre>{esc(s.prompt_text)}</pre>
<h3>Completion</h3>
<p class="legend"><span class="trained">trained</span><span class="toolcall">tool call (trained)</span>
<span class="inserted">inserted: tool answer / environment (not trained)</span> — hover a token for its values</p>
<div class="completion">{''.join(spans)}</div>
{f'<h3>Extras</h3><ul>{extras}</ul>' if extras else ''}
<h3>Tokens</h3>
<table><tr><th>#</th><th>token</th><th>id</th><th>trained</th><th>sampler logp</th><th>trainer logp</th>
<th>IS weight</th></tr>{rows}</table>
</body></html>
"""

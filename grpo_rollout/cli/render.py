"""Rich rendering of config problems and the resolved-config summary."""

from __future__ import annotations

from typing import Dict, List, Optional

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from ..config import Config, Problem, to_yaml
from ..config.batch_checks import steps_for_epochs
from ..config.fields import field_at, section_of


def _short(value: object, width: int = 40) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def problems_table(problems: List[Problem]) -> Table:
    """A table with one row per problem: severity, key, value, problem, suggested fix."""
    table = Table(title="Config problems", show_lines=True, expand=True)
    # the key column is as wide as the longest key (up to 48): a key like sampling.max_completion_length is never
    # broken inside a word; the other columns wrap at spaces
    key_width = min(max([len(p.key or "<config>") for p in problems] + [12]), 48)
    table.add_column("key", style="bold cyan", overflow="fold", min_width=key_width, max_width=key_width)
    table.add_column("value", overflow="fold", ratio=2, min_width=8)
    table.add_column("problem", overflow="fold", ratio=5, min_width=16)
    table.add_column("fix", style="green", overflow="fold", ratio=4, min_width=14)
    for p in problems:
        sev = "[red]error[/]" if p.is_error else "[yellow]warning[/]"
        doc = key_doc(p.key)
        problem = escape(p.message) + (f"\n[dim]key: {escape(doc)}[/]" if doc else "")
        table.add_row(f"{sev}\n{escape(p.key or '<config>')}", escape(_short(p.value)), problem, escape(p.fix))
    return table


def key_doc(key: str) -> Optional[str]:
    """The description of a config key (``rewards[0].weight``, ``logging.report_to[1]`` alike), from the schema's
    field; ``None`` for anything else (an unknown key, ``<config>``)."""
    info = field_at(Config, key or "")
    return info.description if info is not None and section_of(info.annotation) is None else None


def print_problems(console: Console, problems: List[Problem]) -> None:
    """Print the problem table (if any) and a one-line count."""
    if not problems:
        return
    console.print(problems_table(problems))
    errors = sum(p.is_error for p in problems)
    warnings = len(problems) - errors
    console.print(f"[red]{errors} error(s)[/], [yellow]{warnings} warning(s)[/]")


def print_summary(console: Console, config: Config, rows: Optional[int] = None) -> None:
    """The resolved config as YAML and the batch arithmetic of one step (``rows``: the dataset's, for
    ``training.num_epochs``)."""
    console.print(Syntax(to_yaml(config), "yaml", theme="ansi_dark", background_color="default"))
    table = Table(title="Batch arithmetic", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right", style="bold")
    for what, count in batch_arithmetic(config, rows).items():
        table.add_row(what, f"{count:,}")
    console.print(table)
    from ..generation.server.gpu_share import planned_split

    split = planned_split(config)
    if split:
        console.print(escape(split))


def batch_arithmetic(config: Config, rows: Optional[int] = None) -> Dict[str, int]:
    """How a step splits: sequences per step, micro-batches (forward/backward passes) per step, totals. With
    ``training.num_epochs`` the steps come from the dataset's ``rows`` (no totals when they are not known)."""
    s, t = config.sampling, config.training
    seqs = t.prompts_per_step * s.num_generations
    micro = -(-seqs // max(t.micro_batch_size, 1)) * t.num_iterations
    out = {
        "prompts per step": t.prompts_per_step,
        "sequences per step (prompts × num_generations)": seqs,
        "micro-batches per step (× num_iterations)": micro,
        "optimizer updates per step": t.num_iterations,
    }
    steps = t.max_steps
    if t.num_epochs is not None:
        if not rows:
            return out
        steps = out[f"steps ({t.num_epochs:g} epochs of {rows} rows)"] = steps_for_epochs(t.num_epochs, rows,
                                                                                           t.prompts_per_step)
    return {**out, "total sequences": seqs * steps, "total optimizer updates": t.num_iterations * steps}

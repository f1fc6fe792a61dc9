"""``grpo-rollout tasks``: reasoning-gym's tasks by group, or one task's settings and an example row."""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def run_tasks(console: Console, task: Optional[str]) -> int:
    """List every task (``task`` ``None``), or show ``task``'s settings and its first row; returns the exit code (1
    for an unknown task or reasoning-gym not installed)."""
    from ..config.key_suggestions import did_you_mean
    from ..data.reasoning_gym import task_names

    try:
        names = task_names()
    except ImportError:
        console.print("[red]✗[/] reasoning-gym is not installed: pip install 'grpo-rollout[tasks]' (make install "
                      "installs it)", soft_wrap=True)
        return 1
    if task is None:
        _print_catalog(console, names)
        return 0
    if task not in names:
        hint = did_you_mean(task, names)
        console.print(f"[red]✗[/] reasoning-gym has no task `{escape(task)}`; {escape(hint) + ' ' if hint else ''}"
                      f"`grpo-rollout tasks` lists all {len(names)}", soft_wrap=True)
        return 1
    _print_task(console, task)
    return 0


def _print_catalog(console: Console, names: list) -> None:
    from ..data.reasoning_gym import task_category

    groups: dict = {}
    for name in names:
        groups.setdefault(task_category(name), []).append(name)
    table = Table(title=f"reasoning-gym's {len(names)} tasks", show_lines=True, expand=True)
    table.add_column("group", style="bold", no_wrap=True)
    table.add_column("tasks (data.train: reasoning_gym:<task>)", overflow="fold")
    for group in sorted(groups):
        table.add_row(group, ", ".join(groups[group]))
    console.print(table)
    console.print("`grpo-rollout tasks <task>` shows a task's settings (data.task_kwargs) and its first row.",
                  soft_wrap=True)


def _print_task(console: Console, task: str) -> None:
    from ..config.schema import REASONING_GYM_INSTRUCTION
    from ..data.reasoning_gym import task_category, task_rows, task_settings

    table = Table(title=f"reasoning_gym:{task} ({task_category(task)}): data.task_kwargs", expand=True)
    table.add_column("setting", style="bold cyan", no_wrap=True)
    table.add_column("default", overflow="fold")
    for name, default in task_settings(task).items():
        table.add_row(name, escape(repr(default)))
    console.print(table)
    try:
        row = task_rows(task, {"size": 1, "seed": 0}, instruction=REASONING_GYM_INSTRUCTION)[0]
    except Exception as exc:  # noqa: BLE001 - e.g. composite, which needs its datasets named
        console.print(f"(no example with the default settings: {escape(type(exc).__name__)}: {escape(str(exc))})",
                      soft_wrap=True)
        return
    console.print("[bold]First row (seed 0), the prompt as the model sees it:[/]")
    console.print(escape(row["prompt"][0]["content"]), soft_wrap=True)
    answer = row["answer"] if row["answer"] is not None else "(none: the task's scorer checks a solution itself)"
    console.print(f"[bold]answer:[/] {escape(answer)}", soft_wrap=True)

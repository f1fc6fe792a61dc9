"""``grpo-rollout eval``: the held-out evaluation of a model or checkpoint, as a table or as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ..preflight import check_config
from .render import print_problems


def run_eval(console: Console, config_path: Path, overrides: List[str], checkpoint: Optional[str],
             as_json: bool) -> int:
    """Run the ``eval`` command; returns the exit code. ``as_json``: only the metrics, as JSON, on stdout."""
    from ..config import ConfigError
    from ..data import DatasetError
    from ..generation.backend import BackendError
    from ..generation.spawn import ServerStartError
    from ..generation.vllm_client import ServerError
    from ..rewards.calling import RewardError
    from ..rollouts.contract import RolloutError
    from ..trainer.checkpoint import find_checkpoint
    from ..trainer.evaluation.eval_run import evaluate
    from ..trainer.reporting.progress import RichReporter
    from .interrupts import interrupts_raise

    quiet = os.environ.get("RANK", "0") != "0"
    shown = Console(stderr=True) if as_json else console  # JSON alone on stdout
    loaded, problems = check_config(config_path, overrides)
    print_problems(shown, problems)
    if any(p.is_error for p in problems):
        shown.print("[red]Not evaluating: fix the errors above.[/]")
        return 1
    try:
        if checkpoint:  # before anything loads; and the table names the folder, not `latest`
            checkpoint = str(find_checkpoint(Path(loaded.config.training.output_dir).expanduser(), checkpoint))
        with interrupts_raise():
            result = evaluate(loaded.config, loaded.base_dir, checkpoint, RichReporter(shown, quiet=quiet),
                              check=False)
    except KeyboardInterrupt:
        shown.print("[yellow]Interrupted.[/]")
        return 130
    except ConfigError as exc:
        print_problems(shown, exc.problems)
        return 1
    except (RolloutError, RewardError, DatasetError, FileNotFoundError, ValueError, BackendError, ServerStartError,
            ServerError) as exc:
        shown.print(Panel(escape(str(exc)), title=f"[red]{type(exc).__name__}", border_style="red"))
        return 1
    if as_json:
        print(json.dumps(result.metrics, indent=2))  # in the evaluation's order: pass@1, @2, @4, ...
        return 0
    table = Table(title=f"Held-out evaluation of {escape(checkpoint or loaded.config.model.name_or_path)}")
    table.add_column("metric")
    table.add_column("value", justify="right", style="bold")
    for name, value in result.metrics.items():
        table.add_row(name, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    return 0

"""``grpo-rollout train``: validate, train, and print a final summary; user mistakes end in a message, not a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from ..preflight import check_config
from .render import print_problems

if TYPE_CHECKING:
    from ..config import LoadedConfig


def run_train(console: Console, config_path: Path, overrides: List[str], resume: Optional[str]) -> int:
    """Run the ``train`` command; returns the exit code. Under torchrun only rank 0 prints."""
    import os

    if os.environ.get("RANK", "0") != "0":
        console = Console(quiet=True)
    with console.status("Checking config…"):
        loaded, problems = check_config(config_path, overrides)
    print_problems(console, problems)
    if any(p.is_error for p in problems):
        console.print("[red]Not starting: fix the errors above[/] (grpo-rollout validate-config shows them too).")
        return 1
    return _train_and_summarise(console, loaded, config_path, overrides, resume)


def _train_and_summarise(console: Console, loaded: LoadedConfig, config_path: Path, overrides: List[str],
                         resume: Optional[str]) -> int:
    """Train a checked config (Ctrl-C/SIGTERM and the run's own errors end in a message; train() prints the final
    panel)."""
    import os

    from ..data import DatasetError
    from ..generation.backend import BackendError
    from ..generation.spawn import ServerStartError
    from ..generation.vllm_client import ServerError
    from ..rewards.calling import RewardError
    from ..rollouts.contract import RolloutError
    from ..trainer import train
    from ..distributed import RankError
    from ..trainer.guards import NonFiniteError, StaleWeightsError
    from ..trainer.reporting.progress import RichReporter

    from ..trainer.reporting.resume_hint import resume_command
    from .interrupts import interrupts_raise

    reporter = RichReporter(console)
    reporter.resume_command = resume_command(config_path, overrides, int(os.environ.get("WORLD_SIZE", "1")))
    try:
        with interrupts_raise():  # Ctrl-C and `kill` / a job scheduler: stop at once (save finished steps, stop vLLM)
            train(loaded.config, base_dir=loaded.base_dir, resume=resume, reporter=reporter, check=False)
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/]")
        return 130
    except (RolloutError, RewardError, DatasetError, FileNotFoundError, ValueError, BackendError, ServerStartError,
            ServerError, StaleWeightsError, NonFiniteError, RankError) as exc:
        console.print(Panel(escape(str(exc)), title=f"[red]{type(exc).__name__}", border_style="red"))
        if exc.__cause__ is not None:
            console.print(f"[dim]caused by {type(exc.__cause__).__name__}: {escape(str(exc.__cause__))}[/]")
        return 1
    return 0  # train() printed the final panel

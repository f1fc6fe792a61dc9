"""The ``grpo-rollout`` command: a thin Typer shell over the library (nothing imports this module)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from .. import __version__
from ..config import check_config
from .render import print_problems, print_summary

app = typer.Typer(
    name="grpo-rollout",
    help="GRPO fine-tuning where generation is your own rollout function.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
console = Console()
if not console.is_terminal:  # logs and pipes: don't squeeze tables into 80 columns
    console = Console(width=max(console.width, 140))

CONFIG_ARG = typer.Argument(..., help="YAML config file.", show_default=False)
OVERRIDES_ARG = typer.Argument(None, help="OmegaConf dotlist overrides, e.g. [cyan]sampling.temperature=0.7 "
                                          "training.max_steps=5[/].", show_default=False)


def _version(value: bool) -> None:
    if value:
        console.print(f"grpo-rollout {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    """GRPO fine-tuning where generation is your own rollout function."""


@app.command("validate-config")
def validate_config(config: Path = CONFIG_ARG, overrides: Optional[List[str]] = OVERRIDES_ARG,
                    skip_data: bool = typer.Option(False, "--skip-data", help="Do not load the dataset."),
                    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print problems."),
                    nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="Check for this many training "
                                                        "processes (torchrun --nproc-per-node × nodes).")) -> None:
    """Check a config without loading a model: every problem at once, each with a fix, then the resolved config."""
    with console.status("Checking config…"):
        loaded, problems = check_config(config, overrides or [], load_data=not skip_data, processes=nproc)
    print_problems(console, problems)
    errors = [p for p in problems if p.is_error]
    if loaded.config is not None and not errors and not quiet:
        print_summary(console, loaded.config)
    if errors:
        raise typer.Exit(1)
    console.print(f"[green]✓[/] {config} is valid")


@app.command()
def train(config: Path = CONFIG_ARG, overrides: Optional[List[str]] = OVERRIDES_ARG,
          resume: Optional[str] = typer.Option(None, "--resume", help="Resume from a checkpoint folder, or "
                                               "[cyan]latest[/] for the newest one in training.output_dir."),
          ) -> None:
    """Run GRPO training as the config says (validates it first)."""
    from .train_cmd import run_train

    raise typer.Exit(run_train(console, config, overrides or [], resume))


@app.command()
def serve(config: Optional[Path] = typer.Argument(None, help="Optional YAML config; its model and vllm sections "
                                                             "are used.", show_default=False),
          model: Optional[str] = typer.Option(None, "--model", help="Model folder, hub id or builtin: name "
                                              "(overrides the config)."),
          host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1, or the config's vllm.host)."),
          port: Optional[int] = typer.Option(None, "--port", help="Port (default 8000, or the config's vllm.port)."),
          max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Longest sequence in tokens."),
          api_key: Optional[str] = typer.Option(None, "--api-key", help="Require this bearer token."),
          extra: Optional[List[str]] = typer.Option(None, "--vllm-arg", help="Extra argument passed to vLLM "
                                                    "(repeatable), e.g. --vllm-arg=--seed=0."),
          ) -> None:
    """Run a vLLM server that generation and weight updates go through."""
    from .serve_cmd import run_serve

    raise typer.Exit(run_serve(console, config, model=model, host=host, port=port, max_model_len=max_model_len,
                               api_key=api_key, extra=extra or []))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

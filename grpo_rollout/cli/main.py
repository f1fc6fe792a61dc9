"""The ``grpo-rollout`` command: a thin Typer shell over the library (nothing imports this module)."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from .. import __version__
from ..config.loading import LoadedConfig
from ..config.values import DTYPES
from ..preflight import check_config
from .render import print_problems, print_summary

def _flag_without_type(original):
    """Typer 0.29's rich help labels every flag ``<bool>`` (``--version <bool>``, ``--help <bool>``), as if it took a
    value; flags take none, so they get no type label."""
    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and not getattr(self, "secondary_opts", None) \
            else original(self, ctx)
    return display_type_rich


if hasattr(typer.core, "TyperOption") and hasattr(typer.core.TyperOption, "display_type_rich"):
    typer.core.TyperOption.display_type_rich = _flag_without_type(typer.core.TyperOption.display_type_rich)

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
                                                        "processes (torchrun --nproc-per-node × nodes)."),
                    dry_run: bool = typer.Option(False, "--dry-run", help="Then load the model and call the rollout "
                                                 "and every reward on 2 prompts (short completions): a broken rollout "
                                                 "or reward shows up in seconds.")) -> None:
    """Check a config without loading a model: every problem at once, each with a fix, then the resolved config.
    With [cyan]--dry-run[/], also run the rollout and rewards once on two prompts."""
    with console.status("Checking config…"):
        loaded, problems = check_config(config, overrides or [], load_data=not skip_data, processes=nproc)
    print_problems(console, problems)
    errors = [p for p in problems if p.is_error]
    if loaded.config is not None and not quiet:
        if errors:
            console.print("Resolved config (a value rejected while loading shows its default):")
        print_summary(console, loaded.config, None if errors or skip_data else _rows(loaded))
    if errors:
        if loaded.config is not None and not quiet:  # the table is above the resolved config: say where to look
            console.print(f"[red]✗[/] {config} has {len(errors)} error(s): see the table of problems above")
        raise typer.Exit(1)
    console.print(f"[green]✓[/] {config} is valid")
    if dry_run:
        from .dry_run_cmd import run_dry_run

        raise typer.Exit(run_dry_run(console, loaded.config, loaded.base_dir))


def _rows(loaded: LoadedConfig) -> Optional[int]:
    """The training dataset's rows, for a length in ``training.num_epochs`` (``None`` without; the check loaded it)."""
    if loaded.config.training.num_epochs is None:
        return None
    from ..data import load_section

    return len(load_section(loaded.config.data, loaded.base_dir))


@app.command()
def schema(output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the schema to this file "
                                                 "instead of printing it.", show_default=False),
           markdown: bool = typer.Option(False, "--markdown", help="The config reference as Markdown tables instead "
                                         "of the JSON Schema; with -o docs/config.md, only its reference block is "
                                         "replaced.")) -> None:
    """Print the config's JSON Schema (draft 2020-12) for an editor's YAML language server: completion, defaults and
    misspelled keys while writing a config (see docs/config.md)."""
    import json

    from ..config.json_schema import config_json_schema
    from .reference import config_reference, spliced_into

    text = config_reference() if markdown else json.dumps(config_json_schema(), indent=2, ensure_ascii=False) + "\n"
    if markdown and output is not None and output.is_file():  # docs/config.md: only its reference block is replaced
        text = spliced_into(output.read_text(encoding="utf-8"))
    if output is None:
        typer.echo(text, nl=False)  # plain JSON on stdout, no markup, so it can be redirected
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        typer.echo(f"cannot write {output}: {exc.strerror or exc}; pass -o a path in an existing, writable folder",
                   err=True)
        raise typer.Exit(1)
    typer.echo(f"wrote {output}", err=True)


@app.command()
def train(config: Path = CONFIG_ARG, overrides: Optional[List[str]] = OVERRIDES_ARG,
          resume: Optional[str] = typer.Option(None, "--resume", help="Resume from a checkpoint folder, or "
                                               "[cyan]latest[/] for the newest one in training.output_dir."),
          ) -> None:
    """Run GRPO training as the config says (validates it first)."""
    from .train_cmd import run_train

    raise typer.Exit(run_train(console, config, overrides or [], resume))


@app.command(name="eval")
def eval_command(config: Path = CONFIG_ARG, overrides: Optional[List[str]] = OVERRIDES_ARG,
                 checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="A checkpoint folder (full "
                                                          "model or LoRA adapter), or [cyan]latest[/] in "
                                                          "training.output_dir; default: model.name_or_path."),
                 as_json: bool = typer.Option(False, "--json", help="Print only the metrics, as JSON."),
                 ) -> None:
    """Evaluate a model or checkpoint on data.eval as the config's evaluation section says: pass@k, rewards,
    lengths (the same numbers a run's evaluation logs under eval/)."""
    from .eval_cmd import run_eval

    raise typer.Exit(run_eval(console, config, overrides or [], checkpoint, as_json))


#: ``serve --dtype``'s choices: the trainer's dtypes (float16 is refused there, so it is not served either)
ServeDtype = Enum("ServeDtype", {d: d for d in DTYPES if d != "float16"}, type=str)


@app.command()
def serve(config: Optional[Path] = typer.Argument(None, help="Optional YAML config; its model and vllm sections "
                                                             "are used.", show_default=False),
          model: Optional[str] = typer.Option(None, "--model", help="Model folder, hub id or builtin: name "
                                              "(overrides the config)."),
          host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1, or the config's vllm.host)."),
          port: Optional[int] = typer.Option(None, "--port", min=0, max=65535,
                                             help="Port (default 8000, or the config's vllm.port)."),
          max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=1,
                                                      help="Longest sequence in tokens."),
          api_key: Optional[str] = typer.Option(None, "--api-key", help="Require this bearer token on every route "
                                                "but /health (default: the config's vllm.api_key, or VLLM_API_KEY)."),
          trusted_network: bool = typer.Option(False, "--trusted-network", help="Without a key: let anyone who "
                                               "reaches the port update the weights (refused otherwise; also the "
                                               "config's vllm.trusted_network)."),
          dtype: Optional[ServeDtype] = typer.Option(None, "--dtype", help="The dtype served (default float32, or "
                                                     "the config's model.dtype); the trainer's model.dtype must "
                                                     "match it."),
          extra: Optional[List[str]] = typer.Option(None, "--vllm-arg", help="Extra argument passed to vLLM "
                                                    "(repeatable), e.g. --vllm-arg=--seed=0."),
          ) -> None:
    """Run a vLLM server that generation and weight updates go through."""
    from .serve_cmd import run_serve

    raise typer.Exit(run_serve(console, config, model=model, host=host, port=port, max_model_len=max_model_len,
                               api_key=api_key, extra=extra or [], dtype=dtype.value if dtype else None,
                               trusted_network=trusted_network))


@app.command()
def tasks(task: Optional[str] = typer.Argument(None, help="A task: show its settings (data.task_kwargs) and its "
                                              "first row.", show_default=False)) -> None:
    """List reasoning-gym's tasks ([cyan]data.train: reasoning_gym:<task>[/]), or show one task's settings and its
    first row as the model sees it."""
    from .tasks_cmd import run_tasks

    raise typer.Exit(run_tasks(console, task))


@app.command()
def inspect(run_dir: Path = typer.Argument(..., help="A run folder (training.output_dir).", show_default=False),
            step: Optional[int] = typer.Option(None, "--step", help="Step to show (default: the last saved one)."),
            sample: int = typer.Option(0, "--sample", min=0, help="Completion of that step (0-based)."),
            segment: Optional[int] = typer.Option(None, "--segment", min=0, help="An earlier sequence of that "
                                                  "completion's episode (an agent's context edit), 0-based.",
                                                  show_default=False),
            html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML page here instead.",
                                                show_default=False),
            ) -> None:
    """Show one completion token by token: the prompt the model saw, which tokens were trained, their sampler and
    trainer log-probs, advantage and importance weight (needs [cyan]training.save_rollouts[/])."""
    from ..views.inspect import console_renderables, load_sample, render_html

    try:
        shown = load_sample(run_dir, step, sample, segment=segment)
    except (FileNotFoundError, IndexError) as exc:
        console.print(f"[red]✗[/] {exc}", soft_wrap=True)
        raise typer.Exit(1)
    if html is not None:
        html.write_text(render_html(shown))
        console.print(f"[green]✓[/] wrote {html}", soft_wrap=True)
        return
    for renderable in console_renderables(shown):
        console.print(renderable)


@app.command()
def plot(run_dirs: List[Path] = typer.Argument(..., metavar="RUN_DIR", show_default=False,
                                               help="Run folders (training.output_dir), each with a metrics.jsonl; "
                                                    "several are overlaid, one colour each."),
         output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                               help="File to write (.png, .pdf, .svg); default RUN_DIR/plot.png for "
                                                    "one run, ./runs.png for several."),
         metrics: Optional[str] = typer.Option(None, "--metrics", metavar="KEY,KEY...",
                                               help="Comma-separated metric keys to plot instead of the default "
                                                    "panels, one panel each, e.g. "
                                                    "[cyan]reward,grad_norm,time/step[/]."),
         ) -> None:
    """Plot runs' metrics: reward, held-out evaluation, completion length, KL, clipping, sampler drift, tools, time
    per step."""
    from rich.markup import escape

    from ..views.plot import PlotError, default_output_path, plot_runs, save_figure

    try:
        figure = plot_runs(run_dirs, metrics=metrics.split(",") if metrics is not None else None)
        written = save_figure(figure, output if output is not None else default_output_path(run_dirs))
    except PlotError as e:
        console.print(f"[red]✗ {escape(str(e))}[/]", soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"[green]✓[/] wrote {escape(str(written))}", soft_wrap=True)


#: The exit status of a command whose reader stopped reading (``grpo-rollout tasks | head -3``): a shell tool's, ended
#: by SIGPIPE (128 + 13), not the 1 of a failed command that rich and click give after a broken pipe.
OUTPUT_CUT = 141


def _output_cut(self: Console) -> None:
    """rich's ``Console.on_broken_pipe`` (stdout pointed at /dev/null, so nothing more is written or reported, then
    exit) ending with :data:`OUTPUT_CUT` instead of 1."""
    self.quiet = True
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(OUTPUT_CUT)


def main() -> None:
    """Console-script entry point. A command that failed or was interrupted (exit status 130) and cleaned up ends
    within seconds, even when user code is still stuck in a thread the interpreter's exit would wait for, naming
    where (:mod:`.interrupts`). A command
    whose output is cut short (``| head``) ends quietly with :data:`OUTPUT_CUT`, from a rich console's write or from
    click's (help, ``typer.echo``), which silences ``sys.stdout`` and exits 1."""
    Console.on_broken_pipe = _output_cut  # only in the command: a notebook's console keeps rich's own
    try:
        app()
    except SystemExit as exc:
        code = OUTPUT_CUT if exc.code == 1 and _reader_gone() else exc.code
        if isinstance(code, int) and code != 0:  # failed or interrupted: user code stuck in a thread must not hold it
            from .interrupts import exit_leaving_stuck_threads

            exit_leaving_stuck_threads(code)
        if code != exc.code:
            raise SystemExit(code) from None
        raise


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (its writing end polls as an error); ``False`` where that
    cannot be told (no ``select.poll``: Windows)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


if __name__ == "__main__":
    main()

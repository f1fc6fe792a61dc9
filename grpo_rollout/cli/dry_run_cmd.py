"""``validate-config --dry-run``: print what the rollout and rewards did on two prompts (two completions each), or why
they failed; and warn when every prompt's completions scored alike (no learning signal)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from ..config import Config
from ..runs import names as rn


def run_dry_run(console: Console, config: Config, base_dir: Path) -> int:
    """Run :func:`grpo_rollout.trainer.dry_run.dry_run` and print its sample; returns the exit code (1 when the
    rollout or a reward failed)."""
    from ..generation.backend import BackendError
    from ..generation.vllm_client import ServerError
    from ..rewards.calling import RewardError
    from ..rollouts.contract import RolloutError
    from ..trainer.dry_run import dry_run
    from ..trainer.update.no_signal import no_signal_note
    from .interrupts import interrupts_raise

    say = lambda text: console.print(f"[dim]•[/] {escape(text)}", soft_wrap=True)  # noqa: E731
    try:
        with interrupts_raise(), console.status("Dry run: loading the model, then calling the rollout and rewards on "
                                                "2 prompts × 2 completions (each environment call may take "
                                                f"rollout.env_timeout_s = {config.rollout.env_timeout_s:g} s)…"):
            result = dry_run(config, base_dir, say=say)
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/]")
        return 130
    except (RolloutError, RewardError, BackendError, ServerError) as exc:
        console.print(Panel(escape(str(exc)), title=f"[red]Dry run failed: {type(exc).__name__}", border_style="red"))
        if exc.__cause__ is not None:
            console.print(f"[dim]caused by {type(exc.__cause__).__name__}: {escape(str(exc.__cause__))}[/]")
        return 1
    s, t = result.sample, result.seconds
    rewards = ", ".join(f"{k} = {v:.3f}" for k, v in s.rewards.items())
    shown_apart = (rn.END_DETAIL_EXTRA, rn.FIRST_PROMPT_EXTRA)  # on their own lines (first_prompt: as the prompt)
    extras = ", ".join(f"{k} = {escape(str(v))[:80]}" for k, v in s.extras.items() if k not in shown_apart)
    lines = [f"[bold]prompt (as the model saw it):[/]\n{escape(result.prompt_text)}",
             f"[bold]completion[/] ({result.completion_tokens} tokens, {result.trained_tokens} trained):\n"
             f"{escape(s.completion)}",
             f"[bold]reward:[/] {s.reward:.3f}  ({rewards})"]
    if result.earlier_sequences:  # an agent's context edit: the episode's sequences before this one, also trained
        seqs = ", ".join(f"{n} tokens ({k} trained)" for n, k in result.earlier_sequences)
        lines.insert(2, f"[bold]earlier sequences of this episode[/] (a context edit; trained too): {seqs}")
    if extras:
        lines.append(f"[bold]extras:[/] {extras}")
    if s.extras.get(rn.END_REASON_EXTRA):
        cap = result.max_completion_length
        note = (f" [dim](the dry run caps max_completion_length at {cap}; training uses "
                f"{result.configured_max_completion_length})[/]"
                if cap < result.configured_max_completion_length else "")
        lines.append(f"[bold]episode ended:[/] {escape(str(s.extras[rn.END_REASON_EXTRA]))}: "
                     f"{escape(str(s.extras.get(rn.END_DETAIL_EXTRA, '')))}{note}")
    capped = (f" (sampling.num_generations {result.configured_num_generations} capped at {result.num_generations})"
              if result.num_generations < result.configured_num_generations else "")
    lines.append(f"[dim]{result.num_prompts} prompts → {result.num_completions} completions{capped} via "
                 f"{result.backend}; model load {t['load']:.1f} s, rollout {t['rollout']:.1f} s, rewards "
                 f"{t['rewards']:.2f} s; rewards of all completions: {', '.join(f'{r:.2f}' for r in result.rewards)}[/]")
    console.print(Panel("\n\n".join(lines), title="[bold green]Dry run: rollout and rewards work", expand=False))
    note = no_signal_note(result.rewards, result.num_generations, result.configured_num_generations)
    if note is not None:  # they work, yet no step would learn: said now, not after minutes of training
        console.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
    return 0

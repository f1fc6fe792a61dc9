"""What the progress reporter prints per logged step: the row of numbers, the samples, plain lines off a terminal."""

from rich.console import Console

from grpo_rollout.trainer.reporting.progress import RichReporter, pick_samples

SAMPLES = [{"prompt": "Name one thing that is usually red.", "completion": "A fire\ntruck.", "reward": 1.0,
            "rewards/correct": 1.0, "advantage": 0.866, "turns": 2, "tool_calls": 1},
           {"prompt": "Name one thing that is usually red.", "completion": "Grass.", "reward": 0.0,
            "rewards/correct": 0.0, "advantage": -0.866, "turns": 1, "tool_calls": 0}]


def _printed(metrics, samples=None, terminal=False) -> str:
    console = Console(record=True, width=200, force_terminal=terminal)
    reporter = RichReporter(console=console)
    reporter.start(total_steps=3, first_step=0)
    reporter.step(1, metrics, log=True, samples=samples)
    reporter.stop()
    return console.export_text()


def test_row_shows_rewards_turns_and_tool_use():
    text = _printed({"reward": 0.75, "rewards/correct/mean": 0.5, "extras/num_turns": 1.5, "tools/calls": 6.0,
                     "tools/success_rate": 0.5, "sampler/logprob_abs_diff": 2e-6})
    assert "0.750" in text and "correct=0.500" in text
    assert "turns=1.50" in text and "tool calls=6 ok=50%" in text and "sampler-trainer=2.00e-06" in text


def test_single_turn_row_has_no_tool_columns():
    text = _printed({"reward": 0.25, "rewards/correct/mean": 0.25})
    assert "correct=0.250" in text and "turns=" not in text and "tool calls" not in text


def test_tool_calls_without_any_call_show_no_rate():
    assert "tool calls=0 ok=-" in _printed({"reward": 0.0, "tools/calls": 0.0})


def test_plain_output_has_one_line_per_sample_and_the_clock():
    text = _printed({"reward": 0.5}, SAMPLES)
    lines = text.splitlines()
    assert lines[0] == "Training steps 1-3"
    assert "[1/3 0:00:00 ETA 0:00:00]" in lines[2]  # the row carries elapsed time and ETA
    sample_lines = [line for line in lines if "sample:" in line]
    assert len(sample_lines) == 2
    assert "reward=1.000  correct=1.000  advantage=+0.866  turns=2  tool_calls=1" in sample_lines[0]
    assert "completion: A fire ⏎ truck." in sample_lines[0]  # one line per sample, newlines shown
    assert "\x1b[" not in text and "━" not in text  # no colours, no live bar


def test_terminal_output_shows_a_sample_table():
    text = _printed({"reward": 0.5}, SAMPLES, terminal=True)
    header = next(line for line in text.splitlines() if "completion" in line and "adv" in line)
    assert header[header.index("prompt"):].split() == ["prompt", "completion", "reward", "correct", "adv", "turns", "tool", "calls"]
    row = next(line for line in text.splitlines() if "Grass." in line)
    assert row.split()[-5:] == ["0.000", "0.000", "-0.866", "1", "0"]


def test_pick_samples_takes_best_and_worst_of_each_group():
    samples = [{"reward": r, "i": i} for i, r in enumerate([0.2, 0.9, 0.1, 0.5, 1.0, 0.0, 0.3, 0.4])]
    assert [s["i"] for s in pick_samples(samples, 4, 3)] == [1, 2, 4]
    assert pick_samples(samples, 4, 0) == []
    assert [s["i"] for s in pick_samples(samples[:1], 1, 2)] == [0]


def test_a_long_completion_leaves_the_sample_tables_numbers_whole():
    """Issue 28: at 150 columns (a notebook's display) a long completion squeezed every number column to `0.…`."""
    long = [{**SAMPLES[0], "completion": "word " * 80, "rewards/length_penalty": -1.0}]
    for width in (100, 150):
        console = Console(record=True, width=width, force_terminal=True)
        RichReporter(console)._samples(console, long)
        row = next(line for line in console.export_text().splitlines() if "word" in line)
        assert len(row) <= width and row.split()[-6:] == ["1.000", "1.000", "-1.000", "+0.866", "2", "1"]


# -- in a Jupyter notebook: one display, updated in place (tests/integration/test_notebook.py runs a real kernel) --------------

class _Handle:
    """Stands for IPython's DisplayHandle: records what was shown first and each update."""

    def __init__(self):
        self.shown = []

    def display(self, obj):
        self.shown.append(("display", obj))

    def update(self, obj):
        self.shown.append(("update", obj))


def _notebook_reporter(monkeypatch):
    import IPython.display

    handle = _Handle()
    monkeypatch.setattr(IPython.display, "DisplayHandle", lambda: handle)
    return RichReporter(Console(force_jupyter=True)), handle


def test_in_a_notebook_every_line_goes_to_one_display_updated_in_place(monkeypatch):
    reporter, handle = _notebook_reporter(monkeypatch)
    assert reporter.notebook is not None and not reporter.plain
    reporter.message("Loading model")
    with reporter.status("Held-out evaluation before step 1"):
        assert "⋯ Held-out evaluation before step 1" in handle.shown[-1][1].text
    reporter.start(total_steps=2, first_step=0)
    for step in (1, 2):
        reporter.step(step, {"reward": 0.25 * step, "time/training": 1.0}, log=True, samples=SAMPLES)
    reporter.stop()
    reporter.summary("[bold]Training finished[/]")
    assert [kind for kind, _ in handle.shown[:2]] == ["display", "update"] and \
        {kind for kind, _ in handle.shown[1:]} == {"update"}
    assert len(handle.shown) == 8  # message, status on and off, start, one per step (batched), stop, summary
    text = handle.shown[-1][1].text
    lines = text.splitlines()
    assert lines[0] == "• Loading model" and "⋯" not in text  # the status line went away
    header = next(line for line in lines if line.split()[:2] == ["step", "reward"])
    assert header.rstrip().endswith("train s")  # one line: laid out at 150 columns, not rich's 115
    assert text.index("2/2 steps") < text.index("Training finished") == len(text) - len("Training finished\n")
    assert handle.shown[-1][1]._repr_mimebundle_()["text/html"].startswith('<pre style="white-space:pre;')


def test_a_long_runs_display_keeps_its_start_and_end(monkeypatch):
    from grpo_rollout.trainer.reporting import notebook_display

    # a smaller head and tail: each message re-renders the display (the real 60 + 400 took 14 s here)
    monkeypatch.setattr(notebook_display, "HEAD", 6)
    monkeypatch.setattr(notebook_display, "TAIL", 20)
    reporter, handle = _notebook_reporter(monkeypatch)
    total = notebook_display.HEAD + notebook_display.TAIL + 25
    for i in range(total):
        reporter.message(f"line {i}")
    lines = handle.shown[-1][1].text.splitlines()
    assert lines[0] == "• line 0" and lines[-1] == f"• line {total - 1}"
    assert len(lines) == notebook_display.HEAD + notebook_display.TAIL + 1
    assert lines[notebook_display.HEAD].startswith("… 25 printed item(s) left out here")

"""examples/notebook/train.ipynb run as a user runs it, in a Jupyter kernel (nbclient), with a tiny random model and 2
steps (issue 28: in Jupyter the progress of 2 steps was 18 separate outputs with a wrapped header and an ipywidgets
warning, train() printed no summary, and result.history rows had no step)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytestmark = pytest.mark.model

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook" / "train.ipynb"


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> List[Any]:
    """The notebook's cells after running it in a fresh folder, its parameters replaced (papermill's convention: a
    cell after the one tagged ``parameters``)."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("notebook")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [at] = [i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", [])]
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(f'MODEL = {str(tiny_model)!r}\nSTEPS = 2\nOUTPUT_DIR = "out"'))
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        nbformat.write(nb, folder / "executed.ipynb")  # to read when a test fails
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _cell(cells: List[Any], source_start: str) -> Any:
    [cell] = [c for c in cells if c.source.startswith(source_start)]
    return cell


def _text(output: Dict[str, Any]) -> str:
    return output.get("text") or output.get("data", {}).get("text/plain", "")


def test_training_shows_one_display_updated_in_place_ending_in_the_summary(cells):
    [shown] = _cell(cells, "result = train(").outputs  # one output: no separate prints, no stderr, no warning
    assert shown.output_type == "display_data" and {"text/html", "text/plain"} <= set(shown.data)
    text = shown.data["text/plain"]
    lines = text.splitlines()
    assert any(line.startswith("• Loading ") for line in lines)
    assert "Held-out evaluation before step 1: " in text and "Held-out evaluation after step 2: " in text
    [header] = [line for line in lines if line.split()[:2] == ["step", "reward"]]
    assert header.rstrip().endswith("train s")  # not wrapped at rich's 115 notebook columns
    assert [line.split()[0] for line in lines if re.match(r"\s+\d+\s+-?\d\.\d{3}\s", line)] == ["1", "2"]
    assert re.search(r"GRPO .* 2/2 steps", text)
    assert "Training finished" in text and "steps: 2" in text
    assert re.search(r"held-out pass@1 .*\(step 0 → 2\)", text)
    assert text.index("2/2 steps") < text.index("Training finished")  # the bar stays above the panel
    assert "white-space:pre" in shown.data["text/html"]  # long lines scroll sideways, never wrap


def test_no_warning_or_error_in_any_cell(cells):
    for cell in cells:
        for output in cell.outputs:
            assert output.output_type != "error", output
            assert output.get("name") != "stderr", (cell.source, output)
            assert "ipywidgets" not in _text(output) and "IProgress" not in _text(output), output


def test_the_result_its_summary_and_history_rows_with_their_step(cells):
    [shown] = [c for c in cells if c.source == "result"][0].outputs
    assert shown.data["text/plain"] == ("TrainResult(output_dir=PosixPath('out'), "
                                        "checkpoint=PosixPath('out/checkpoint-2'), steps=2)")
    [summary] = _cell(cells, "print(result.summary)").outputs
    assert summary.text.startswith("Training finished\nsteps: 2\nreward (mean of first step): ")
    assert "model saved to: out/checkpoint-2" in summary.text
    [table] = _cell(cells, "import pandas").outputs
    assert re.search(r"^step\s*$", table.data["text/plain"], re.M)  # the rows' index is their step
    [evaluations] = _cell(cells, "for step, metrics in result.evaluations").outputs
    assert re.fullmatch(r"after step 0: held-out pass@1 \d\.\d{3} on 16 prompts\n"
                        r"after step 2: held-out pass@1 \d\.\d{3} on 16 prompts\n", evaluations.text)


def test_a_resumed_runs_rows_continue_the_step_count(cells):
    [shown] = _cell(cells, "loaded_more, _ = check_config(").outputs
    text = shown.data["text/plain"]
    assert "Resuming from out/checkpoint-2" in text and "4/4 steps" in text
    assert "reward (mean of first step of this session, from step 3)" in text
    [steps] = _cell(cells, '[row["step"] for row in result.history]').outputs
    assert steps.data["text/plain"] == "([1, 2], [3, 4])"


def test_the_plot_and_the_trained_model(cells):
    [figure] = _cell(cells, "from IPython.display import Image").outputs
    assert "image/png" in figure.data
    [answer] = _cell(cells, "from transformers import").outputs
    assert answer.output_type == "stream" and answer.name == "stdout"

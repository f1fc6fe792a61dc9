"""Running inside a Jupyter kernel: what grpo-rollout does differently there.

The run's console output becomes one display updated in place (:mod:`grpo_rollout.trainer.reporting.notebook_display`), and
``tqdm.auto`` is imported once without its warning that ipywidgets is missing: transformers and datasets import it
when grpo-rollout first loads a dataset or model, and in a kernel without ipywidgets it warns "IProgress not found.
Please update jupyter and ipywidgets" into the cell. grpo-rollout's own output needs no widgets, and tqdm's bars
(downloads) print as text without them; install ipywidgets to have them drawn as widgets instead.
"""

from __future__ import annotations

import sys
import warnings


def in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (the test rich's ``Console.is_jupyter`` makes, without rich)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell" or "google.colab" in sys.modules


def import_tqdm_quietly() -> None:
    """Import ``tqdm.auto`` without its ipywidgets warning (see the module docstring); nothing if it is imported."""
    if "tqdm.auto" in sys.modules:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        try:
            import tqdm.auto  # noqa: F401
        except ImportError:
            pass

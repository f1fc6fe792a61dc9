"""A run's console output in a Jupyter notebook: one display, updated in place.

In a terminal a run shows rich's live bar with the logged rows scrolling above it. In a notebook rich's live bar
needs ipywidgets (without them it warns and shows nothing), and every ``console.print`` becomes an output of its own:
a 2-step run left 18 outputs, its header wrapped at rich's 115 notebook columns. Here everything the run prints
(status lines, the header and each logged row, the samples, a spinner's text, the bar and the final panel) is laid
out by rich at :data:`MIN_WIDTH` columns or more, rendered to HTML and plain text as rich renders for Jupyter, and
shown in one IPython display that each change replaces (``DisplayHandle.update``). The saved notebook keeps that one
output with the run's last state, readable without a kernel; long lines scroll sideways instead of wrapping.

A long run's output keeps its first :data:`HEAD` and last :data:`TAIL` printed items, with a line saying how many
were left out between them (every step's numbers are in ``metrics.jsonl`` and ``result.history``).
"""

from __future__ import annotations

import io
from collections import deque
from contextlib import contextmanager
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

from rich.console import Console
from rich.markup import escape

#: columns rich lays the output out in (at least): a logged row is 116 characters wide
MIN_WIDTH = 150
#: printed items kept from the start of the run and from its end
HEAD, TAIL = 60, 400
#: how rich's own Jupyter output wraps its HTML (rich.jupyter): no wrapping, sideways scrolling
HTML_FORMAT = ('<pre style="white-space:pre;overflow-x:auto;line-height:normal;font-family:Menlo,\'DejaVu Sans '
               'Mono\',consolas,\'Courier New\',monospace">{code}</pre>')

_Item = Tuple[Tuple[Any, ...], Dict[str, Any]]


class Rendered:
    """What the notebook shows: the output as HTML and as plain text (``text/plain``, for viewers without HTML)."""

    def __init__(self, html: str, text: str):
        self.html, self.text = html, text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Dict[str, str]:
        return {"text/plain": self.text, "text/html": self.html}


class NotebookDisplay:
    """Collects what a run prints and shows it in one notebook display (see the module docstring).

    Used like a rich console by :class:`~.progress.RichReporter`: :meth:`print` takes ``Console.print``'s arguments.
    ``bar`` is a rich ``Progress`` (never started: it is rendered here, below the printed items). Build it with
    :meth:`open`, which gives ``None`` where IPython is not installed.
    """

    def __init__(self, width: int = MIN_WIDTH):
        from IPython.display import DisplayHandle

        self.width = max(width, MIN_WIDTH)
        self.head: List[_Item] = []
        self.tail: Deque[_Item] = deque(maxlen=TAIL)
        self.left_out = 0
        self.bar: Any = None
        self.status_text: Optional[str] = None
        self._handle = DisplayHandle()
        self._shown = False
        self._held = 0

    @classmethod
    def open(cls, width: int) -> Optional["NotebookDisplay"]:
        """A display for a notebook console ``width`` columns wide; ``None`` without IPython."""
        try:
            return cls(width)
        except ImportError:
            return None

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Add ``objects`` as ``Console.print(*objects, **kwargs)`` would print them, and show the result."""
        if len(self.head) < HEAD:
            self.head.append((objects, kwargs))
        else:
            if len(self.tail) == self.tail.maxlen:
                self.left_out += 1
            self.tail.append((objects, kwargs))
        self.refresh()

    @contextmanager
    def status(self, text: str) -> Iterator[None]:
        """Show ``text`` as the last line while the ``with`` block runs (a terminal shows a spinner)."""
        self.status_text = text
        self.refresh()
        try:
            yield
        finally:
            self.status_text = None
            self.refresh()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Show the changes made inside the ``with`` block once, at its end."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            self.refresh()

    def refresh(self) -> None:
        """Replace the display with the current output (nothing while :meth:`batch` holds it)."""
        if self._held:
            return
        rendered = self.render()
        if self._shown:
            self._handle.update(rendered)
        else:
            self._handle.display(rendered)
            self._shown = True

    def render(self) -> Rendered:
        """The output so far (printed items, the bar, the status line) as rich renders it."""
        console = Console(file=io.StringIO(), record=True, width=self.width, force_terminal=True,
                          force_jupyter=False, color_system="truecolor")
        for objects, kwargs in self.head:
            console.print(*objects, **kwargs)
        if self.left_out:
            console.print(f"[dim]… {self.left_out} printed item(s) left out here (every step: metrics.jsonl, "
                          "result.history)[/]")
        for objects, kwargs in self.tail:
            console.print(*objects, **kwargs)
        if self.bar is not None:
            console.print(self.bar)
        if self.status_text:
            console.print(f"[dim]⋯ {escape(self.status_text)}[/]")
        html = console.export_html(inline_styles=True, code_format=HTML_FORMAT, clear=False)
        return Rendered(html, console.export_text())


"""Live build progress on the terminal (rich): step headers stay, output scrolls in a status line.

On failure the failing step and the tail of its output are printed before the CLI's one-line
error, so the reason is on screen without scrolling through pip or patch output.
"""

from __future__ import annotations

import re
from collections import deque
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from opsctl.engine.dockerpy import BuildEvent

TAIL_LINES = 25
STEP_WIDTH = 120  # a RUN step's header is its whole command; one line of it is enough
LINE_WIDTH = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class BuildView:
    """`with BuildView(console) as view: build(..., on_event=view.on_event)`."""

    def __init__(self, console: Console, title: str) -> None:
        self._console = console
        self._title = title
        self._status: Status | None = None
        self._step: str | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)

    def __enter__(self) -> BuildView:
        self._status = self._console.status(escape(self._title))
        self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.stop()
        if exc is not None and self._tail:
            step = _shorten(self._step or "(none)", STEP_WIDTH)
            self._console.print(f"[bold red]failing step:[/] {escape(step)}",
                                highlight=False, soft_wrap=True)
            for line in self._tail:
                self._console.print(f"  [dim]|[/] {escape(line)}", highlight=False, soft_wrap=True)

    def on_event(self, event: BuildEvent) -> None:
        if event.step != self._step:
            self._step = event.step
            self._tail.clear()
        for line in _ANSI.sub("", event.text).splitlines():
            self._line(line.rstrip(), event)

    def _line(self, text: str, event: BuildEvent) -> None:
        if text.startswith("Step "):
            self._console.print(escape(_shorten(text, STEP_WIDTH)), style="bold", highlight=False,
                                soft_wrap=True)
        elif event.step is None or event.step in {"verify", "lock"} and not event.error:
            # opsctl's own lines (skip notices, verification results, re-locking) always show.
            self._console.print(escape(text), highlight=False, soft_wrap=True)
        elif text.strip():
            self._tail.append(_shorten(text, LINE_WIDTH))
            if self._status is not None:
                self._status.update(f"{escape(self._title)} [dim]{escape(text[-100:])}[/]")


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."

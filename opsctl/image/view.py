"""Everything the image room prints (rich): live build progress and each command's result.

Build progress: step headers stay, output scrolls in a status line. On failure the failing step
and the tail of its output are printed before the CLI's one-line error, so the reason is on
screen without scrolling through pip or patch output.

Results: what a script needs (the image tag, the patch report) goes to stdout, what a person
reads alongside the progress (re-locking, "up to date") to stderr.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType

from rich.console import Console
from rich.status import Status
from rich.text import Text

from opsctl.argspec.extract import Extraction
from opsctl.argspec.stack import StackRecord
from opsctl.engine.api import BuildEvent
from opsctl.image.basecheck import BaseNote
from opsctl.image.baseimage import BaseImageResult
from opsctl.image.build import ANSI_ESCAPE, BuildResult, shorten
from opsctl.image.patchset import CheckReport
from opsctl.image.plan import BuildPlan
from opsctl.image.registry import PushResult, tag_of

TAIL_LINES = 25
STEP_WIDTH = 120  # a RUN step's header is its whole command; one line of it is enough
LINE_WIDTH = 300


class BuildView:
    """`with BuildView(console) as view: build(..., on_event=view.on_event)`."""

    def __init__(self, console: Console, title: str) -> None:
        self._console = console
        self._title = title
        self._status: Status | None = None
        self._step: str | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)

    def __enter__(self) -> BuildView:
        self._status = self._console.status(Text(self._title))
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
            step = shorten(self._step or "(none)", STEP_WIDTH)
            self._console.print(Text.assemble(("failing step:", "bold red"), f" {step}"),
                                highlight=False, soft_wrap=True)
            for line in self._tail:
                self._console.print(Text.assemble("  ", ("|", "dim"), f" {line}"),
                                    highlight=False, soft_wrap=True)

    def on_event(self, event: BuildEvent) -> None:
        if event.step != self._step:
            self._step = event.step
            self._tail.clear()
        for line in ANSI_ESCAPE.sub("", event.text).splitlines():
            self._line(line.rstrip(), event)

    def _line(self, text: str, event: BuildEvent) -> None:
        if text.startswith("Step "):
            self._console.print(Text(shorten(text, STEP_WIDTH), style="bold"), highlight=False,
                                soft_wrap=True)
        elif event.step is None or event.step in {"verify", "lock"} and not event.error:
            # opsctl's own lines (skip notices, verification results, re-locking) always show.
            self._console.print(Text(text), highlight=False, soft_wrap=True)
        elif text.strip():
            self._tail.append(shorten(text, LINE_WIDTH))
            if self._status is not None:
                self._status.update(Text.assemble(self._title, " ", (text[-100:], "dim")))


def build_title(plan: BuildPlan) -> str:
    return f"building {plan.repository} for sglang {plan.sglang_version} ({plan.profile})"


def show_plans(console: Console, plans: list[BuildPlan], push_to: str | None = None) -> None:
    """Each image's plan, a blank line between images."""
    for index, plan in enumerate(plans):
        if index:
            console.print()
        rows = plan.describe()
        if push_to:
            tag = plan.tag(plan.locked_digest)
            rows.append(("push", f"{push_to}:{tag_of(tag)}" if tag else
                         f"{push_to}:<its tag, once the base is locked>"))
        for name, value in rows:
            console.print(Text.assemble((f"{name:>12}", "bold"), f"  {value}"), highlight=False,
                          soft_wrap=True)


def show_build(out: Console, err: Console, plan: BuildPlan, result: BuildResult) -> None:
    if result.relocked:
        err.print(Text.assemble(("re-locked", "bold yellow"), f" {result.base.ref} -> "
                                f"{result.base.digest} in {plan.lock_path}"),
                  highlight=False, soft_wrap=True)
    done = "verified again" if result.reverified else "built and verified"
    state = "up to date" if result.skipped else f"{done} ({len(result.checks)} checks)"
    err.print(Text.assemble((f"{state}:", "green"), f" {result.tag}"), highlight=False,
              soft_wrap=True)
    out.print(result.tag, highlight=False, soft_wrap=True, markup=False)


def show_push(out: Console, err: Console, result: PushResult) -> None:
    """The digest reference on stdout (what a script or `opsctl render` needs), after the tag."""
    err.print(Text.assemble(("pushed:", "green"), f" {result.target} (digest {result.digest})"),
              highlight=False, soft_wrap=True)
    out.print(result.reference, highlight=False, soft_wrap=True, markup=False)


def show_base_notes(err: Console, notes: list[BaseNote]) -> None:
    """Before the builds: a base this host's driver cannot run (warning), or what was not
    checked."""
    for note in notes:
        label = ("warning:", "bold yellow") if note.warning else ("note:", "bold")
        err.print(Text.assemble(label, f" {note.text}"), highlight=False, soft_wrap=True)


def show_base_images(console: Console, results: list[BaseImageResult]) -> None:
    for result in results:
        state = "present" if result.skipped else "built"
        console.print(
            f"{result.ref} {state} ({result.image_id[:19]})", highlight=False, markup=False
        )


def show_patch_report(console: Console, report: CheckReport) -> None:
    for line in report.lines():
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def show_stack(console: Console, record: StackRecord) -> None:
    console.print(
        f"wrote {record.path}: sglang {record.version} pins transformers "
        f"{record.transformers or '(none)'}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    for repo, found in sorted(record.models.items()):
        verdict = "loads" if found.get("loads") else f"does NOT load: {found.get('error')}"
        console.print(f"  {repo} ({found.get('config')}): {verdict}", highlight=False,
                      soft_wrap=True, markup=False)


def show_extraction(console: Console, result: Extraction) -> None:
    console.print(f"wrote {result.path}: {result.actions} arguments of sglang {result.version} "
                  f"({result.wheel.name})", highlight=False, soft_wrap=True, markup=False)

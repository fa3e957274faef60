"""`opsctl doctor`'s table: rich Text cells (never markup: details quote the engine and files)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from opsctl.core.text import printable
from opsctl.doctor.app import DoctorReport
from opsctl.doctor.checks import FAIL, PASS, WARN

STYLES = {PASS: "green", WARN: "yellow", FAIL: "bold red"}


def table(report: DoctorReport) -> Table:
    shown = Table(title=Text(f"opsctl doctor: profile {report.profile}"), title_justify="left")
    for column in ("check", "status", "found", "fix"):
        shown.add_column(Text(column), overflow="fold")
    for check in report.checks:
        shown.add_row(Text(check.name), Text(check.status, style=STYLES[check.status]),
                      Text(printable(check.detail)), Text(printable(check.fix)))
    return shown


def summary(report: DoctorReport) -> Text:
    counts = {status: sum(c.status == status for c in report.checks) for status in STYLES}
    line = Text(f"{counts[PASS]} pass, {counts[WARN]} warn, {counts[FAIL]} fail "
                f"in {report.seconds:.1f} s")
    line.stylize(STYLES[FAIL] if counts[FAIL] else STYLES[PASS])
    return line

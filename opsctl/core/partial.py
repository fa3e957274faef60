"""Reports of runs that may stop early: what was measured is kept, marked partial, with why.

smoke and bench catch Ctrl-C and crashes around their measuring, build the report from what
they have, and keep the exception (never serialised) so the CLI can raise the right error once
the report is written: exit 130 for Ctrl-C, exit 1 with the traceback for a crash.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self

from pydantic import BaseModel, PrivateAttr

from opsctl.core.errors import OpsctlError, stop_error, stop_reason
from opsctl.core.redact import redact


class PartialReport(BaseModel):
    """Mixed into a report model: `partial` and its reason, plus the exception behind them."""

    partial: bool = False  # Ctrl-C or a crash stopped the run; the rest was not measured
    partial_reason: str | None = None
    _stopped_by: BaseException | None = PrivateAttr(default=None)

    def record_stop(self, stopped_by: BaseException | None, secrets: Iterable[str | None] = ()
                    ) -> Self:
        """Mark the report partial when something stopped the run (None: it finished)."""
        self._stopped_by = stopped_by
        if stopped_by is not None:
            self.partial = True
            self.partial_reason = redact(stop_reason(stopped_by), *secrets)
        return self

    def stop_error(self, what: str, where: object) -> OpsctlError | None:
        """The error for a partial run (Interrupted or Crashed), or None."""
        if self._stopped_by is None:
            return None
        return stop_error(self._stopped_by, what, where)

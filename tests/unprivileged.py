"""Run a child process that file modes bind, even when the tests run as root.

Root reads and writes through any mode bits (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
CAP_FOWNER); `without_dac_override` drops those three from the child's capability bounding set
before it executes, so a `chmod 000` file or a `chmod 555` folder stops it as it stops any user.
For a non-root run it changes nothing (it has none of them).
"""

from __future__ import annotations

import ctypes
import os

_PR_CAPBSET_DROP = 24
_CAPS = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def without_dac_override() -> None:
    """A `preexec_fn` for subprocess."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")

"""OSError and RecursionError are the user's (exit 2) only where user input is read: a named path,
a decoder recursing into deeply nested input. Elsewhere they are opsctl's own bugs (exit 1, with
the traceback), never reported as the user's mistake."""

from __future__ import annotations

import errno
import json
import socket

import pytest

from opsctl.core.errors import EXIT_LAUNCH, EXIT_USAGE
from opsctl.core.failures import as_opsctl_error


def _raised(function) -> BaseException:  # type: ignore[no-untyped-def]
    try:
        function()
    except BaseException as exc:  # noqa: BLE001 - the test inspects whatever was raised
        return exc
    raise AssertionError("nothing raised")


def test_deeply_nested_json_is_the_inputs_fault() -> None:
    exc = _raised(lambda: json.loads("[" * 200_000 + "]" * 200_000))
    assert isinstance(exc, RecursionError)
    mapped = as_opsctl_error(exc)
    assert mapped is not None and mapped.exit_code == EXIT_USAGE


def test_opsctls_own_runaway_recursion_is_a_bug() -> None:
    def forever(n: int) -> int:
        return forever(n + 1)

    exc = _raised(lambda: forever(0))
    assert isinstance(exc, RecursionError) and as_opsctl_error(exc) is None


def test_an_os_error_on_a_named_path_is_the_users() -> None:
    exc = _raised(lambda: open("/nonexistent/dir/file"))  # noqa: SIM115
    mapped = as_opsctl_error(exc)
    assert mapped is not None and mapped.exit_code == EXIT_USAGE
    assert "/nonexistent/dir/file" in mapped.message


@pytest.mark.parametrize("exc", [OSError(errno.EBADF, "Bad file descriptor"), OSError("weird")])
def test_an_os_error_naming_no_path_is_a_bug(exc: OSError) -> None:
    assert as_opsctl_error(exc) is None


@pytest.mark.parametrize("exc", [ConnectionRefusedError(111, "refused"),
                                 socket.gaierror(-2, "Name or service not known")])
def test_network_errors_stay_launch_errors(exc: OSError) -> None:
    mapped = as_opsctl_error(exc)
    assert mapped is not None and mapped.exit_code == EXIT_LAUNCH

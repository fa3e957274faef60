"""Exceptions that are not opsctl's own, but that a user, a broken server or a dying daemon can
cause, turned into OpsctlErrors: one line, a hint and a documented exit code.

`opsctl.cli.app.main` calls `as_opsctl_error` on whatever escapes a command. The families and
their codes (README's exit-code table says the same, from `core.errors.EXIT_CODES`):

  2  OSError on a named path (unreadable, unwritable, a directory, no space), text that is not
     UTF-8, a YAML error, input nested past Python's recursion limit while a JSON or YAML
     decoder reads it, an invalid URL
  4  an HTTP error from a server (refused, reset, timed out, a broken answer), a socket-level
     connection failure, the Docker engine refusing a request (its API answered 4xx)
  6  the Docker engine failing mid-call (docker-py or requests error, API 5xx)
  130 Ctrl-C (143 SIGTERM, 129 SIGHUP: taken as Ctrl-C, see core.errors)

Anything else is a bug in opsctl and keeps its traceback (exit 1): also an OSError that names no
path (opsctl misusing a file descriptor or a socket) and a RecursionError outside a decoder
(opsctl's own recursion), which are never the user's input. A library is looked up in
`sys.modules`, never imported here: an error of a library that was never loaded cannot occur,
and `opsctl --help` stays fast.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys

from opsctl.core.errors import (
    DaemonUnreachable,
    Interrupted,
    LaunchError,
    OpsctlError,
    ProfileError,
    UsageError,
)
from opsctl.core.interrupts import interrupted_by


def interrupted() -> Interrupted:
    """The error of a run interrupted outside any partial report: exit 130 for Ctrl-C, 143 for
    SIGTERM, 129 for SIGHUP, the line naming which."""
    return Interrupted(f"interrupted ({interrupted_by()})", hint="run the command again")


_OS_HINTS = {
    errno.EACCES: "check the path's permissions (opsctl runs as uid {uid})",
    errno.EPERM: "check the path's permissions (opsctl runs as uid {uid})",
    errno.EISDIR: "a file is wanted there, not a directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.ENOENT: "check the path",
    errno.ENOSPC: "free some disk space, or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
}


def _one_line(text: object, width: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _docker_error(exc: BaseException) -> OpsctlError | None:
    docker_errors = sys.modules.get("docker.errors")
    requests_exc = sys.modules.get("requests.exceptions")
    if docker_errors is not None and isinstance(exc, docker_errors.APIError):
        said = f"{exc.status_code}: {_one_line(exc.explanation or exc)}"
        if exc.is_client_error():
            return LaunchError(f"the Docker engine refused the request ({said})",
                               hint="the value it names (from the profile or an option) is not "
                               "one Docker accepts")
        return DaemonUnreachable(f"the Docker engine failed mid-call ({said})",
                                 hint="check `docker info`; `opsctl status` shows what is left")
    for module, name in ((docker_errors, "DockerException"), (requests_exc, "RequestException")):
        if module is not None and isinstance(exc, getattr(module, name)):
            return DaemonUnreachable(
                f"the Docker engine stopped answering: {type(exc).__name__}: {_one_line(exc)}",
                hint="check `docker info` and DOCKER_HOST; `opsctl status` shows what is left")
    return None


def _http_error(exc: BaseException) -> OpsctlError | None:
    httpx = sys.modules.get("httpx")
    if httpx is None:
        return None
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return UsageError(f"not a usable URL: {_one_line(exc)}", hint="e.g. http://127.0.0.1:30000")
    if isinstance(exc, httpx.HTTPError):
        where = ""
        with contextlib.suppress(RuntimeError):  # raised without a request attached
            where = f" ({exc.request.method} {exc.request.url})"
        return LaunchError(f"the server failed{where}: {type(exc).__name__}: {_one_line(exc)}",
                           hint="is the server up and answering? (`opsctl status`)")
    return None


def _os_error(exc: OSError) -> OpsctlError | None:
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror | socket.herror) or (
            type(exc).__module__.split(".")[0] == "aiohttp"):
        return LaunchError(f"connection failed: {type(exc).__name__}: {_one_line(exc)}",
                           hint="is the server up and answering? (`opsctl status`)")
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    if not paths:
        return None  # no path the user named or opsctl writes: a bug, with its traceback
    reason = exc.strerror or type(exc).__name__
    hint = _OS_HINTS.get(exc.errno or 0, "check the path and the disk").format(uid=os.geteuid())
    return UsageError(f"{paths}: {reason}" if paths else f"{reason}: {_one_line(exc)}", hint=hint)


def _yaml_error(exc: BaseException) -> OpsctlError | None:
    yaml = sys.modules.get("yaml")
    if yaml is None or not isinstance(exc, yaml.YAMLError):
        return None
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1})" if mark is not None else ""
    reason = getattr(exc, "problem", None) or _one_line(exc)
    return ProfileError(f"invalid YAML{where}: {reason}", hint="fix the YAML syntax")


# Where a RecursionError means "the input nests too deeply": the stdlib's JSON decoder, PyYAML's
# composer and constructor, pydantic's validation of the decoded value.
_DECODER_PATHS = (f"{os.sep}json{os.sep}", f"{os.sep}yaml{os.sep}", f"{os.sep}pydantic")


def _raised_by_a_decoder(exc: BaseException) -> bool:
    frame = exc.__traceback__
    while frame is not None:
        if any(part in frame.tb_frame.f_code.co_filename for part in _DECODER_PATHS):
            return True
        frame = frame.tb_next
    return False


def as_opsctl_error(exc: BaseException) -> OpsctlError | None:
    """The OpsctlError a foreign exception stands for, or None when it is a bug in opsctl."""
    if isinstance(exc, OpsctlError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return interrupted()
    if isinstance(exc, RecursionError) and _raised_by_a_decoder(exc):
        return UsageError("the input is nested too deeply to read",
                          hint="a profile, report or answer nests far deeper than any real one")
    if isinstance(exc, UnicodeDecodeError):
        return UsageError(f"text is not {exc.encoding}: byte 0x{exc.object[exc.start]:02x} at "
                          f"offset {exc.start}", hint="save the file as UTF-8")
    if isinstance(exc, UnicodeEncodeError):
        return UsageError(f"cannot write {exc.object[exc.start]!r} as {exc.encoding}",
                          hint="use a UTF-8 locale (e.g. LANG=C.UTF-8) or PYTHONIOENCODING=utf-8")
    found = _yaml_error(exc) or _docker_error(exc) or _http_error(exc)
    if found is not None:
        return found
    if isinstance(exc, OSError):
        return _os_error(exc)
    return None

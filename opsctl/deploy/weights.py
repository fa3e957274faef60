"""`opsctl model fetch`: a variant's checkpoint from the Hugging Face hub into `model.host_path`,
then checked on this host the way `up`'s preflight checks it.

What it downloads: the files of `model.repo` at `model.revision` that serving reads
(`SERVING_FILES`: config and tokenizer JSON, safetensors shards and their index, remote code,
chat templates, tokenizer models), never `*.bin`/`*.pth` duplicates or other formats. The
revision is resolved to its commit first and every file is fetched at that commit, so a branch
moving during a 400 GB download cannot mix two checkpoints.

How: huggingface_hub's own `hf_hub_download`, one file at a time in this thread. The hub client
writes each file to `<host_path>/.cache/huggingface/download/*.incomplete` and renames it only
when whole, and resumes an `.incomplete` with an HTTP Range request: an interrupted fetch (Ctrl-C,
a dropped connection, a full disk) leaves no partial file under its final name, and running the
command again continues where it stopped. One file at a time keeps a Ctrl-C immediate (the
client's thread pool would finish every file in flight first). `HF_ENDPOINT` (the client's own
setting) points it at a mirror or, in the tests, a local stand-in hub.

The token is read from the variable the profile names (`model.token_env`, HF_TOKEN by default)
and handed to the client; it is never printed or written.

Before downloading, the files' sizes (the hub's listing) are compared with the free space under
host_path; after, the checkpoint is checked by `preflight_probe` on this host (stdlib only: the
JSON, the shards against the index, the NextN layer for an MTP variant). Loading the config with
the image's transformers and sglang is `up`'s preflight, once the image is built.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.config.profiles import Deployment, to_argv
from opsctl.core.answers import Malformed, snippet
from opsctl.core.errors import HostNotReady, OpsctlError, UsageError
from opsctl.deploy import preflight_probe
from opsctl.deploy.preflight import PreflightCheck, is_mtp, parse_report, probe_request

SERVING_FILES = ("*.json", "*.safetensors", "*.py", "*.jinja", "*.model", "*.tiktoken",
                 "*.txt")
PROBE_TIMEOUT_S = 120.0  # JSON and file sizes only: seconds even for a 400 GB checkpoint
ENDPOINT_ENV = "HF_ENDPOINT"  # huggingface_hub's own setting; named in messages only
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class RepoFile:
    name: str
    size: int


@dataclass(frozen=True)
class Listing:
    """What the hub says the revision holds: its commit and the files serving reads."""

    commit: str
    files: tuple[RepoFile, ...]

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class FetchResult:
    deployment: Deployment
    listing: Listing
    fetched: int  # files downloaded by this run (the client kept those it already had)
    checks: tuple[PreflightCheck, ...]


class Hub:
    """The hub client, behind one seam: listing a revision and downloading one file."""

    def __init__(self, token: str | None) -> None:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # opsctl prints its own
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        # The plain HTTP path, the one tested here (a stand-in hub): files land whole or not at
        # all, a Ctrl-C stops the read at once, a dropped connection resumes with a Range.
        # Xet storage (hf_xet, when installed) would take another, untested path.
        os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
        self._token = token

    def listing(self, repo: str, revision: str) -> Listing:
        from huggingface_hub import HfApi

        info = HfApi().model_info(repo, revision=revision, files_metadata=True,
                                  token=self._token, timeout=30)
        return listing_of(info.sha, [(s.rfilename, s.size) for s in info.siblings or ()])

    def download(self, repo: str, commit: str, name: str, folder: Path) -> None:
        from huggingface_hub import hf_hub_download

        hf_hub_download(repo, name, revision=commit, local_dir=folder, token=self._token)


def listing_of(commit: object, siblings: Sequence[tuple[object, object]]) -> Listing:
    """The serving files of a hub listing, or Malformed naming the first thing no hub sends: a
    commit that is not 40 hex digits, a size that is not a count of bytes, or a serving file's
    name that is not a plain relative path (absolute, `..` or a backslash: it could only be
    placed outside model.host_path, and the hub client refuses it half-way through; a NUL byte
    or another control character, which the progress lines would print to the terminal)."""
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise Malformed(f"its commit is {snippet(str(commit))}, not 40 hex digits")
    files = []
    for name, size in siblings:
        if not isinstance(name, str) or not serving_file(name):
            continue
        parts = name.split("/")
        if name.startswith("/") or any(p in ("", ".", "..") for p in parts) \
                or not name.isprintable() or "\\" in name:
            raise Malformed(f"it lists a file named {snippet(name)}, not a path inside a folder")
        if size is None:  # the hub omits the size of a file it has no metadata for
            size = 0
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise Malformed(f"it lists {snippet(name)} with a size of {snippet(str(size))}")
        files.append(RepoFile(name, size))
    return Listing(commit=commit, files=tuple(files))


def serving_file(name: str) -> bool:
    """A file the server reads: at the top of the repository or below it, by SERVING_FILES."""
    base = name.rsplit("/", 1)[-1]
    return not name.startswith(".") and any(fnmatch.fnmatch(base, p) for p in SERVING_FILES)


def checkpoint_of(deployment: Deployment) -> tuple[str, Path]:
    """(repo, host folder) of the variant's checkpoint, or UsageError naming what is missing."""
    model, variant = deployment.model, deployment.variant
    if model.repo is None:
        raise UsageError(f"variant {variant!r} names no checkpoint repository (model.repo)",
                         hint="set model.repo (the variant's model.repo, or model.mtp.repo for "
                         "a variant drafting on the NextN layer) in the profile")
    if model.host_path is None:
        raise UsageError(f"variant {variant!r} has no folder for its weights (model.host_path)",
                         hint="set model.host_path (or the variant's model.host_path)")
    return model.repo, Path(model.host_path)


def fetch(deployment: Deployment, hub: Hub, say: Callable[[str], None]) -> FetchResult:
    """List, check the space, download what is missing or different, check the result."""
    repo, folder = checkpoint_of(deployment)
    listing = _listing(hub, repo, deployment.model.revision, deployment.model.token_env)
    if not listing.files:
        raise UsageError(f"{repo} at {deployment.model.revision} holds no file serving reads",
                         hint="check model.repo: it is not a model checkpoint")
    absent = sum(f.size for f in listing.files if not _same_size(folder / f.name, f.size))
    _check_space(folder, absent, listing)
    say(f"{repo} at {deployment.model.revision} = commit {listing.commit}: "
        f"{len(listing.files)} files, {_gb(listing.total)}, {_gb(absent)} of it not here yet; "
        f"into {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    fetched = 0
    for index, item in enumerate(listing.files, 1):
        before = _stamp(folder / item.name)
        _download(hub, repo, listing.commit, item, folder)
        if _stamp(folder / item.name) != before:  # the client skips a file it already has
            fetched += 1
            say(f"  {index}/{len(listing.files)} {item.name} ({_gb(item.size)})")
    checks = check_folder(deployment, folder)
    return FetchResult(deployment, listing, fetched, tuple(checks))


def _listing(hub: Hub, repo: str, revision: str, token_env: str) -> Listing:
    try:
        return hub.listing(repo, revision)
    except (ValueError, TypeError, KeyError) as exc:  # not JSON, not a listing, or Malformed
        detail = str(exc) if isinstance(exc, Malformed) else f"{type(exc).__name__}"
        where = os.environ.get(ENDPOINT_ENV) or "the Hugging Face hub"
        raise HostNotReady(f"{where} answered a listing of {repo} at {revision} that is not "
                           f"a checkpoint's: {detail}",
                           hint=f"check model.repo (and ${ENDPOINT_ENV}, if it names a "
                           "mirror); nothing was downloaded") from None
    except Exception as exc:  # the hub client's errors, mapped to one line each
        raise _hub_error(exc, repo, revision, token_env) from None


def _download(hub: Hub, repo: str, commit: str, item: RepoFile, folder: Path) -> None:
    try:
        hub.download(repo, commit, item.name, folder)
    except Exception as exc:  # the hub client's and the disk's errors, one line each
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise HostNotReady(f"the disk under {folder} filled up while downloading "
                               f"{item.name}", hint="free space there and run `opsctl model "
                               "fetch` again: it keeps the files already whole") from None
        raise _hub_error(exc, repo, commit, None) from None
    if not _same_size(folder / item.name, item.size):
        raise HostNotReady(f"{item.name} arrived with another size than the hub lists "
                           f"({item.size} bytes)", hint="run `opsctl model fetch` again")


def _hub_error(exc: BaseException, repo: str, revision: str,
               token_env: str | None) -> OpsctlError:
    from huggingface_hub import errors

    token_hint = (f"a gated or private repository needs a token with access in ${token_env}"
                  if token_env else "check the token's access")
    if isinstance(exc, errors.GatedRepoError):
        return UsageError(f"{repo} is gated and the hub refused access", hint=token_hint)
    if isinstance(exc, errors.RevisionNotFoundError):
        return UsageError(f"{repo} has no revision {revision!r}",
                          hint="fix model.revision (a branch, tag or commit)")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return UsageError(f"no repository {repo} on the hub (or the token cannot see it)",
                          hint="fix model.repo; " + token_hint)
    if isinstance(exc, errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "no"
        if status in (401, 403):
            return UsageError(f"the hub refused the token for {repo} (HTTP {status})",
                              hint=token_hint)
        return HostNotReady(f"the hub answered HTTP {status} for {repo}",
                            hint="run `opsctl model fetch` again later; it resumes")
    if isinstance(exc, OSError | ConnectionError) or _is_transport(exc):
        where = os.environ.get(ENDPOINT_ENV) or "the Hugging Face hub"
        return HostNotReady(f"cannot reach {where}: {type(exc).__name__}",
                            hint=f"check this host's network (or ${ENDPOINT_ENV}); "
                            "run `opsctl model fetch` again: it resumes")
    raise exc


def _is_transport(exc: BaseException) -> bool:
    # huggingface_hub raises its HTTP library's own transport errors (httpx or its fork).
    return any(cls.__name__ in {"TransportError", "TimeoutException", "NetworkError"}
               for cls in type(exc).__mro__)


def _same_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


def _check_space(folder: Path, needed: int, listing: Listing) -> None:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise HostNotReady(f"{folder} needs {_gb(needed)} more for the checkpoint "
                           f"({_gb(listing.total)} in all), {_gb(free)} is free",
                           hint="free space there or point model.host_path at a larger disk")


def check_folder(deployment: Deployment, folder: Path) -> list[PreflightCheck]:
    """preflight_probe on this host (stdlib only, so no image needed): HostNotReady when a
    check fails, with every failed check listed."""
    request = {**probe_request(deployment), "model_dir": str(folder), "strict": False}
    source = Path(preflight_probe.__file__).read_text()
    try:
        # -I -S: no site-packages, so the probe is what it says (stdlib only) and never runs
        # the checkpoint's remote code on this host, whatever the interpreter has installed.
        done = subprocess.run([sys.executable, "-I", "-S", "-c", source, json.dumps(request)],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False, env={"PATH": os.environ.get("PATH", "")})
    except subprocess.TimeoutExpired:
        raise HostNotReady(f"checking {folder} took over {PROBE_TIMEOUT_S:.0f} s",
                           hint="is the folder on a slow network mount?") from None
    # Without site-packages the probe reads files only; its rows saying that transformers or
    # sglang is absent describe this interpreter, not the image `up` will check with.
    checks = [c for c in parse_report(done.stdout) or []
              if not (c.ok and c.check in {"transformers", "sglang"})]
    failed = [c for c in checks if not c.ok]
    if failed or not checks:
        first = failed[0].detail if failed else f"the check did not run: {done.stderr[-200:]}"
        raise HostNotReady(f"checkpoint {folder} (variant {deployment.variant}): {first}",
                           hint=_fix_hint(deployment, failed),
                           details=[f"{c.check}: {c.detail}" for c in failed[1:]])
    return checks


def _fix_hint(deployment: Deployment, failed: Sequence[PreflightCheck]) -> str:
    if any("nextn" in c.check.lower() or "mtp" in c.check.lower() for c in failed):
        return ("an MTP variant needs a checkpoint that holds the NextN layer: point the "
                "variant's model.repo and model.host_path at one")
    return "run `opsctl model fetch` again (it resumes), or check model.repo"


def describe(deployment: Deployment) -> dict[str, Any]:
    """What `model fetch --dry-run` would do, resolved from the profile alone."""
    repo, folder = checkpoint_of(deployment)
    model = deployment.model
    return {"variant": deployment.variant, "repo": repo, "revision": model.revision,
            "host_path": str(folder), "token_env": model.token_env,
            "token_set": bool(os.environ.get(model.token_env)),
            "mtp": is_mtp(to_argv(deployment)), "files": list(SERVING_FILES)}


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 10**7 else f"{size} bytes"

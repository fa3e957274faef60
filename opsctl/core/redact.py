"""Secrets in what opsctl writes or prints: the API key's one source, masking and redaction.

The API key comes from `$OPSCTL_API_KEY` only. Two things must never reach a report, a table, a
warning or an error line: the key itself (a server may echo it back in a model id, generated
text or an error), the userinfo of a URL (`http://user:password@host`) and an HTTP credential
a server echoes back (`Basic <base64 user:password>`, `Bearer <token>`: httpx sends URL
userinfo as Basic). `redact` removes all three from a string; `redact_tree` from every string
of a JSON-shaped value, which is how the report writers scrub a whole report at once.

`redact` is the one function; it is applied where output leaves opsctl: the CLI's consoles
(`RedactingStream`), core/files' atomic writers and server logs (`redact_stream`, a line at a
time), so a path that forgets to scrub its own strings still prints and writes nothing of a
secret.

Secrets by value, in every form opsctl can know (issue 37): a secret it was given (the API
key, the userinfo of a URL the user named, which `core.httpcap.checked_base_url` hands to
`remember_url`) is masked raw, URL-encoded and, for `user:password`, as the base64 token httpx
sends (`Basic` or not in front of it). Secrets it was not given are masked by where they sit:
URL userinfo, an Authorization value, a `name=value` whose name says secret (`?api_key=`,
`&token=`, `password=`), a JSON string under such a name (`"api_key": "..."` in a server's
`/server_info` or error body), and access tokens by their shape. Every pattern is bounded
(bench/redact_scaling.py): a long run of text costs linear time.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)

API_KEY_ENV = "OPSCTL_API_KEY"
MASK = "****"
# A secret shorter than this is not searched for in text: it would match ordinary words.
MIN_SECRET_CHARS = 4

# `scheme://user:password@` (or `scheme://token@`): everything between `//` and `@` of an
# authority, which holds no `/`, whitespace or quote.
# The scheme is at most 32 characters: unbounded, a long run of letters (a server's output) cost
# quadratic time (bench/results/redact_scaling.json: 32k letters 0.98 s, now 3 ms).
# The userinfo runs to the authority's last `@` (a password with an unencoded `@` is masked
# whole); `:\/\/` is the same URL inside JSON that escapes its slashes.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}:(?://|\\/\\/))"
                       r"[^/?#\s'\"<>\\]*@")
# An Authorization value (RFC 9110 token68 after the scheme). Basic is masked only when its
# token decodes to `user:password`, so ordinary words after "Basic" stay; a `Bearer` token
# (as sent: capitalised) of 8 characters or more always.
_BASIC = re.compile(r"\b(?P<scheme>[Bb]asic)(?P<space>\s+)(?P<token>[A-Za-z0-9+/]{4,}={0,2})")
_BEARER = re.compile(r"\b(?P<scheme>Bearer)(?P<space>\s+)(?P<token>[A-Za-z0-9._~+/-]{8,}=*)")
# Access tokens recognisable by their shape, whatever they are named: Hugging Face (hf_),
# OpenAI-style keys (sk-), GitHub (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_), AWS access key IDs
# (AKIA), Slack (xox?-). A profile refuses them (config.profile_checks) and `redact` masks them.
SECRET_VALUE = re.compile(r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}"
                          r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
                          r"|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,})")


_TOKEN_PREFIXES = re.compile(r"hf_|sk-|gh[pousr]_|github_pat_|AKIA|xox")
# `name=value` (a query string, a form, a log line) and `"name": "value"` (JSON), masked when
# the name says secret (`_secret_name`). Names are at most 64 characters, and a name starts
# only where no name character precedes it: each character is looked at a bounded number of
# times.
_NAMED_VALUE = re.compile(r"(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z][A-Za-z0-9_.-]{0,63})="
                          r"(?P<value>[^&#\s'\"<>,;]+)")
_JSON_VALUE = re.compile(r'"(?P<name>[A-Za-z][A-Za-z0-9_.-]{0,63})"[ \t]{0,8}:[ \t]{0,8}'
                         r'"(?P<value>[^"\\\n]*(?:\\.[^"\\\n]*)*)"')
# A name is secret when it is one of these or ends in `_` + one (`client_secret`, `HF_TOKEN`);
# not a tokenizer's `eos_token` or a count's `max_tokens`.
_SECRET_WORDS = ("api_key", "password", "passwd", "secret", "credential", "credentials",
                 "access_key", "private_key", "authorization", "token",
                 "access_token", "auth_token", "api_token", "bearer_token", "refresh_token",
                 "id_token", "session_token", "security_token", "hf_token", "bot_token")
_TOKEN_WORDS = tuple(word for word in _SECRET_WORDS if word.endswith("_token"))
_GLUED_WORDS = ("apikey", "password", "passwd", "secret")  # `dbpassword`, `clientsecret` too
# Secret after `?` or `&` only: a presigned URL's `X-Amz-Signature`, `sig`; opsctl's own JSON
# has a `signature` (a trace finding's name) that is no secret.
_QUERY_ONLY_WORDS = ("key", "sig", "code", "auth", "signature")
# Text with none of these holds no secret-named value: the two patterns above are skipped.
_NAME_HINT = re.compile(r"(?i)key|pass|secret|token|credential|signature|auth|sig=|code=")
# Secrets opsctl was handed in this process (`remember`, `remember_url`), beside the API key.
_remembered: dict[str, None] = {}


def api_key_from_env() -> str | None:
    value = os.environ.get(API_KEY_ENV, "").strip()
    return value or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The OpenAI-style bearer header sglang, vLLM and others check, or none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def mask_secret(secret: str | None) -> str | None:
    """`****` + the last 4 characters; a short secret shows nothing of itself."""
    if not secret:
        return None
    return MASK + (secret[-4:] if len(secret) >= 12 else "")


def remember(*secrets: str | None) -> None:
    """Mask these values (in every form `_forms` knows) in all that opsctl prints or writes
    from now on in this process."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            _remembered.setdefault(secret)


def remember_url(url: str) -> None:
    """The secrets of a URL the user named: its userinfo's password (raw and decoded), the
    `user:password` httpx sends as a Basic token (and that token), and the values of its
    query parameters whose names say secret."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    if parts.password is not None or (parts.username and "@" in parts.netloc):
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        pair = f"{user}:{password}"
        remember(parts.password, password, pair if password else user,
                 base64.b64encode(pair.encode()).decode())
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=False):
        if _secret_name(name, query=True):
            remember(value, urllib.parse.quote(value, safe=""))


def _forms(secret: str) -> set[str]:
    """A secret as it may appear in text: raw and URL-encoded (both encodings)."""
    return {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}


def _secret_name(name: str, *, query: bool) -> bool:
    """Whether a parameter or field of this name holds a secret (`api_key`, `X-Auth-Token`,
    `client_secret`, and `key`, `sig`, `code`, `auth` in a URL's query)."""
    plain = name.lower().replace("-", "_").replace(".", "_")
    if query and (plain in _QUERY_ONLY_WORDS or plain.endswith("_signature")):
        return True
    if plain.endswith(_GLUED_WORDS):
        return True
    words = _TOKEN_WORDS if plain.endswith("_token") else _SECRET_WORDS
    return any(plain == word or plain.endswith("_" + word) for word in words)


def redact_named_values(text: str) -> str:
    """`?api_key=abc` -> `?api_key=****`, `"password": "pw"` -> `"password": "****"`: a value
    under a name that says secret, in a query string, a form, a log line or JSON."""
    if not _NAME_HINT.search(text):
        return text
    if "=" in text:
        text = _NAMED_VALUE.sub(lambda m: _masked_value(
            m, _secret_name(m["name"], query=m.start() > 0 and text[m.start() - 1] in "?&")),
            text)
    if '"' in text:
        text = _JSON_VALUE.sub(lambda m: _masked_value(m, _secret_name(m["name"], query=False)),
                               text)
    return text


def _masked_value(match: re.Match[str], secret: bool) -> str:
    value = match["value"]
    if not secret or not value or value.startswith((MASK, "$")):  # `$HF_TOKEN` names one
        return match[0]
    start = match.start("value") - match.start()
    return f"{match[0][:start]}{MASK}{match[0][start + len(value):]}"


def redact_userinfo(text: str) -> str:
    """`http://user:pw@host/x` -> `http://****@host/x`, wherever a URL sits in the text."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def _is_basic_credential(token: str) -> bool:
    try:
        return b":" in base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return False


def redact_credentials(text: str) -> str:
    """`Basic dXNlcjpwdw==` -> `Basic ****`, `Bearer abcdefgh...` -> `Bearer ****`."""
    if "asic" in text:
        text = _BASIC.sub(lambda m: f"{m['scheme']}{m['space']}{MASK}"
                          if _is_basic_credential(m["token"]) else m[0], text)
    if "Bearer" in text:
        text = _BEARER.sub(lambda m: f"{m['scheme']}{m['space']}{MASK}", text)
    return text


def redact(text: str, *secrets: str | None) -> str:
    """The text without URL userinfo, echoed HTTP credentials, secret-named values and any of
    the secrets in any of their forms (each masked); `$OPSCTL_API_KEY` and the secrets
    `remember`ed are among them whether passed or not."""
    if "//" in text or "\\/\\/" in text:
        text = redact_userinfo(text)
    text = redact_named_values(text)
    for secret in (*secrets, api_key_from_env(), *_remembered):
        if not secret or len(secret) < MIN_SECRET_CHARS:
            continue
        for form in sorted(_forms(secret), key=len, reverse=True):
            if form in text:
                text = text.replace(form, mask_secret(form) or MASK)
    text = redact_credentials(text)  # after the key: `Bearer ****1234` keeps its last 4
    return SECRET_VALUE.sub(MASK, text) if _TOKEN_PREFIXES.search(text) else text


class RedactingStream:
    """A text stream that writes `redact(text)` to the stream `target()` returns at each write
    (looked up each time: tests and typer's runner swap sys.stdout); the CLI's consoles print
    through it."""

    def __init__(self, target: Callable[[], IO[str]]) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target().write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self._target(), name)


def redact_tree(value: Any, secrets: Iterable[str | None]) -> Any:
    """A copy of a JSON-shaped value (dicts, lists, strings, numbers) with every string redacted."""
    wanted = tuple(secrets)
    if isinstance(value, str):
        return redact(value, *wanted)
    if isinstance(value, dict):
        return {redact(k, *wanted) if isinstance(k, str) else k: redact_tree(v, wanted)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(item, wanted) for item in value]
    return value


def redact_model(model: Model, secrets: Iterable[str | None]) -> Model:
    """The same report with every string redacted: what writers and views are given."""
    return type(model).model_validate(redact_tree(model.model_dump(mode="json"), secrets))


# A line longer than this is scrubbed and written in pieces, each cut at a blank within the
# last `_CARRY` characters before this length (a token holds no blank, so none is cut in two);
# with no blank there, at the length itself.
_MAX_PENDING = 64 * 1024
_CARRY = 512
_BLANKS = " \t\r"


def redact_stream(chunks: Iterable[str], secrets: Iterable[str | None]) -> Iterator[str]:
    """`redact` over text that arrives in pieces (a server's log): scrubbed a whole line at a
    time, so a secret cut by a chunk boundary is still found; memory stays bounded by
    `_MAX_PENDING` whatever the line length. A secret of several lines (a PEM key) is masked a
    line at a time, each of its lines wholly (`****`)."""
    wanted = tuple(secret for secret in secrets if secret)
    lines = tuple(line for secret in wanted if "\n" in secret for line in secret.splitlines()
                  if len(line.strip()) >= MIN_SECRET_CHARS)

    def scrub(text: str) -> str:
        for line in lines:
            text = text.replace(line, MASK)
        return redact(text, *wanted)

    pending = ""
    for chunk in chunks:
        pending += chunk
        cut = pending.rfind("\n") + 1
        if cut:
            yield scrub(pending[:cut])
            pending = pending[cut:]
        while len(pending) > _MAX_PENDING:
            cut = _blank_cut(pending, _MAX_PENDING)
            yield scrub(pending[:cut])
            pending = pending[cut:]
    if pending:
        yield scrub(pending)


def _blank_cut(text: str, limit: int) -> int:
    """Where to cut `text` before `limit`: just after the last blank in the `_CARRY`
    characters before it, else at `limit`."""
    blank = max(text.rfind(char, limit - _CARRY, limit) for char in _BLANKS)
    return blank + 1 if blank >= 0 else limit


def redact_byte_stream(chunks: Iterable[bytes], secrets: Iterable[str | None]) -> Iterator[bytes]:
    """`redact_stream` over bytes, decoded incrementally (a character split between two chunks
    is whole before it is searched): every byte that is not part of a secret comes back as it
    was, undecodable ones too."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def text() -> Iterator[str]:
        for chunk in chunks:
            yield decoder.decode(chunk)
        yield decoder.decode(b"", final=True)

    for piece in redact_stream(text(), secrets):
        yield piece.encode("utf-8", "surrogateescape")

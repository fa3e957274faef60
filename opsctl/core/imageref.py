"""Docker's image reference grammar (distribution/reference, reference.go): the one copy, used
for `--image` and `--push` (image room) and for a profile's `image.repository` and `image.base`
at load (config), so a name no engine accepts is refused before anything is planned.

    reference      := name [ ":" tag ] [ "@" digest ]
    name           := [domain "/"] path-component ["/" path-component]*
    domain         := host [":" port-number]
    path-component := alpha-numeric [separator alpha-numeric]*
    alpha-numeric  := /[a-z0-9]+/
    separator      := /[_.]|__|[-]+/
    tag            := /[\\w][\\w.-]{0,127}/
"""

from __future__ import annotations

import re

HOST = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?"
)
COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
# A repository: an optional registry host (with a port) and lower-case path components; no tag
# and no digest or credentials.
REPOSITORY_RE = re.compile(rf"(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*")
# An image to run: such a repository with an optional :tag and @sha256 digest, or an image ID
# (hex, which the component grammar already matches).
REFERENCE_RE = re.compile(rf"(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*"
                          r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")
MAX_NAME_CHARS = 255  # distribution/reference's NameTotalLengthMax


def is_repository(value: str) -> bool:
    return len(value) <= MAX_NAME_CHARS and REPOSITORY_RE.fullmatch(value) is not None


def reference_problem(value: str) -> str | None:
    """Why `value` cannot name an image (REPOSITORY[:TAG][@sha256:DIGEST]), or None."""
    if len(value) > 2 * MAX_NAME_CHARS or not REFERENCE_RE.fullmatch(value):
        return "not an image reference (REPOSITORY[:TAG][@sha256:DIGEST], lower-case repository)"
    return None


def repository_problem(value: str) -> str | None:
    """Why `value` cannot be the repository opsctl tags its builds in, or None."""
    if is_repository(value):
        return None
    if "@" in value:
        return "no digest in a repository: each build is tagged by its content hash"
    return ("not a repository name ([REGISTRY[:PORT]/]PATH: lower-case components of a-z 0-9 "
            "joined by '.', '_', '__' or '-'; no tag, spaces or upper case)")

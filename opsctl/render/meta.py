"""What a Kubernetes API server accepts as names, label values and quantities, checked before
anything is written, so a manifest never fails at `kubectl apply` for its spelling.

Rules from the Kubernetes documentation ("Object Names and IDs", "Labels and Selectors"): a
namespace is an RFC 1123 label; a Service name (and so a LeaderWorkerSet's, whose headless
Service carries its name) an RFC 1035 label; a label value at most 63 characters of
[A-Za-z0-9._-], beginning and ending with a letter or digit. opsctl's labels (core/labels.py)
hold values that do not always fit (a 64-hex config hash, an image reference with `/` and `:`):
those go to annotations under the same key, which take any string.
"""

from __future__ import annotations

import re

from opsctl.core.errors import UsageError

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# A qualified name's name part (a label key's, a taint key's): a non-empty label value.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_LABEL = 63
MAX_SUBDOMAIN = 253
# Names of objects derived from the base name: "<name>-router", pods "<name>-<group>-<worker>"
# and the StatefulSets' controller-revision-hash label "<name>-<group>-<10-character hash>",
# which must stay a 63-character label value; 40 leaves room for all of them.
MAX_BASE_NAME = 40
# Docker size suffixes are binary (1024-based); Kubernetes spells those Ki, Mi, Gi.
_DOCKER_SIZE = re.compile(r"([0-9]+)([bkmgBKMG]?)")
_BINARY_SUFFIX = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


def check_namespace(namespace: str) -> str:
    if len(namespace) > MAX_LABEL or not _DNS1123_LABEL.fullmatch(namespace):
        raise UsageError(f"--namespace {namespace!r} is not a Kubernetes namespace name",
                         hint="lower-case letters, digits and '-', at most 63, starting and "
                         "ending with a letter or digit (RFC 1123)")
    return namespace


def check_object_name(name: str, option: str | None = None) -> str:
    """A name shared by every variant of a profile (its rules), or an option's (a
    PersistentVolumeClaim's): an RFC 1123 label."""
    if len(name) > MAX_LABEL or not _DNS1123_LABEL.fullmatch(name):
        raise UsageError(f"{option + ' ' if option else ''}{name!r} cannot name a Kubernetes "
                         "object", hint=("lower-case letters, digits and '-', at most 63, "
                                         "starting and ending with a letter or digit (RFC 1123)")
                         if option else "a profile rendered for a cluster is named with "
                         "lower-case letters, digits and '-'")
    return name


def check_name(name: str, option: str) -> str:
    """The base name every object is named from: an RFC 1035 label of at most 40 characters."""
    if len(name) > MAX_BASE_NAME or not _DNS1035_LABEL.fullmatch(name):
        raise UsageError(f"{option} {name!r} cannot name Kubernetes objects",
                         hint=f"pass --name: lower-case letters, digits and '-', at most "
                         f"{MAX_BASE_NAME}, starting with a letter (RFC 1035)")
    return name


def is_subdomain(text: str) -> bool:
    """A DNS-1123 subdomain (a PriorityClass name, a label key's prefix)."""
    return len(text) <= MAX_SUBDOMAIN and _DNS1123_SUBDOMAIN.fullmatch(text) is not None


def check_label_key(text: str, option: str) -> str:
    """A label or taint key by apimachinery's IsQualifiedName: NAME or PREFIX/NAME, NAME at
    most 63 of [A-Za-z0-9._-] starting and ending with a letter or digit, PREFIX a DNS
    subdomain. A `/` needs both sides (`/k` and `p/` are refused, as `a/b/c`)."""
    prefix, slash, name = text.rpartition("/")
    good = (len(name) <= MAX_LABEL and _QUALIFIED_NAME.fullmatch(name) is not None
            and (not slash or is_subdomain(prefix)))
    if not good:
        raise UsageError(f"{option} {text!r}: not a Kubernetes label or taint key",
                         hint="[PREFIX/]NAME: NAME at most 63 of [A-Za-z0-9._-], starting and "
                              "ending with a letter or digit; PREFIX a DNS subdomain")
    return text


def fits_label(value: str) -> bool:
    return len(value) <= MAX_LABEL and bool(_LABEL_VALUE.fullmatch(value))


def check_label(key: str, value: str) -> str:
    """A value a selector needs as a label: refused when it cannot be one."""
    if not fits_label(value):
        raise UsageError(f"{key}={value!r} cannot be a Kubernetes label value, and the "
                         "selectors need it", hint="at most 63 of [A-Za-z0-9._-], starting "
                         "and ending with a letter or digit: rename the profile or variant")
    return value


def split_metadata(values: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations): each value stays a label where Kubernetes allows it."""
    fitting = {key: value for key, value in values.items() if fits_label(value)}
    return fitting, {key: value for key, value in values.items() if key not in fitting}


def quantity(docker_size: str) -> str:
    """A Docker size (profile_checks.SIZE_RE: digits, then b, k, m or g) as a Kubernetes
    quantity."""
    match = _DOCKER_SIZE.fullmatch(docker_size)
    if match is None:  # the profile refuses such sizes when it loads
        raise UsageError(f"{docker_size!r} is not a Docker size", hint="e.g. 32g")
    return match[1] + _BINARY_SUFFIX[match[2].lower()]

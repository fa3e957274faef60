"""Which of opsctl's running server containers answers at a base URL, found by its labels and
published ports (never by name), and that server's URL as seen from inside its own container.

`bench --driver sglang-bench` needs both: it runs sglang.bench_serving in the container that
serves the target, where the tokenizer is a local path and the server is on loopback.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from opsctl.config.runspec import server_labels
from opsctl.core.errors import UsageError
from opsctl.core.redact import redact_userinfo
from opsctl.engine.api import ContainerInfo, Engine

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_ALL_INTERFACES = frozenset({"0.0.0.0", "::", ""})


def server_for_url(engine: Engine, base_url: str) -> tuple[ContainerInfo, str]:
    """The running opsctl server publishing `base_url`'s port on its host, and the server's URL
    inside that container. A server published on every interface matches a loopback URL
    (127.0.0.1, localhost, ::1); otherwise the URL's host must be the published address.
    UsageError when none matches: only opsctl's own containers on this engine qualify."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for info in engine.find(server_labels()):
        if info.status != "running":
            continue
        for binding in info.ports:
            address = binding.host_address.lower()
            local = host in _LOOPBACK and (address in _ALL_INTERFACES or address in _LOOPBACK)
            if binding.host_port == port and (host == address or local):
                return info, f"http://127.0.0.1:{binding.container_port}"
    raise UsageError(
        f"no running opsctl server container publishes {redact_userinfo(base_url)}; "
        "--driver sglang-bench runs sglang.bench_serving inside the serving container",
        hint="start it with `opsctl up` (or let bench launch the profile's variants), or "
             "bench other servers with --driver opsctl",
    )

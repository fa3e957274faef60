"""`deploy.localsim.free_port`: the port every local simulator, test profile and Ctrl-C timing
takes. Drawn below the kernel's ephemeral range, where no outgoing connection takes a source
port, and never twice in one process (six timings side by side got "host port already taken"
from bind(0)'s ports)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from opsctl.deploy import localsim


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, high = localsim._below_ephemeral()
    ports = [localsim.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(low <= port <= high for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # free when handed out


def test_the_range_follows_the_kernel_setting(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n")
    monkeypatch.setattr(localsim, "_EPHEMERAL_RANGE", setting)
    assert localsim._below_ephemeral() == (27999, 39999)
    monkeypatch.setattr(localsim, "_EPHEMERAL_RANGE", tmp_path / "absent")
    assert localsim._below_ephemeral() == (20767, 32767)


def test_a_port_already_bound_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(localsim, "_below_ephemeral", lambda: (taken, taken))
        monkeypatch.setattr(localsim, "_HANDED_OUT", set())
        assert localsim.free_port() != taken  # the only one drawn is bound: bind(0)'s instead

"""The device bundle's start-up hook: placeholders named by $OPSCTL_STUB_MODULES
(opsctl_device_stubs), served only inside the modules $OPSCTL_STUB_IMPORTERS names (both
comma-separated)."""

import os


def _names(var: str) -> set[str]:
    return {n.strip() for n in os.environ.get(var, "").split(",") if n.strip()}


if _names("OPSCTL_STUB_MODULES"):
    import opsctl_device_stubs

    opsctl_device_stubs.install(_names("OPSCTL_STUB_MODULES"), _names("OPSCTL_STUB_IMPORTERS"))

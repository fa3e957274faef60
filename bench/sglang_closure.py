"""CPU proof of sglang's import closure as the H200 device image would see it.

    python bench/sglang_closure.py --site SITE [--emu DIR] \
        [--module sglang.srt.entrypoints.http_server]

The device image holds a fixed package list (the names in /work/.library/device/KINDS.md, copied
to bench/sglang_bundle/device_packages.txt). A meta-path finder refuses every top-level module
that neither the standard library, a distribution on that list, nor the bundle's SITE provides,
so a module the bundle lacks fails here exactly as it would there. `--emu` holds CPU (cp311)
stand-ins of device packages this machine's venv lacks; `--stub` names CUDA-only modules that
are replaced by placeholders (they cannot load without a GPU; the device run imports them for
real). Prints one JSON line: the modules imported, the stubs used and the first failure, if any.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEVICE_LIST = HERE / "sglang_bundle" / "device_packages.txt"


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def device_view(dest: Path, also: list[str]) -> Path:
    """A folder of links to this venv's modules (and dist-info) of device-image distributions only
    (and of `also`: dependencies that this venv's newer versions of device packages need)."""
    device = {_norm(line.strip()) for line in DEVICE_LIST.read_text().splitlines() if line.strip()}
    device |= {_norm(name) for name in also}
    dists = list(md.distributions())
    grown = True
    while grown:  # and, transitively, what this venv's versions of them require
        before = len(device)
        for dist in dists:
            if _norm(dist.metadata["Name"]) in device:
                for req in dist.requires or []:
                    if "extra ==" not in req:
                        device.add(_norm(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]))
        grown = len(device) > before
    dest.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        if _norm(dist.metadata["Name"]) not in device:
            continue
        for file in dist.files or []:
            top = file.parts[0]
            src = Path(str(dist.locate_file(top)))
            link = dest / top
            if top.endswith((".pth",)) or top == ".." or link.exists() or not src.exists():
                continue
            link.symlink_to(src)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, required=True, help="the bundle, unpacked")
    parser.add_argument("--emu", type=Path, action="append", default=[])
    parser.add_argument("--stub", action="append", default=[])
    parser.add_argument("--module", action="append", default=[])
    parser.add_argument(
        "--scoped-stub",
        action="append",
        default=[],
        help="a placeholder served only inside the --stub-importer modules (as on the device)",
    )
    parser.add_argument("--stub-importer", action="append", default=[])
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        help="a distribution of this venv to admit beside the device list",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if "--child" not in sys.argv:
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sglang-closure-") as tmp:
            view = device_view(Path(tmp) / "device-view", args.allow)
            paths = [str(p.resolve()) for p in (args.site, *args.emu)] + [str(view)]
            code = (
                "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p] "
                f"+ {paths!r}; sys.argv = {sys.argv + ['--child']!r}; "
                f"exec(compile(open({__file__!r}).read(), {__file__!r}, 'exec'), "
                f"{{'__name__': '__main__', '__file__': {__file__!r}}})"
            )
            return subprocess.run([sys.executable, "-S", "-c", code], check=False).returncode
    sys.path.insert(0, str(HERE / "sglang_bundle" / "shims"))
    from opsctl_device_stubs import install

    finder = install(set(args.stub))
    if args.scoped_stub:
        install(set(args.scoped_stub), set(args.stub_importer))
    result: dict[str, object] = {"modules": args.module or ["sglang.srt.entrypoints.http_server"]}
    try:
        for name in result["modules"]:  # type: ignore[attr-defined]
            importlib.import_module(name)
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - the first failure is the result
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        result["where"] = [
            f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in frames[-4:]
        ]
    result["stubs"] = sorted(finder.names | set(args.scoped_stub))
    result["sglang_modules_imported"] = len([m for m in sys.modules if m.startswith("sglang")])
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

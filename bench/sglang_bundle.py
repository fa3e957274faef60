"""Assemble the smallest set that starts sglang 0.5.15's server on the H200 device image.

    python bench/sglang_bundle.py lock      # pip download each pin (cp312, manylinux), hash,
                                            # write the lock
    python bench/sglang_bundle.py assemble  # check each file against the lock, unpack, prune,
                                            # pack parts
    python bench/sglang_bundle.py closure   # the CPU import-closure proof (sglang_closure.py),
                                            # cp311 twins

The device image (bench/sglang_bundle/device_packages.txt, from the device docs' package list)
has torch 2.11.0+cu130, triton, transformers 5.17 and no network. What it lacks travels here:
the sglang wheel, a pruned sglang-kernel, flashinfer_python, transformers 5.12.1 (0.5.15 pins it;
5.17 already registers `qwen3_asr`, which sglang registers again and fails at import) with the
tokenizers it allows, and each pure-Python or small binary dependency the server imports.
Every file's sha256 and size are read from the file pip downloaded and written to
bench/sglang_bundle/lock.json; `assemble` refuses a file whose hash differs.

Pruned (each an import the server on sm_90 never makes, or a lazily loaded kernel):
sglang's gRPC extension (srt/grpc/_core*.so, the optional gRPC server), sglang-kernel's
flash_ops.abi3.so (FA3, loaded lazily by sgl_kernel/flash_attn.py), sm100/ (not sm_90),
flashinfer's bundled CUTLASS examples/python/test trees (its JIT includes only include/ and
tools/). Kept for the GLM-5-shaped DSA model: flashmla_ops.abi3.so (0.5.15 resolves its FP8 KV
to the flashmla_kv DSA backends) and sgl-deep-gemm (the indexer calls deep_gemm; without it the
model stopped at `deep_gemm.get_num_sms()`, bench/results/sglang_h200/server-glm5.log of
2026-12-02).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "sglang_bundle"
LOCK = BUNDLE / "lock.json"
SHIMS = BUNDLE / "shims"
PY_VERSION = "3.12"  # the device image's python3
PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
]

# name==version: what the device lacks (or has in a version sglang 0.5.15 cannot use).
PINS = {
    "core": [
        "sglang==0.5.15",
        "sglang-kernel==0.4.4",
        "flashinfer-python==0.6.12",
        "apache-tvm-ffi==0.1.11",
        "transformers==5.12.1",
        "tokenizers==0.22.2",
        # DeepGEMM (0.5.15 pins it): the DSA indexer's fp8 MQA logits on sm_90 (GLM-5-shaped model)
        "sgl-deep-gemm==0.1.4",
    ],
    "server": [
        "fastapi==0.165.0",
        "starlette==1.10.0",
        "uvicorn==0.54.0",
        "pydantic==2.14.4",
        "pydantic-core==2.50.5",
        "annotated-types==0.8.0",
        "typing-inspection==0.4.5",
        "typing-extensions==4.16.0",
        "python-multipart==0.0.34",
        "orjson==3.13.0",
        "pybase64==1.5.1",
        "pyzmq==27.3.0",
        "msgspec==0.23.0",
        "setproctitle==1.3.8",
        "partial-json-parser==0.2.1.1.post7",
        "interegular==0.3.3",
        "distro==1.9.0",
        "openai==2.6.1",
        "jiter==0.19.0",
        "sniffio==1.3.1",
        "dill==0.4.1",
        "compressed-tensors==0.20.1",
        "loguru==0.7.3",
        "gguf==0.19.0",
        "jsonschema==4.26.0",
        "jsonschema-specifications==2025.9.1",
        "referencing==0.37.0",
        "rpds-py==2026.9.1",
        "soundfile==0.13.1",
        "cffi==2.1.1",
        "pycparser==3.12",
        "opentelemetry-api==1.45.2",
    ],
}

PRUNE = {
    "sglang": ["sglang/srt/grpc/_core.cpython-*.so"],
    "sglang-kernel": [
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/sm100/*",
    ],
    "flashinfer-python": [
        "flashinfer/data/cutlass/examples/*",
        "flashinfer/data/cutlass/python/*",
        "flashinfer/data/cutlass/test/*",
        "flashinfer/data/cutlass/media/*",
        "flashinfer/data/cutlass/docs/*",
    ],
}
PART_LIMIT = 50 * 2**20  # each part must leave room for the project tree in one 64 MiB call


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(req: str, dest: Path, python_version: str) -> Path:
    before = set(dest.glob("*.whl"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        str(dest),
        req,
    ]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd, check=True)
    name, version = req.split("==")
    for whl in sorted(set(dest.glob("*.whl")) | before):
        parts = whl.name.split("-")
        if _norm(parts[0]) == _norm(name) and parts[1] == version:
            tag = parts[2]
            if (
                python_version == PY_VERSION
                or tag.startswith(("py", f"cp{python_version.replace('.', '')}"))
                or "abi3" in whl.name
            ):
                return whl
    raise SystemExit(f"pip produced no wheel for {req} ({python_version})")


def cmd_lock(cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    entries = []
    for group, reqs in PINS.items():
        for req in reqs:
            whl = _pip_download(req, cache, PY_VERSION)
            name, version = req.split("==")
            entries.append(
                {
                    "name": name,
                    "version": version,
                    "group": group,
                    "file": whl.name,
                    "sha256": sha256(whl),
                    "bytes": whl.stat().st_size,
                }
            )
            print(f"{whl.name}  {entries[-1]['sha256'][:12]}  {entries[-1]['bytes']}")
    lock = {
        "python": PY_VERSION,
        "platforms": PLATFORMS,
        "source": "PyPI via pip download --no-deps",
        "prune": PRUNE,
        "wheels": entries,
    }
    LOCK.write_text(json.dumps(lock, indent=2) + "\n")
    print(
        f"wrote {LOCK}: {len(entries)} wheels, {sum(e['bytes'] for e in entries) / 2**20:.1f} MiB"
    )


def _pruned(name: str, member: str) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(member, pat) for pat in PRUNE.get(name, []))


def cmd_assemble(cache: Path, out: Path) -> None:
    lock = json.loads(LOCK.read_text())
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("bundle-part*.tar.gz"):
        old.unlink()
    parts: list[tarfile.TarFile] = []
    sizes: list[int] = []
    pruned_bytes = 0

    def new_part() -> tarfile.TarFile:
        path = out / f"bundle-part{len(parts) + 1}.tar.gz"
        parts.append(tarfile.open(path, "w:gz", compresslevel=6))  # noqa: SIM115 - closed below
        return parts[-1]

    tar = new_part()
    for entry in lock["wheels"]:
        whl = cache / entry["file"]
        if not whl.is_file():
            raise SystemExit(f"{whl} missing: run `lock` (or pip download it) first")
        if sha256(whl) != entry["sha256"]:
            raise SystemExit(f"{whl.name}: sha256 differs from the lock")
        with zipfile.ZipFile(whl) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if _pruned(entry["name"], info.filename):
                    pruned_bytes += info.file_size
                    continue
                data = zf.read(info)
                member = tarfile.TarInfo(info.filename)
                member.size = len(data)
                member.mode = (
                    0o755
                    if info.filename.endswith(".so") or (info.external_attr >> 16) & 0o111
                    else 0o644
                )
                tar.addfile(member, io.BytesIO(data))
        tar.fileobj.flush()  # type: ignore[union-attr]
        if (out / f"bundle-part{len(parts)}.tar.gz").stat().st_size > PART_LIMIT:
            tar.close()
            tar = new_part()
    for path in sorted(SHIMS.rglob("*.py")):
        tar.add(path, arcname=str(path.relative_to(SHIMS)))
    tar.close()
    for i in range(len(parts)):
        sizes.append((out / f"bundle-part{i + 1}.tar.gz").stat().st_size)
    manifest = {
        "lock_sha256": sha256(LOCK),
        "parts": {f"bundle-part{i + 1}.tar.gz": s for i, s in enumerate(sizes)},
        "pruned_bytes_uncompressed": pruned_bytes,
    }
    (out / "bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest))


def cmd_closure(cache311: Path, emu: list[Path], stubs: list[str], modules: list[str]) -> int:
    """Unpack the cp311 twins of the locked wheels and run the closure proof over them."""
    lock = json.loads(LOCK.read_text())
    site = Path("/tmp/sglang-bundle-cp311-site")
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    for entry in lock["wheels"]:
        whl = _pip_download(f"{entry['name']}=={entry['version']}", cache311, "3.11")
        with zipfile.ZipFile(whl) as zf:
            for info in zf.infolist():
                if not info.is_dir() and not _pruned(entry["name"], info.filename):
                    zf.extract(info, site)
    cmd = [
        sys.executable,
        str(HERE / "sglang_closure.py"),
        "--site",
        str(site),
        "--emu",
        str(SHIMS),
    ]
    for path in emu:
        cmd += ["--emu", str(path)]
    for stub in stubs:
        cmd += ["--stub", stub]
    for module in modules:
        cmd += ["--module", module]
    return subprocess.run(cmd, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("lock")
    p.add_argument("--cache", type=Path, default=Path("/var/cache/opsctl-wheels/device-cp312"))
    p = sub.add_parser("assemble")
    p.add_argument("--cache", type=Path, default=Path("/var/cache/opsctl-wheels/device-cp312"))
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("closure")
    p.add_argument("--cache", type=Path, default=Path("/var/cache/opsctl-wheels/device-cp312"))
    p.add_argument("--emu", type=Path, action="append", default=[])
    p.add_argument("--stub", action="append", default=[])
    p.add_argument("--module", action="append", default=[])
    args = parser.parse_args()
    if args.cmd == "lock":
        cmd_lock(args.cache)
        return 0
    if args.cmd == "assemble":
        cmd_assemble(args.cache, args.out)
        return 0
    return cmd_closure(args.cache, args.emu, args.stub, args.module)


if __name__ == "__main__":
    sys.exit(main())

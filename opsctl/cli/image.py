"""Commands of the image room: build, base-image, patch check/apply, sglang-args extract."""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, console, err_console

sglang_args_app = typer.Typer(
    help="The pinned sglang versions' real argument parsers, against which flags are checked.",
    no_args_is_help=True,
)
app.add_typer(sglang_args_app, name="sglang-args")


@sglang_args_app.command("extract")
def sglang_args_extract(
    version: Annotated[str, typer.Option("--version", help="sglang release, e.g. 0.5.23.")],
    wheel_dir: Annotated[
        str | None,
        typer.Option("--wheel-dir", help="Wheel cache (default /var/cache/opsctl-wheels)."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", help="Write here instead of sglang-args/<version>/cli-args.json."),
    ] = None,
) -> None:
    """Record sglang's parser from the real wheel into sglang-args/<version>/cli-args.json."""
    from pathlib import Path

    from opsctl.argspec.extract import DEFAULT_WHEEL_DIR, extract

    result = extract(
        version,
        Path(wheel_dir) if wheel_dir else DEFAULT_WHEEL_DIR,
        Path(output) if output else None,
    )
    console.print(
        f"wrote {result.path}: {result.actions} arguments of sglang {version} "
        f"({result.wheel.name})",
        highlight=False,
        soft_wrap=True,
    )




patch_app = typer.Typer(help="Check and apply the gather-then-cast patch sets.", no_args_is_help=True)
app.add_typer(patch_app, name="patch")


def _print_patch_report(lines: list[str]) -> None:
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


@patch_app.command("check")
def patch_check(
    sglang_src: Annotated[str | None, typer.Option(
        "--sglang-src", help="Directory holding the sglang package (unpacked wheel or "
        "site-packages).")] = None,
    sglang_version: Annotated[str | None, typer.Option(
        "--sglang-version", help="Download this sglang release (pip download --no-deps, cached "
        "in $OPSCTL_WHEEL_CACHE) and check against it.")] = None,
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's or release's version).")] = None,
) -> None:
    """Apply a patch set to a temporary copy of a real sglang tree, with zero fuzz."""
    from pathlib import Path

    from opsctl.core.errors import UsageError
    from opsctl.image import patchset

    if (sglang_src is None) == (sglang_version is None):
        raise UsageError("give exactly one of --sglang-src DIR and --sglang-version X",
                         hint="opsctl patch check --sglang-version 0.5.9")
    if sglang_version is not None:
        report = patchset.check_release(sglang_version, version)
    else:
        src = Path(sglang_src or "")
        chosen = version or patchset.tree_version(src)
        if chosen is None:
            raise UsageError(f"cannot tell the sglang version of {src}",
                             hint="pass --version X, or a directory that holds sglang/")
        report = patchset.check(src, chosen)
    _print_patch_report(report.lines())


@patch_app.command("apply")
def patch_apply(
    sglang_src: Annotated[str, typer.Option(
        "--sglang-src", help="Directory holding the sglang package, patched in place.")],
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's version).")] = None,
) -> None:
    """Verify, then patch a real sglang tree in place (the build's code path)."""
    from pathlib import Path

    from opsctl.core.errors import UsageError
    from opsctl.image import patchset

    src = Path(sglang_src)
    chosen = version or patchset.tree_version(src)
    if chosen is None:
        raise UsageError(f"cannot tell the sglang version of {src}",
                         hint="pass --version X, or a directory that holds sglang/")
    report = patchset.apply(src, patchset.patch_set_dir(chosen))
    _print_patch_report(report.lines())





@app.command("build")
def build_command(
    profile: ProfileOpt = None,
    base_image: Annotated[str | None, typer.Option(
        "--base-image", help="Build on this image instead of the profile's image.base "
        "(e.g. a local stand-in); its digest is locked like the profile's.")] = None,
    tag: Annotated[str | None, typer.Option(
        "--tag", help="Tag to build (default: <repository>:<sglang version>-<content hash>).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Rebuild even if the tag exists; re-lock a base whose digest moved.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the plan (base, tag, patch set, build args); no engine needed.")] = False,
) -> None:
    """Build and verify the image `opsctl up` runs (exit 3 on any failure, 6 without a daemon)."""
    from opsctl.deploy.profiles import load_profile
    from opsctl.engine.dockerpy import Engine
    from opsctl.image import build as builder
    from opsctl.image.view import BuildView

    the_plan = builder.plan(load_profile(profile), base_image=base_image, tag=tag)
    if dry_run:
        for name, value in the_plan.describe():
            console.print(f"[bold]{name:>12}[/]  {value}", highlight=False, soft_wrap=True)
        return
    engine = Engine.connect()
    with BuildView(err_console, f"building {the_plan.repository} ({the_plan.profile})") as view:
        result = builder.build(the_plan, engine, force=force, on_event=view.on_event)
    if result.relocked:
        err_console.print(f"[bold yellow]re-locked[/] {result.base.ref} -> {result.base.digest} "
                          f"in {the_plan.lock_path}", highlight=False, soft_wrap=True)
    state = "up to date" if result.skipped else f"built and verified ({len(result.checks)} checks)"
    err_console.print(f"[green]{state}:[/] {result.tag}", highlight=False, soft_wrap=True)
    console.print(result.tag, highlight=False, soft_wrap=True)


@app.command("base-image")
def base_image_command(
    sglang_standin: Annotated[str | None, typer.Option(
        "--sglang-standin", metavar="VERSION", help="Also build opsctl/sglang-standin:VERSION "
        "(the base + the real sglang wheel, --no-deps) for testing the real Dockerfile.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if present.")] = False,
) -> None:
    """Build the local Debian base (debootstrap + docker import; needs root) for hosts without a registry."""
    from opsctl.engine.dockerpy import Engine
    from opsctl.image import baseimage
    from opsctl.image.view import BuildView

    engine = Engine.connect()
    with BuildView(err_console, "building base images") as view:
        results = [baseimage.build_debian_base(engine, force=force, on_event=view.on_event)]
        if sglang_standin:
            results.append(baseimage.build_standin(engine, sglang_standin, force=force,
                                                   on_event=view.on_event))
    for result in results:
        state = "present" if result.skipped else "built"
        console.print(f"{result.ref} {state} ({result.image_id[:19]})", highlight=False)

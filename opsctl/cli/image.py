"""Commands of the image room: build, base-image, patch check/apply, sglang-args extract.

Typer declarations only: options in, opsctl.image.app called, its result handed to image/view.py.
Imports happen inside the commands, so `opsctl --help` does not load docker or pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, command_group, console, err_console, non_empty

sglang_args_app = command_group(
    "The pinned sglang releases' real argument parsers and image stacks, read from their wheels.")
app.add_typer(sglang_args_app, name="sglang-args")
patch_app = command_group("Check and apply the gather-then-cast patch sets.")
app.add_typer(patch_app, name="patch")


@sglang_args_app.command("extract")
def sglang_args_extract(
    version: Annotated[str, typer.Option("--version", help="sglang release, e.g. 0.5.23.")],
    wheel_dir: Annotated[Path | None, typer.Option(
        "--wheel-dir", help="Wheel cache (default $OPSCTL_WHEEL_CACHE, else "
        "/var/cache/opsctl-wheels for root, ~/.cache/opsctl-wheels for a user).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", help="Write here instead of patches/sglang/<version>/cli-args.json.")] = None,
) -> None:
    """Record sglang's parser from the real wheel into patches/sglang/<version>/cli-args.json."""
    from opsctl.image import app as image_app
    from opsctl.image import view

    view.show_extraction(console, image_app.sglang_args_extract(version, wheel_dir, output))


@sglang_args_app.command("stack")
def sglang_args_stack(
    version: Annotated[str, typer.Option("--version", help="sglang release, e.g. 0.5.23.")],
    wheel_dir: Annotated[Path | None, typer.Option(
        "--wheel-dir", help="Wheel cache (default $OPSCTL_WHEEL_CACHE, else "
        "/var/cache/opsctl-wheels for root, ~/.cache/opsctl-wheels for a user).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", help="Write here instead of patches/sglang/<version>/stack.json.")] = None,
) -> None:
    """Record what the release's image holds (its == pins) and whether its transformers loads
    GLM-5."""
    from opsctl.image import app as image_app
    from opsctl.image import view

    view.show_stack(console, image_app.sglang_args_stack(version, wheel_dir, output))


@patch_app.command("check")
def patch_check(
    sglang_src: Annotated[Path | None, typer.Option(
        "--sglang-src", help="Directory holding the sglang package (unpacked wheel or "
        "site-packages).")] = None,
    sglang_version: Annotated[str | None, typer.Option(
        "--sglang-version", help="Download this sglang release (pip download --no-deps, cached "
        "in $OPSCTL_WHEEL_CACHE) and check against it.")] = None,
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's or release's version).")] = None,
) -> None:
    """Apply a patch set to a temporary copy of a real sglang tree, with zero fuzz."""
    from opsctl.image import app as image_app
    from opsctl.image import view

    view.show_patch_report(console, image_app.patch_check(sglang_src, sglang_version, version))


@patch_app.command("apply")
def patch_apply(
    sglang_src: Annotated[Path, typer.Option(
        "--sglang-src", help="Directory holding the sglang package, patched in place.")],
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's version).")] = None,
) -> None:
    """Verify, then patch a real sglang tree in place (the build's code path)."""
    from opsctl.image import app as image_app
    from opsctl.image import view

    view.show_patch_report(console, image_app.patch_apply(sglang_src, version))


@app.command("build")
def build_command(
    profile: ProfileOpt = None,
    variant: Annotated[
        str | None,
        typer.Option(
            "--variant",
            "-v",
            help="Only the image this variant runs (default: every image the "
            "profile's variants need, one per sglang release).",
            callback=non_empty,
        ),
    ] = None,
    base_image: Annotated[
        str | None,
        typer.Option(
            "--base-image",
            help="Build on this image instead of the image's base (e.g. a local "
            "stand-in); its digest is locked like the profile's. Names one image.",
        ),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(
            "--tag",
            help="Tag to build (default: <repository>:<sglang version>-<content hash>). "
            "Names one image.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Rebuild even if the tag exists; re-lock a base whose digest moved."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print each image's plan (base, tag, patch set, build args); no engine needed.",
        ),
    ] = False,
    push: Annotated[
        str | None,
        typer.Option(
            "--push",
            metavar="REGISTRY/REPO",
            help="After verification, push each image as "
            "REGISTRY/REPO:<its tag> with docker's own credentials (`docker login`) and record the "
            "registry's digest for `opsctl render`.",
        ),
    ] = None,
) -> None:
    """Build and verify the images `opsctl up` runs (exit 3 on any failure, 6 without a daemon)."""
    from opsctl.config.profiles import load_profile
    from opsctl.engine.dockerpy import connect
    from opsctl.image import app as image_app
    from opsctl.image import view
    from opsctl.image.basecheck import host_driver

    repository = image_app.push_repository(push) if push is not None else None
    the_plans = image_app.build_plans(load_profile(profile), variant=variant,
                                      base_image=base_image, tag=tag)
    if dry_run:
        view.show_plans(console, the_plans, push_to=repository)
        return
    engine = connect()
    view.show_base_notes(err_console, image_app.check_bases(the_plans, engine, host_driver()))
    for the_plan in the_plans:
        with view.BuildView(err_console, view.build_title(the_plan)) as live:
            result = image_app.build(the_plan, engine, force=force, on_event=live.on_event)
        view.show_build(console, err_console, the_plan, result)
        if repository is not None:
            with view.BuildView(err_console, f"pushing {result.tag} to {repository}") as live:
                pushed = image_app.push(result, engine, repository, on_event=live.on_event)
            view.show_push(console, err_console, pushed)


@app.command("base-image")
def base_image_command(
    sglang_standin: Annotated[str | None, typer.Option(
        "--sglang-standin", metavar="VERSION", help="Also build opsctl/sglang-standin:VERSION "
        "(the base + the real sglang wheel, --no-deps) for testing the real Dockerfile.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if present.")] = False,
) -> None:
    """Build the local Debian base (debootstrap + docker import; needs root) for hosts without a
    registry."""
    from opsctl.engine.dockerpy import connect
    from opsctl.image import app as image_app
    from opsctl.image import view

    engine = connect()
    with view.BuildView(err_console, "building base images") as live:
        results = image_app.base_image(engine, sglang_standin, force=force, on_event=live.on_event)
    view.show_base_images(console, results)

"""Everything `opsctl render` prints: the files written (stdout, for scripts) and, to stderr, the
notes and the loud warning when the image is a local tag no cluster can pull."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from opsctl.render.app import RenderResult


def show_render(console: Console, err_console: Console, result: RenderResult) -> None:
    for path in result.files:
        console.print(Text(str(path)))
    kinds = ", ".join(f"{kind} {name}" for kind, name in result.objects)
    err_console.print(Text(f"rendered {len(result.objects)} objects into {result.out}: {kinds}"))
    for name in result.removed:
        err_console.print(
            Text(f"removed {result.out / name}: the earlier render's, not in this one")
        )
    err_console.print(Text(f"image: {result.image}" + ("" if result.pushed else " (local tag)")))
    for note in result.notes:
        err_console.print(Text(f"note: {note}", style="yellow"))
    if not result.pushed:
        err_console.print(Text(
            f"WARNING: NOT DEPLOYABLE: {result.image} is a local tag that no cluster node can "
            "pull. Run `opsctl build --push REGISTRY/REPO`, then `opsctl render k8s` again: the "
            "manifests will name the image by the registry's digest.", style="bold red"))

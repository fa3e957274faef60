"""The verify command."""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, within


@app.command()
def verify(
    base_url: Annotated[str, typer.Option("--base-url", help="The server to check.")],
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    json_path: Annotated[str | None, typer.Option(
        "--json", help="Also write the result as JSON here (overwritten).")] = None,
    log_file: Annotated[str | None, typer.Option(
        "--log", help="The server's log (e.g. `opsctl logs > up.log`): checks the patch's "
        "start-up line; without it that check is unknown.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request.",
                                           callback=within(0.01, 3600))] = 10.0,
) -> None:
    """Check what the server resolved (/server_info, /model_info) against the variant's flags
    and the pinned sglang's defaults, and whether the patched path is active.

    The API key comes from $OPSCTL_API_KEY. Exit 0 when nothing mismatches (unknown fields are
    listed with the reason), 2 bad profile or variant, 4 a mismatch or an unreachable server.
    """
    import json
    from pathlib import Path

    from opsctl.config.profiles import load_profile
    from opsctl.core.files import atomic_write_text, check_output_path
    from opsctl.core.httpcap import capped_client, checked_base_url
    from opsctl.core.redact import api_key_from_env, auth_headers
    from opsctl.verify.app import raise_on_mismatch, read_log, run_verify
    from opsctl.verify.view import show_verify

    checked_base_url(base_url, "--base-url")
    if json_path:
        check_output_path(Path(json_path), "--json")
    deployment = load_profile(profile).resolve(variant)
    log_text = read_log(Path(log_file)) if log_file else None
    with capped_client(base_url=base_url.rstrip("/"), headers=auth_headers(api_key_from_env()),
                       timeout_s=timeout) as client:
        result = run_verify(deployment, client, log_text=log_text, expect=deployment.expect,
                            timeout_s=timeout)
    show_verify(result, console)
    if json_path:
        atomic_write_text(Path(json_path), json.dumps(result.to_json(), indent=2) + "\n")
    raise_on_mismatch(result)

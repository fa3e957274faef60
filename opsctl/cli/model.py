"""`opsctl model fetch`: the variant's checkpoint from the Hugging Face hub, checked."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, command_group, console, err_console

model_app = command_group("The checkpoint a profile serves: download it and check it.")
app.add_typer(model_app, name="model")


@model_app.command("fetch")
def fetch(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would be downloaded where (as JSON) and stop.")] = False,
) -> None:
    """Download the variant's checkpoint (model.repo at model.revision; an MTP variant may name
    its own) into model.host_path: only the files serving reads, one at a time, each resumed
    where an earlier run stopped; the token from the variable model.token_env names
    (HF_TOKEN); HF_ENDPOINT points at a mirror. Then check the folder as `up`'s preflight does
    (config.json, the shards against the index, the NextN layer for MTP). Exit 0 when it is
    whole and checks, 2 for a repository, revision or token the hub refuses, 7 (host not
    ready) for too little disk, no network or a checkpoint that fails a check, 130
    interrupted (run it again to resume)."""
    import os

    from opsctl.config.profiles import load_profile
    from opsctl.core.text import printable
    from opsctl.deploy import weights

    deployment = load_profile(profile).resolve(variant)
    if dry_run:
        console.print_json(json.dumps(weights.describe(deployment)))
        return
    hub = weights.Hub(token=os.environ.get(deployment.model.token_env) or None)
    # What the hub and the checkpoint say is printed escaped: no control sequence of theirs
    # reaches the terminal.
    result = weights.fetch(deployment, hub,
                           say=lambda line: err_console.print(printable(line), highlight=False,
                                                              soft_wrap=True))
    for check in result.checks:
        console.print(printable(f"{check.check}: {check.detail}"), highlight=False,
                      soft_wrap=True)
    console.print(f"checkpoint ready: {result.deployment.model.host_path} "
                  f"({result.listing.commit}, {result.fetched} of {len(result.listing.files)} "
                  "files fetched by this run)", highlight=False, soft_wrap=True)

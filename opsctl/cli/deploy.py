"""Commands of the deploy room: profile show/schema, up, down, status, logs, host p2p."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import (
    ProfileOpt,
    VariantOpt,
    app,
    command_group,
    console,
    err_console,
    image_ref,
    non_empty,
    within,
)
from opsctl.config.profile_checks import MAX_READINESS_SECONDS

if TYPE_CHECKING:
    from opsctl.cli.root import Root
    from opsctl.config.profiles import Deployment
    from opsctl.deploy.launch import Launch

profile_app = command_group("Inspect deployment profiles.")
app.add_typer(profile_app, name="profile")
host_app = command_group("Check the GPU host a profile runs on.")
app.add_typer(host_app, name="host")


@profile_app.command("show")
def profile_show(profile: ProfileOpt = None, variant: VariantOpt = None) -> None:
    """Validate a profile; print a variant's sglang argv, then each variant's release, what it
    computes on the model and its release's warnings."""
    from opsctl.config import review
    from opsctl.config.profiles import load_profile
    from opsctl.deploy import view

    shown = review.show(load_profile(profile), variant)
    console.print(view.profile_text(shown), highlight=False, soft_wrap=True, markup=False)


@profile_app.command("resolve")
def profile_resolve(
    profile: ProfileOpt = None,
    variant: Annotated[
        str | None,
        typer.Option(
            "--variant",
            "-v",
            help="Variant of the profile (default: every variant).",
            callback=non_empty,
        ),
    ] = None,
    gpu_name: Annotated[
        str | None,
        typer.Option(
            help="GPU reported to sglang (default: the profile's target, RTX PRO 6000 Blackwell).",
            callback=non_empty,
        ),
    ] = None,
    gpu_count: Annotated[
        int | None,
        typer.Option(
            help="GPUs reported (default: the profile's container.gpus, else its tp_size).",
            callback=within(1, 64),
        ),
    ] = None,
    gpu_memory_gb: Annotated[
        float | None,
        typer.Option(help="GiB per GPU reported (default: the GPU's).", callback=within(1, 4096)),
    ] = None,
    compute_capability: Annotated[
        str | None, typer.Option(help="MAJOR.MINOR reported (default: the GPU's, 12.0).")
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            help="A GLM-5-shaped config.json (default: the one written from the profile's "
            "model.repo card, tests/fixtures/glm5*/config.json)."
        ),
    ] = None,
    write_records: Annotated[
        bool,
        typer.Option(
            "--write-records",
            help="Resolve every variant of every profile under deploy/ on its "
            "target GPU and write patches/sglang/<version>/resolved/<profile>.<variant>.json.",
        ),
    ] = False,
) -> None:
    """Run the pinned sglang's own ServerArgs resolution offline (CPU, real wheel) and print
    what /server_info will say on the box: backends, KV dtype and row, page size, CUDA graphs,
    MoE runner, speculative settings and every setting the profile left to sglang.

    The first run downloads what it needs, each announced first: the release's wheel into the
    wheel cache ($OPSCTL_WHEEL_CACHE), its side environment (the transformers it pins) from
    PyPI and, when opsctl's environment has no torch (pipx, uv tool), the CPU torch from
    PyTorch's CPU index; all cached under the wheel cache's resolve/."""
    from opsctl.config import resolve
    from opsctl.config.profiles import load_profile
    from opsctl.core.errors import UsageError
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view

    gpu_options = (gpu_name, gpu_count, gpu_memory_gb, compute_capability, model_config)
    if write_records:
        if profile or variant or any(option is not None for option in gpu_options):
            raise UsageError("--write-records takes no other option",
                             hint="records are of every variant on the profiles' target GPU")
        profiles = [load_profile(name) for name in resolve.record_profiles()]
        deployments = [p.resolve(name) for p in profiles for name in p.variants]
    else:
        loaded = load_profile(profile)
        deployments = [loaded.resolve(name) for name in ([variant] if variant else
                                                           loaded.variants)]

    def gpu_for(deployment: Deployment) -> resolve.GpuReport:
        return resolve.gpu_report(deployment, gpu_name, gpu_count, gpu_memory_gb,
                                  compute_capability)

    for deployment in deployments:
        gpu_for(deployment)  # option errors before the wheel is touched
    result = deploy_app.profile_resolve(deployments, gpu_for, model_config, write_records,
                                        on_note=view.note(err_console))
    console.print(view.resolve_text(result), highlight=False, soft_wrap=True, markup=False)
    if not write_records:
        resolve.raise_on_refusal(result.resolved)


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON schema of a deployment profile."""
    from opsctl.config.profiles import profile_schema as schema

    console.print_json(json.dumps(schema()))


def _profile_name(profile: str | None) -> str | None:
    """The name a profile option (a name or a YAML path) stands for; None means every profile.

    A plain name that names no loadable profile under deploy/ is taken as the profile label
    itself: the containers of a profile that was given as a path carry its name, and the hints
    opsctl prints after a failure (`opsctl down --profile NAME`) must work for them too. A
    path must load (its name is inside it)."""
    from opsctl.config.profiles import load_profile, profile_is_path
    from opsctl.core.errors import OpsctlError

    if not profile:
        return None
    try:
        return load_profile(profile).name
    except OpsctlError:
        if profile_is_path(profile):
            raise
        return profile


@app.command()
def up(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the docker run and sglang argv; touch nothing."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(help="Readiness timeout in seconds (default: the profile's).",
                     callback=within(0.01, MAX_READINESS_SECONDS)),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace a running deployment with another configuration."),
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(help="Run this image instead of the one `opsctl build` made.",
                     callback=image_ref),
    ] = None,
    no_verify: Annotated[
        bool,
        typer.Option("--no-verify", help="Once ready, do not check what the server resolved "
                     "(/server_info, /model_info, the patch's start-up line) against the "
                     "profile; `status` then says 'not verified'."),
    ] = False,
    gate: Annotated[
        bool,
        typer.Option("--gate", help="Gated rollout: stop what runs, start the variant, verify, "
                     "smoke it (with the evals the profile configures) and compare its greedy "
                     "outputs with the last good variant's; any failure removes it, brings the "
                     "last good back and exits 5; a pass makes it the last good."),
    ] = False,
    pushgateway: Annotated[
        str | None,
        typer.Option("--pushgateway", help="With --gate: push the outcome (opsctl_gate_*) and "
                     "the smoke metrics here (default: $OPSCTL_PUSHGATEWAY; unset: no push)."),
    ] = None,
    skip_preflight: Annotated[
        bool,
        typer.Option("--skip-preflight", help="Experts: start without first loading the "
                     "checkpoint's config.json, tokenizer and shard index (and an MTP "
                     "variant's NextN weights) in a throwaway container of the image."),
    ] = False,
) -> None:
    """Launch the profile's server (a variant), wait until it truly serves, and verify that it
    resolved what the profile says (a mismatch removes it: exit 4).

    While it waits it prints a line per start-up phase that the server's log announces (weights
    loading, KV cache, CUDA graphs capturing, listening, warmed up) with the time since start,
    and a "still ..." line at least every 30 s, on a terminal or not (piped, nohup, systemd).

    First, in seconds, the preflight: a throwaway container of the variant's image (no network,
    no GPU, the checkpoint mounted read-only) loads config.json and the tokenizer with the
    image's own transformers and sglang, checks that the safetensors index names only shards
    that exist, and, for an MTP variant, that the checkpoint holds the NextN layer; any failure
    exits 4 with one line before anything is replaced or started (--skip-preflight skips it).

    The verdict and the checkpoint id (sha256 of the weights' config.json and safetensors index,
    hashed on this host) are kept in the state directory ($OPSCTL_STATE_DIR, else
    $XDG_STATE_HOME/opsctl, else ~/.local/state/opsctl), and so is the last good variant of
    `--gate`. Ctrl-C removes what this run started (with --gate, then brings the last good back);
    a second Ctrl-C leaves it running and names it. Every server removed (a failed start,
    --replace) has its whole log saved to out/logs/ first. Another opsctl run changing the same
    profile makes this one refuse at once (exit 4).
    """
    from opsctl.cli.root import Root, gateway_from
    from opsctl.config.profiles import load_profile
    from opsctl.config.review import summary
    from opsctl.core.errors import UsageError
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view

    if gate and (dry_run or no_verify or replace):
        raise UsageError("--gate cannot be combined with --dry-run, --no-verify or --replace",
                         hint="a gate always replaces what runs, and always verifies")
    if pushgateway and not gate:
        raise UsageError("--pushgateway applies to --gate only",
                         hint="`opsctl smoke --pushgateway` pushes a smoke run's metrics")
    deployment = load_profile(profile).resolve(variant)
    root = Root(image)
    if dry_run:
        plan = deploy_app.dry_run(deployment, root.image_for, preflight=not skip_preflight)
        console.print(view.dry_run_text(plan), highlight=False, soft_wrap=True, markup=False)
        return
    view.print_warnings(err_console, summary(deployment))
    launch = root.launch(verify=not no_verify, preflight=not skip_preflight)
    if gate:
        _run_gate(root, launch, deployment, timeout, gateway_from(pushgateway))
        return
    with view.up_progress(console, deployment) as on_progress:
        result = launch.up(deployment, timeout_seconds=timeout, replace=replace,
                           on_progress=on_progress, on_note=view.note(err_console))
    view.print_up(console, result)


def _run_gate(root: Root, launch: Launch, deployment: Deployment,
              timeout: float | None, gateway: str | None) -> None:
    from opsctl.deploy import view
    from opsctl.gate import gate
    from opsctl.gate import view as gate_view

    result = gate.gate(
        deployment, launch=launch, traffic=root.traffic(), timeout_seconds=timeout,
        progress=lambda shown: view.up_progress(console, shown),
        on_step=gate_view.gate_step(console), push=root.push, gateway=gateway,
    )
    gate_view.print_gate(console, result)
    if result.error is not None:
        raise result.error


@app.command()
def down(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", help="Only this profile's server (default: all of opsctl's)."
        ),
    ] = None,
    grace: Annotated[
        int | None,
        typer.Option(help="Seconds to let the server stop before it is killed.", min=0, max=3600),
    ] = None,
) -> None:
    """Stop and remove opsctl's server containers (found by label; nothing else is touched),
    each one's whole log saved first (secrets masked, as `opsctl logs` does) to
    out/logs/<profile>-<variant>-<id>-<UTC time>.log."""
    from opsctl.cli.root import Root
    from opsctl.deploy import view

    launch = Root().launch()
    view.print_down(console, launch.down(_profile_name(profile), grace_seconds=grace,
                                         on_note=view.note(err_console)))


@app.command()
def status(
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the deployments as one JSON object ({\"servers\": [...]}, the "
        "table's columns as keys) instead of the table.")] = False,
) -> None:
    """Show opsctl's deployments: profile, variant, image, patch sha, uptime, readiness, the
    health check, restarts by the restart policy (a crash loop says so), the last exit, and
    `up`'s verdict (verified / MISMATCH: fields / not verified)."""
    from opsctl.cli.root import Root
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view

    root = Root()
    result = deploy_app.status(root.engine, state=root.state)
    if as_json:
        console.print(view.status_json(result), highlight=False, soft_wrap=True)
        return
    console.print(view.status_table(result))


@app.command()
def logs(
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Whose logs (default: the only server)."),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming.")] = False,
    tail: Annotated[int, typer.Option(help="Lines from the end.", min=0, max=1_000_000)] = 100,
) -> None:
    """Print the server container's log, secrets masked: the values of the host variables its
    profile names (server.api_key_env, container.env_from_host), the API key, URL credentials."""
    from opsctl.cli.root import Root
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view

    chunks = deploy_app.logs(Root().engine, _profile_name(profile), follow=follow, tail=tail)
    view.write_logs(chunks, sys.stdout)



@host_app.command("p2p")
def host_p2p() -> None:
    """Whether GPU P2P across the root complex is reported OK here, and whether
    NCCL_P2P_LEVEL=SYS (container.nccl_p2p_level) is advisable (exit 7, host not ready, as
    `doctor`, when nvidia-smi is missing or cannot read the topology)."""
    from opsctl.deploy import hostcheck, view

    console.print(view.host_p2p_text(hostcheck.check_p2p()), highlight=False, soft_wrap=True,
                  markup=False)

"""Commands of the deploy room: profile show/schema, up, down, status, logs, host p2p."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, command_group, console, err_console, image_ref, within
from opsctl.config.profile_checks import MAX_READINESS_SECONDS

if TYPE_CHECKING:
    from opsctl.config.profiles import Deployment
    from opsctl.deploy.app import ImageFor
    from opsctl.deploy.state import StateDir
    from opsctl.engine.api import Engine
    from opsctl.gate.gate import SmokeAsk
    from opsctl.traffic.app import SmokeRequest
    from opsctl.traffic.smoke_report import SmokeReport
    from opsctl.verify.app import VerifyResult

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
    variant: Annotated[str | None, typer.Option(
        "--variant", "-v", help="Variant of the profile (default: every variant).")] = None,
    gpu_name: Annotated[str | None, typer.Option(
        help="GPU reported to sglang (default: the profile's target, RTX PRO 6000 Blackwell).")
    ] = None,
    gpu_count: Annotated[int | None, typer.Option(
        help="GPUs reported (default: the profile's container.gpus, else its tp_size).",
        callback=within(1, 64))] = None,
    gpu_memory_gb: Annotated[float | None, typer.Option(
        help="GiB per GPU reported (default: the GPU's).", callback=within(1, 4096))] = None,
    compute_capability: Annotated[str | None, typer.Option(
        help="MAJOR.MINOR reported (default: the GPU's, 12.0).")] = None,
    model_config: Annotated[Path | None, typer.Option(
        help="A GLM-5-shaped config.json (default: tests/fixtures/glm5/config.json).")] = None,
    write_records: Annotated[bool, typer.Option(
        "--write-records", help="Resolve every variant of every profile under deploy/ on its "
        "target GPU and write sglang-args/<version>/resolved/<profile>.<variant>.json.")] = False,
) -> None:
    """Run the pinned sglang's own ServerArgs resolution offline (CPU, real wheel) and print
    what /server_info will say on the box: backends, KV dtype and row, page size, CUDA graphs,
    MoE runner, speculative settings and every setting the profile left to sglang."""
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
    result = deploy_app.profile_resolve(deployments, gpu_for, model_config, write_records)
    console.print(view.resolve_text(result), highlight=False, soft_wrap=True, markup=False)
    if not write_records:
        resolve.raise_on_refusal(result.resolved)


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON schema of a deployment profile."""
    from opsctl.config.profiles import profile_schema as schema

    console.print_json(json.dumps(schema()))


def _image_for(image: str | None) -> ImageFor:
    """`--image` as given, else the tag `opsctl build` makes for the profile."""
    if image:
        return lambda _: image

    def expected(deployment: Deployment) -> str:
        from opsctl.image.plan import expected_image

        return expected_image(deployment)

    return expected


def _profile_name(profile: str | None) -> str | None:
    """The name a profile option (a name or a YAML path) stands for; None means every profile."""
    from opsctl.config.profiles import load_profile

    return load_profile(profile).name if profile else None


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
    from opsctl.config.profiles import load_profile
    from opsctl.config.review import summary
    from opsctl.core.errors import UsageError
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view
    from opsctl.deploy.preflight import run_preflight
    from opsctl.deploy.state import StateDir
    from opsctl.engine.dockerpy import connect

    if gate and (dry_run or no_verify or replace):
        raise UsageError("--gate cannot be combined with --dry-run, --no-verify or --replace",
                         hint="a gate always replaces what runs, and always verifies")
    if pushgateway and not gate:
        raise UsageError("--pushgateway applies to --gate only",
                         hint="`opsctl smoke --pushgateway` pushes a smoke run's metrics")
    deployment = load_profile(profile).resolve(variant)
    if dry_run:
        plan = deploy_app.dry_run(deployment, _image_for(image), preflight=not skip_preflight)
        console.print(view.dry_run_text(plan), highlight=False, soft_wrap=True, markup=False)
        return
    view.print_warnings(err_console, summary(deployment))
    engine = connect()
    state = StateDir.default()
    if gate:
        _run_gate(deployment, profile, engine, image, state, timeout, pushgateway, skip_preflight)
        return
    with view.up_progress(console, deployment) as on_progress:
        result = deploy_app.up(deployment, engine=engine, image_for=_image_for(image),
                               timeout_seconds=timeout, replace=replace, on_progress=on_progress,
                               verify=None if no_verify else _verify_server, state=state,
                               on_note=view.note(err_console),
                               preflight=None if skip_preflight else run_preflight)
    view.print_up(console, result)


def _verify_server(deployment: Deployment, base_url: str, log_text: str) -> VerifyResult:
    """The verify room's check of a ready server against the variant's flags and its `expect`
    (the API key from $OPSCTL_API_KEY)."""
    from opsctl.core.httpcap import capped_client
    from opsctl.core.redact import api_key_from_env, auth_headers
    from opsctl.verify.app import run_verify

    with capped_client(headers=auth_headers(api_key_from_env()), base_url=base_url) as client:
        return run_verify(deployment, client, log_text=log_text, expect=deployment.expect)


def _run_gate(deployment: Deployment, profile: str | None, engine: Engine, image: str | None,
              state: StateDir, timeout: float | None, pushgateway: str | None,
              skip_preflight: bool) -> None:
    from opsctl.cli.traffic import gateway_from
    from opsctl.deploy import view
    from opsctl.deploy.ownership import profile_locks
    from opsctl.deploy.preflight import run_preflight
    from opsctl.gate import gate
    from opsctl.gate import view as gate_view
    from opsctl.observe.metrics import push_report

    gateway = gateway_from(pushgateway)
    # One lock for the whole gate: its down, up and rollback are one change of the profile.
    with profile_locks(state, [deployment.profile.name], "up --gate"):
        result = gate.gate(
            deployment, engine=engine, image_for=_image_for(image), state=state,
            verify=_verify_server, smoke=GateSmoke(profile, gateway), timeout_seconds=timeout,
            progress=lambda shown: view.up_progress(console, shown),
            on_step=gate_view.gate_step(console), push=push_report, gateway=gateway,
            preflight=None if skip_preflight else run_preflight,
        )
    gate_view.print_gate(console, result)
    if result.error is not None:
        raise result.error


class GateSmoke:
    """The traffic room's smoke as `up --gate` runs it: the server by URL, the evals the profile
    configures, the last good report as the reference, `opsctl smoke`'s default timeouts."""

    REQUEST_TIMEOUT_S = 120.0
    OVERALL_TIMEOUT_S = 600.0

    def __init__(self, profile: str | None, gateway: str | None) -> None:
        self.profile = profile  # as given (a name or a YAML path): smoke loads it the same way
        self.gateway = gateway

    def _request(self, ask: SmokeAsk) -> SmokeRequest:
        from opsctl.core.redact import api_key_from_env
        from opsctl.traffic.app import SmokeRequest
        from opsctl.traffic.smoke_evals import eval_request
        from opsctl.traffic.view import eval_progress

        return SmokeRequest(
            profile=self.profile or ask.deployment.profile.name, variant=ask.deployment.variant,
            base_url=ask.base_url, model=None, api="completions", api_key=api_key_from_env(),
            json_path=ask.report, compare_with=ask.compare_with,
            request_timeout_s=self.REQUEST_TIMEOUT_S, overall_timeout_s=self.OVERALL_TIMEOUT_S,
            gateway=self.gateway,
            evals=eval_request("gsm8k" if ask.gsm8k else None, long_context=ask.long_context),
            progress=eval_progress(err_console),
        )

    def check(self, ask: SmokeAsk) -> None:
        from opsctl.traffic.evals.dataset import load_gsm8k
        from opsctl.traffic.smoke_evals import plan_evals

        plan_evals(self._request(ask).evals, ask.deployment.profile.eval, load_gsm8k)

    def run(self, ask: SmokeAsk) -> SmokeReport:
        from opsctl.cli.traffic import locate_server
        from opsctl.observe.metrics import push_report
        from opsctl.traffic import app as traffic
        from opsctl.traffic.client import make_client
        from opsctl.traffic.evals.dataset import load_gsm8k

        result = traffic.smoke(self._request(ask), locate=locate_server, push=push_report,
                               client_factory=make_client, load_dataset=load_gsm8k)
        return result.report


@app.command()
def down(
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Only this profile's server (default: all of opsctl's)."),
    ] = None,
    grace: Annotated[
        int | None,
        typer.Option(help="Seconds to let the server stop before it is killed.", min=0,
                     max=3600),
    ] = None,
) -> None:
    """Stop and remove opsctl's server containers (found by label; nothing else is touched),
    each one's whole log saved first to out/logs/<profile>-<variant>-<id>-<UTC time>.log."""
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view
    from opsctl.deploy.state import StateDir
    from opsctl.engine.dockerpy import connect

    engine = connect()
    view.print_down(console, deploy_app.down(engine, _profile_name(profile), grace,
                                             state=StateDir.default(),
                                             on_note=view.note(err_console)))


@app.command()
def status() -> None:
    """Show opsctl's deployments: profile, variant, image, patch sha, uptime, readiness, the
    health check, restarts by the restart policy (a crash loop says so), the last exit, and
    `up`'s verdict (verified / MISMATCH: fields / not verified)."""
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view
    from opsctl.deploy.state import StateDir
    from opsctl.engine.dockerpy import connect

    console.print(view.status_table(deploy_app.status(connect(), state=StateDir.default())))


@app.command()
def logs(
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Whose logs (default: the only server)."),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming.")] = False,
    tail: Annotated[int, typer.Option(help="Lines from the end.", min=0, max=1_000_000)] = 100,
) -> None:
    """Print the server container's log."""
    from opsctl.deploy import app as deploy_app
    from opsctl.deploy import view
    from opsctl.engine.dockerpy import connect

    engine = connect()
    view.write_logs(deploy_app.logs(engine, _profile_name(profile), follow=follow, tail=tail), sys.stdout)



@host_app.command("p2p")
def host_p2p() -> None:
    """Whether GPU P2P across the root complex is reported OK here, and whether
    NCCL_P2P_LEVEL=SYS (container.nccl_p2p_level) is advisable (exit 4 without nvidia-smi)."""
    from opsctl.deploy import hostcheck, view

    console.print(view.host_p2p_text(hostcheck.check_p2p()), highlight=False, soft_wrap=True,
                  markup=False)

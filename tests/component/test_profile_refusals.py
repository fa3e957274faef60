"""Hostile and careless profiles: each is refused by `opsctl profile show` as one line, exit 2.

Covers what a profile file can be (not UTF-8, unreadable, a directory, too big, too deep,
recursive or exponential aliases), what its values can be (a `../` name, a host name as the
publish address, a size Docker refuses, an hour-long grace), `extra_args` that repeat a typed
flag (also abbreviated or by alias) or carry a secret, and secrets in the container env. Merge
keys load, and secrets named by variable never show their value outside the running container.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from unprivileged import without_dac_override

from opsctl.config.profiles import load_profile
from opsctl.config.runspec import run_spec
from opsctl.core.errors import ProfileError
from opsctl.core.paths import project_root

SIM = (project_root() / "deploy" / "sim.yaml").read_text()
SECRET = "sk-sentinel-value-4242"


def opsctl(*args: str, user: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPSCTL_API_KEY", "HF_TOKEN")}
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**clean, **env}, timeout=120, stdin=subprocess.DEVNULL,
                          preexec_fn=without_dac_override if user else None)


def refused(path: Path, says: str, **env: str) -> str:
    run = opsctl("profile", "show", "--profile", str(path), **env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    return errors[0]


def edited(tmp_path: Path, old: str, new: str, name: str = "p.yaml") -> Path:
    assert old in SIM, old
    path = tmp_path / name
    path.write_text(SIM.replace(old, new, 1))
    return path


def with_server(tmp_path: Path, line: str) -> Path:
    return edited(tmp_path, "  watchdog_timeout: 1800\n", f"  watchdog_timeout: 1800\n  {line}\n")


# --- the file itself ------------------------------------------------------------------------------

LAUGHS = "\n".join([
    'a: &a ["x","x","x","x","x","x","x","x","x"]',
    *(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcde", "bcdef", strict=True)),
]) + "\n"
FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "not-utf8": (
        lambda p: p.write_bytes(SIM.encode().replace(b"glm-5", b"glm-\xff5")),
        "not UTF-8",
    ),
    "latin1": (
        lambda p: p.write_bytes(SIM.replace("glm-5", "glm-\u00e9").encode("latin-1")),
        "not UTF-8",
    ),
    "directory": (lambda p: p.mkdir(), "is a directory"),
    "over-1MiB": (lambda p: p.write_text(SIM + "#" * (1 << 20)), "larger than 1 MiB"),
    "5000-deep": (lambda p: p.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n"), "deeper than 64"),
    "5000-deep-maps": (
        lambda p: p.write_text("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n"),
        "deeper than 64",
    ),
    "recursive-alias": (lambda p: p.write_text("a: &a [*a]\n"), "recursive alias"),
    "recursive-map": (lambda p: p.write_text("a: &a {b: *a}\n"), "recursive alias"),
    "billion-laughs": (lambda p: p.write_text(LAUGHS), "expand it past 100,000"),
    "many-aliases": (
        lambda p: p.write_text("a: &a 1\nb: [" + ",".join(["*a"] * 65) + "]\n"),
        "more than 64 aliases",
    ),
    "not-a-mapping": (lambda p: p.write_text("- 1\n- 2\n"), "must be a YAML mapping"),
    # Issue 25: a complex key was a TypeError traceback (unhashable type: 'list').
    "complex-key": (lambda p: p.write_text(SIM + "? [a, b]\n: c\n"), "keys must be scalars"),
    "complex-map-key": (lambda p: p.write_text(SIM + "? {a: 1}\n: c\n"), "keys must be scalars"),
    "fifo": (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),  # blocked forever
    "python-tag": (
        lambda p: p.write_text("a: !!python/object/apply:os.system [id]\n"),
        "invalid YAML",
    ),
    "empty": (lambda p: p.write_text(""), "must be a YAML mapping"),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_hostile_files_are_one_line_exit_2(tmp_path: Path, case: str) -> None:
    make, says = FILES[case]
    path = tmp_path / "profile.yaml"
    make(path)
    refused(path, says)


def test_an_unreadable_profile_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SIM)
    path.chmod(0o000)
    run = opsctl("profile", "show", "--profile", str(path), user=True)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot read" in run.stderr and "Permission denied" in run.stderr


def test_yaml_merge_keys_load_and_own_keys_override(tmp_path: Path) -> None:
    path = edited(tmp_path, "  gathercast:\n", "  merged:\n    <<: *base\n    description: own\n"
                  "  gathercast: &base\n")
    # The alias must follow its anchor: move the merged variant after gathercast.
    text = path.read_text()
    merged = "  merged:\n    <<: *base\n    description: own\n"
    text = text.replace(merged, "")
    text = text.replace("  bf16kv:\n", merged + "  bf16kv:\n", 1)
    path.write_text(text)
    profile = load_profile(str(path))
    assert profile.variants["merged"].requires_patch is True  # from gathercast
    assert profile.variants["merged"].description == "own"
    assert opsctl("profile", "show", "--profile", str(path), "--variant", "merged").returncode == 0


def test_a_duplicate_key_beside_a_merge_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SIM.replace("name: sim\n", "name: sim\nx: &x {a: 1}\n", 1)
                    .replace("description:", "<<: *x\ndescription:", 1) + "name: again\n")
    refused(path, "duplicate key 'name'")


# --- values ------------------------------------------------------------------------------------

VALUES = {
    "name-dotdot": ("name: sim\n", "name: ../../etc/evil\n", "is not a profile name"),
    "name-slash": ("name: sim\n", "name: a/b\n", "is not a profile name"),
    "name-upper": ("name: sim\n", "name: Sim\n", "is not a profile name"),
    "name-markup": ("name: sim\n", "name: '[/x]'\n", "'[/x]' is not a profile name"),
    "name-long": ("name: sim\n", f"name: {'a' * 64}\n", "is not a profile name"),
    "address-hostname": ("publish_address: 127.0.0.1", "publish_address: localhost",
                         "is not an IP address"),
    "address-empty": ("publish_address: 127.0.0.1", "publish_address: ''", "is not an IP address"),
    "shm-words": ("shm_size: 64m", "shm_size: lots", "is not a Docker size"),
    "shm-negative": ("shm_size: 64m", "shm_size: '-1g'", "is not a Docker size"),
    "grace-huge": ("stop_grace_seconds: 10", "stop_grace_seconds: 99999999999",
                   "less than or equal to 3600"),
    # Issue 25: each validated, then crashed (OverflowError, time.sleep) or waited unbounded.
    "readiness-inf": ("timeout_seconds: 120", "timeout_seconds: .inf", "finite number"),
    "readiness-nan": ("timeout_seconds: 120", "timeout_seconds: .nan", "finite number"),
    "readiness-huge": ("timeout_seconds: 120", "timeout_seconds: 1e12",
                       "less than or equal to 86400"),
    "poll-huge": ("poll_interval_seconds: 0.5", "poll_interval_seconds: 1e12",
                  "less than or equal to 60"),
    "poll-over-timeout": ("timeout_seconds: 120\n  poll_interval_seconds: 0.5",
                          "timeout_seconds: 20\n  poll_interval_seconds: 30",
                          "poll_interval_seconds (30) is longer than timeout_seconds (20)"),
    "mem-fraction-nan": ("mem_fraction_static: 0.85", "mem_fraction_static: .nan", "finite number"),
    "long-context-huge": ("sizes: [4096, 16384, 65536]", "sizes: [100000000000]",
                          "less than or equal to"),
    "secret-env": ("  env:\n", f"  env:\n    HF_TOKEN: {SECRET}\n", "HF_TOKEN looks like a secret"),
    "secret-env-password": ("  env:\n", "  env:\n    DB_PASSWORD: x\n", "looks like a secret"),
    "secret-env-variant": ('env: {OPSCTL_SIM_ITL_MS: "32", OPSCTL_SIM_ITL_SLOPE_MS: "0.3"}',
                           'env: {OPENAI_API_KEY: "x"}', "OPENAI_API_KEY looks like a secret"),
    "host-env-bad-name": ("  env:\n", "  env_from_host: ['A-B']\n  env:\n",
                          "is not an environment variable name"),
    "host-env-twice": ("  env:\n", "  env_from_host: [HF_TOKEN, HF_TOKEN]\n  env:\n",
                       "listed twice"),
    # Adversarial pass: Docker refuses a relative bind mount only at launch (exit 4, preflight).
    "host-path-relative": ("  container_path: /models/GLM-5-NVFP4",
                           "  host_path: weights/glm5\n  container_path: /models/GLM-5-NVFP4",
                           "an absolute path"),
    "container-path-relative": ("  container_path: /models/GLM-5-NVFP4",
                                "  container_path: models/GLM-5-NVFP4", "an absolute path"),
    "host-env-also-set": ("  env:\n", "  env_from_host: [OPSCTL_KV_GATHER_CAST]\n  env:\n",
                          "in env_from_host and set"),
}


@pytest.mark.parametrize("case", sorted(VALUES))
def test_bad_values_are_refused_at_load(tmp_path: Path, case: str) -> None:
    old, new, says = VALUES[case]
    line = refused(edited(tmp_path, old, new), says)
    assert SECRET not in line


EXTRA = {
    "port": ('["--port", "8000"]', "repeats the flag that server.port renders"),
    "port-equals": ('["--port=8000"]', "server.port"),
    "port-abbrev": ('["--po", "8000"]', "(argparse reads it as --port)"),
    "host-abbrev": ('["--hos=0.0.0.0"]', "server.host"),
    "tp-alias": ('["--tensor-parallel-size", "2"]', "server.tp_size"),
    "model-alias": ('["--model", "/other"]', "model.container_path"),
    "served-name": ('["--served-model-name", "x"]', "model.served_name"),
    "metrics-labels": ('["--extra-metric-labels", "{}"]', "server.enable_metrics"),
    "api-key": (f'["--api-key", "{SECRET}"]', "would put a secret in clear"),
    "api-key-equals": (f'["--api-key={SECRET}"]', "would put a secret in clear"),
    "admin-abbrev": (f'["--admin-api", "{SECRET}"]', "reads it as --admin-api-key"),
    "ssl-password": (f'["--ssl-keyfile-password", "{SECRET}"]', "secret in clear"),
}


@pytest.mark.parametrize("case", sorted(EXTRA))
def test_extra_args_may_not_repeat_a_typed_flag_or_carry_a_secret(
    tmp_path: Path, case: str
) -> None:
    args, says = EXTRA[case]
    line = refused(with_server(tmp_path, f"extra_args: {args}"), says)
    assert SECRET not in line


def test_extra_args_in_a_variant_name_the_variant_line(tmp_path: Path) -> None:
    path = edited(tmp_path, "    server: {kv_cache_dtype: bf16}",
                  '    server: {kv_cache_dtype: bf16, extra_args: ["--po", "1"]}')
    line = refused(path, "server.port")
    assert f"{path}:{SIM.splitlines().index('    server: {kv_cache_dtype: bf16}') + 1}:" in line


def test_extra_args_that_own_no_typed_flag_still_pass(tmp_path: Path) -> None:
    path = with_server(tmp_path, 'extra_args: ["--log-level", "info"]')
    run = opsctl("profile", "show", "--profile", str(path))
    assert run.returncode == 0, run.stderr
    assert "--log-level info" in run.stdout


# --- secrets named by variable -----------------------------------------------------------------


def secret_profile(tmp_path: Path) -> Path:
    path = with_server(tmp_path, "api_key_env: OPSCTL_API_KEY")
    path.write_text(
        path.read_text().replace("  env:\n", "  env_from_host: [HF_TOKEN]\n  env:\n", 1)
    )
    return path


def test_named_secrets_show_as_names_in_show_and_dry_run(tmp_path: Path) -> None:
    path = secret_profile(tmp_path)
    env = {"OPSCTL_API_KEY": SECRET, "HF_TOKEN": SECRET}
    shown = opsctl("profile", "show", "--profile", str(path), **env)
    dry = opsctl("up", "--dry-run", "--profile", str(path), **env)
    for run in (shown, dry):
        assert run.returncode == 0, run.stderr
        assert SECRET not in run.stdout + run.stderr
    assert "--api-key '$OPSCTL_API_KEY'" in shown.stdout
    assert "--api-key '$OPSCTL_API_KEY'" in dry.stdout and "'HF_TOKEN=$HF_TOKEN'" in dry.stdout


def test_named_secrets_reach_only_the_container(tmp_path: Path) -> None:
    deployment = load_profile(str(secret_profile(tmp_path))).resolve()
    spec = run_spec(deployment, "img:1", environ={"OPSCTL_API_KEY": SECRET, "HF_TOKEN": "hf_x"})
    assert spec.command[spec.command.index("--api-key") + 1] == SECRET
    assert spec.env["HF_TOKEN"] == "hf_x"
    assert SECRET not in repr(spec.labels) and "hf_x" not in repr(spec.labels)
    # The idempotence key does not move when a secret's value does (it holds the names only).
    other = run_spec(deployment, "img:1", environ={"OPSCTL_API_KEY": "k2", "HF_TOKEN": "t2"})
    assert other.labels == spec.labels


def test_a_named_secret_missing_on_the_host_is_refused_before_launch(tmp_path: Path) -> None:
    deployment = load_profile(str(secret_profile(tmp_path))).resolve()
    with pytest.raises(ProfileError, match=r"names \$HF_TOKEN, which is not set"):
        run_spec(deployment, "img:1", environ={"OPSCTL_API_KEY": SECRET})


def test_shipped_profiles_hold_no_secret_and_load() -> None:
    for path in sorted((project_root() / "deploy").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert load_profile(str(path)).name == data["name"]

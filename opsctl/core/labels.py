"""The `opsctl.*` label keys: the one definition of what opsctl writes on images and containers.

`down`, `status`, the exporter and the build all find opsctl's objects through these keys, so a
key is spelled here once and imported everywhere else.
"""

from __future__ import annotations

MANAGED = "opsctl.managed"  # "true" on everything opsctl creates; nothing without it is touched
ROLE = "opsctl.role"  # "server", "image", "monitoring", ...
COMPONENT = "opsctl.component"  # which monitoring container
PROFILE = "opsctl.profile"
VARIANT = "opsctl.variant"
IMAGE = "opsctl.image"
IMAGE_KIND = "opsctl.image-kind"  # "sglang" or "simulator"
VERSION = "opsctl.version"  # opsctl's own version
SGLANG_VERSION = "opsctl.sglang-version"
PATCH_SHA256 = "opsctl.patch-sha256"
CONFIG_HASH = "opsctl.config-hash"
CONTENT_HASH = "opsctl.content-hash"
BASE_DIGEST = "opsctl.base-digest"
BASE_URL = "opsctl.base-url"
SERVED_MODEL = "opsctl.served-model"
# The weights a server runs: sha256 over config.json and the safetensors index, hashed on the
# host at `up`, or "unavailable: <reason>" (opsctl.deploy.state.CheckpointRecord).
CHECKPOINT = "opsctl.checkpoint"
STOP_GRACE_SECONDS = "opsctl.stop-grace-seconds"
# A fresh random id per `up` run (and per throwaway verification container): its cleanup
# removes only containers carrying its own id, so a concurrent or later run's container is
# never taken for this run's leftover.
RUN_ID = "opsctl.run-id"
STANDIN = "opsctl.standin"
# The names (never the values) of the host variables whose values a server was given
# (server.api_key_env, server.admin_api_key_env, container.env_from_host), comma-separated: what
# a saved or printed server log is scrubbed of (deploy.logsave.named_secrets).
SECRET_ENV = "opsctl.secret-env"

ROLE_SERVER = "server"
ROLE_IMAGE = "image"
ROLE_MONITORING = "monitoring"
ROLE_VERIFY = "verify"  # the throwaway container that checks a fresh image
ROLE_ROUTER = "router"  # the sglang router in front of a cluster's servers (`render k8s`)
TRUE = "true"

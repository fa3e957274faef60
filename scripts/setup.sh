#!/usr/bin/env bash
# Idempotent setup of a fresh Debian machine (run as root): system packages, a running Docker
# engine, the Python venv with opsctl, and the locally built base image (no registry is needed).
# A Docker engine already installed (Docker CE, a snap, a rootless engine, Debian's docker.io) is
# used as it is and never replaced; Debian's docker.io is installed only where there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/docker-engine.sh
. scripts/docker-engine.sh

log() { printf '[setup] %s\n' "$*"; }

need_pkgs=()
# prometheus-alertmanager brings amtool; openssl makes the metrics proxy's test certificate;
# docker-registry (the distribution registry 2.8) is the real registry `build --push` is tested on.
for pkg in prometheus prometheus-pushgateway prometheus-alertmanager debootstrap patch \
    ca-certificates openssl docker-registry; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
docker_sockets=(/var/run/docker.sock /run/docker.sock /run/user/*/docker.sock)
if running=$(docker_engine_running); then
  have_engine=1
  log "a running $running answers: using it, installing none"
elif signs=$(docker_engine_signs "${docker_sockets[@]}"); then
  have_engine=1
  log "a Docker engine is installed ($(echo "$signs" | paste -sd ';' | sed 's/;/; /g')): using it, installing none"
else
  have_engine=0
  log "no Docker engine found: installing Debian's docker.io"
  need_pkgs+=(docker.io)
fi
# Node.js runs the Prometheus operator schema validator of tests/k8s (the machine usually has it).
command -v npm >/dev/null 2>&1 || need_pkgs+=(nodejs npm)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
# The checkers of what `render k8s` and `monitor compose` write (tests only): `kubectl kustomize`
# builds the rendered Kustomize base (any kubectl the machine has; else Debian's kubernetes-client),
# `docker compose config` (or Debian's docker-compose, where the plugin is absent) checks
# monitoring/compose.yaml.
checker_pkgs=()
command -v kubectl >/dev/null 2>&1 || checker_pkgs+=(kubernetes-client)
{ docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; } ||
  checker_pkgs+=(docker-compose)
if ((${#checker_pkgs[@]})); then
  log "installing ${checker_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${checker_pkgs[@]}" >/dev/null
fi
# Debian starts these services when it can; opsctl's tests start their own on loopback.
for svc in prometheus prometheus-pushgateway prometheus-alertmanager prometheus-node-exporter \
    docker-registry; do
  if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done

if running=$(docker_engine_running); then
  log "using the running $running"
elif [ "$have_engine" = 1 ] && [ -d /run/systemd/system ]; then
  # Its service manager owns it (systemd, the snap, a user's rootless unit): setup starts nothing.
  log "the installed Docker engine is not running (or this user cannot reach it): start it with"
  log "its service manager (systemctl start docker, snap start docker, or systemctl --user start"
  log "docker for a rootless engine, with DOCKER_HOST set to its socket), then run setup again"
  exit 1
elif command -v dockerd >/dev/null 2>&1; then
  # No service manager (a container): the daemon is started here, as Debian's package would.
  log "starting dockerd --iptables=false"
  mkdir -p /var/log
  # its own session: it outlives the shell (and the process group) that ran setup
  setsid nohup dockerd --iptables=false >>/var/log/opsctl-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  running=$(docker_engine_running) || { log "dockerd did not come up; see /var/log/opsctl-dockerd.log"; exit 1; }
  log "using the $running"
else
  log "no running Docker engine, and no dockerd here to start: point DOCKER_HOST at one, then run setup again"
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
log "installing opsctl into .venv"
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[dev,plot]'
# The kernel's CPU tests run it in Triton's interpreter: torch 2.13.0 is the CPU build this
# machine kind carries as a local file; triton 3.6.0 is the release the GPU side is tested with.
# The torch pin is opsctl's own (argspec/resolution.TORCH_CPU: what `profile resolve` runs with).
.venv/bin/pip install -q "$(.venv/bin/python -c 'from opsctl.argspec.resolution import TORCH_CPU; print(TORCH_CPU)')" triton==3.6.0
# A real OpenAI-compatible server that is not sglang, for the component tests of smoke and bench
# (`transformers serve` on a tiny model the tests build), and bench's local tokenizers.
.venv/bin/pip install -q 'transformers[serving]==5.24.0' tokenizers==0.23.3

# The offline validators of rendered Kubernetes objects (tests/k8s/SCHEMAS.md): the Kubernetes
# schemas come with the dev extra (kubernetes-validate); the Prometheus operator's and KEDA's from
# npm, at the versions tests/k8s/package-lock.json pins.
log "installing the Prometheus operator and KEDA schema validators (npm ci in tests/k8s)"
(cd tests/k8s && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

log "building the local base image (debootstrap + docker import) if absent"
.venv/bin/opsctl base-image
log "done"

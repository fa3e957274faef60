#!/usr/bin/env bash
# Idempotent setup of a fresh Debian machine (run as root): system packages, a running Docker
# engine, the Python venv with opsctl, and the locally built base image (no registry is needed).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*"; }

need_pkgs=()
# prometheus-alertmanager brings amtool; openssl makes the metrics proxy's test certificate.
for pkg in docker.io prometheus prometheus-pushgateway prometheus-alertmanager debootstrap patch \
    ca-certificates openssl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
# Debian starts these services when it can; opsctl's tests start their own on loopback.
for svc in prometheus prometheus-pushgateway prometheus-alertmanager prometheus-node-exporter; do
  if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd --iptables=false"
  mkdir -p /var/log
  nohup dockerd --iptables=false >/var/log/opsctl-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/opsctl-dockerd.log"; exit 1; }
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
.venv/bin/pip install -q torch==2.13.0 triton==3.6.0
# A real OpenAI-compatible server that is not sglang, for the component tests of smoke and bench
# (`transformers serve` on a tiny model the tests build), and bench's local tokenizers.
.venv/bin/pip install -q 'transformers[serving]==5.24.0' tokenizers==0.23.3

log "building the local base image (debootstrap + docker import) if absent"
.venv/bin/opsctl base-image
log "done"

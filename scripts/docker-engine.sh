# Sourced by scripts/setup.sh: which Docker engine this host already has. An engine already
# installed (Docker CE, Debian's docker.io, the snap, a rootless engine) is used as it is; setup
# installs Debian's docker.io only where none of these is found.

# Every sign of an installed engine, one per line: its daemon binaries, the snap, and any daemon
# socket among the paths given (setup passes the standard and rootless ones). Status 1 when there
# is none. The `docker` CLI alone is no engine: it is only a client (a machine image may carry
# one with no daemon at all); setup uses it when it reaches a running engine.
docker_engine_signs() {
  local found=0 sock bin
  for bin in dockerd dockerd-rootless.sh; do
    if command -v "$bin" >/dev/null 2>&1; then
      printf '%s at %s\n' "$bin" "$(command -v "$bin")"
      found=1
    fi
  done
  if [ -d /snap/docker/current ]; then
    echo "the docker snap"
    found=1
  fi
  for sock in "$@"; do
    if [ -S "$sock" ]; then
      echo "a daemon socket at $sock"
      found=1
    fi
  done
  [ "$found" = 1 ]
}

# The running engine in one line (the server's version and where the CLI reaches it), or status 1.
docker_engine_running() {
  local version
  version=$(docker version --format '{{.Server.Version}}' 2>/dev/null) || return 1
  [ -n "$version" ] || return 1
  printf 'Docker engine %s at %s\n' "$version" \
    "$(docker context inspect --format '{{.Endpoints.docker.Host}}' 2>/dev/null || echo "${DOCKER_HOST:-the default socket}")"
}

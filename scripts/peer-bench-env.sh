#!/usr/bin/env bash
# The peer of opsctl's bench client: sglang 0.5.9's own `python -m sglang.bench_serving`, in a venv
# of its own (default .venv-peer, git-ignored; $OPSCTL_PEER_VENV to put it elsewhere), so that
# bench/client_compare.py can run both clients against the same simulator. Idempotent; prints
# the venv's path on stdout, everything else on stderr.
#
# sglang is installed without its dependencies (they are the GPU server's: torch, flashinfer,
# sgl-kernel...); only what `import sglang` and sglang/bench_serving.py import is added, pinned
# exactly. transformers==4.57.1 is sglang 0.5.9's own pin (its METADATA Requires-Dist); the
# others are unpinned there and frozen here at what pip resolved for that set on 2026-11-30.
# The sglang wheel comes from $OPSCTL_WHEELS (default /var/cache/opsctl-wheels) when it is
# there, else from PyPI; the hash below is PyPI's file, so either way it is the same wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${OPSCTL_PEER_VENV:-$PWD/.venv-peer}
WHEELS=${OPSCTL_WHEELS:-/var/cache/opsctl-wheels}
SGLANG_WHEEL_SHA256=8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1

log() { printf '[peer-bench-env] %s\n' "$*" >&2; }

# Direct imports of sglang/__init__.py and sglang/bench_serving.py first, then what pip's
# resolver chose beneath them.
PINS=(
  transformers==4.57.1 aiohttp==3.14.5 numpy==2.4.6 pybase64==1.5.1 requests==2.34.2
  datasets==5.0.1 pillow==13.0.0 tqdm==4.70.1 ipython==9.18.1 pydantic==2.14.4
  aiohappyeyeballs==2.7.1 aiosignal==1.4.0 annotated-types==0.8.0 anyio==4.16.0 asttokens==3.0.2
  attrs==26.1.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 dill==0.4.1 executing==2.3.0
  filelock==4.3.1 frozenlist==1.8.0 fsspec==2026.6.0 h11==0.16.0 hf-xet==1.8.0 httpcore==1.0.9
  httpx==0.28.1 huggingface_hub==0.36.2 idna==3.20 ipython_pygments_lexers==1.1.1 jedi==0.20.1
  matplotlib-inline==0.2.2 multidict==7.2.1 multiprocess==0.70.19 packaging==26.4 pandas==3.1.1
  parso==0.8.7 pexpect==4.9.0 prompt_toolkit==3.0.53 propcache==0.5.4 psutil==7.2.2
  ptyprocess==0.7.0 pure_eval==0.2.4 pyarrow==26.0.1 pydantic_core==2.50.5 Pygments==2.21.0
  python-dateutil==4.0.0 PyYAML==6.0.4 regex==2026.11.19 safetensors==0.8.0 stack-data==0.6.3
  tokenizers==0.22.2 traitlets==5.16.1 typing-inspection==0.4.5 typing_extensions==4.16.0
  tzdata==2026.6 urllib3==2.8.0 wcwidth==0.9.4 xxhash==4.1.0 yarl==1.25.1
)
STAMP="$VENV/.opsctl-peer-pins"
WANT="sglang==0.5.9 sha256:$SGLANG_WHEEL_SHA256 ${PINS[*]}"

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  find_links=()
  [ -d "$WHEELS" ] && find_links=(--find-links "$WHEELS")
  log "installing bench_serving's imports, then sglang==0.5.9 without its dependencies"
  "$VENV/bin/pip" install -q "${PINS[@]}" >&2
  "$VENV/bin/pip" install -q --no-deps --require-hashes "${find_links[@]}" \
    -r <(printf 'sglang==0.5.9 --hash=sha256:%s\n' "$SGLANG_WHEEL_SHA256") >&2
  printf '%s' "$WANT" >"$STAMP"
fi
# Offline, as every run of it here is: no hub lookups.
if ! HF_HUB_OFFLINE=1 "$VENV/bin/python" -m sglang.bench_serving --help >/dev/null 2>"$VENV/.help.err"; then
  log "python -m sglang.bench_serving --help failed:"
  tail -5 "$VENV/.help.err" >&2
  exit 1
fi
echo "$VENV"

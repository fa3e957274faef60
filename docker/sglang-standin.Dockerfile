# A STAND-IN for the sglang release image, for machines without a registry (CI, tests).
# Built by `opsctl base-image --sglang-standin VERSION`: Debian bookworm (opsctl/debian-base) plus
# the real sglang wheel of the pinned version, installed --no-deps from the build context (the
# host downloaded it). It has the same sglang source files as the release image and nothing of its
# CUDA stack, so `opsctl build --base-image` can apply and verify the patch set on it, never serve.
ARG BASE_IMAGE=opsctl/debian-base:bookworm
FROM ${BASE_IMAGE}

ARG SGLANG_WHEEL
ARG SGLANG_VERSION

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY ${SGLANG_WHEEL} /tmp/wheels/

# --no-index: nothing is fetched; --no-deps: only sglang's own files (no torch, no CUDA).
# --break-system-packages: Debian's python3 is PEP 668 "externally managed"; this image is
# single-purpose, so installing into the system interpreter is what the release image does too.
RUN python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir --root-user-action=ignore \
        --break-system-packages "/tmp/wheels/${SGLANG_WHEEL}" \
    && rm -rf /tmp/wheels \
    && test "$(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))')" = "${SGLANG_VERSION}"

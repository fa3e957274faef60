# The sglang-API simulator image (profile `sim`): the embedded default target of the README demo
# and of CI. Built by `opsctl build --profile sim` exactly like the real image (same staging,
# labels, content-hash tag and post-build verification), on opsctl/debian-base:bookworm, a local
# debootstrap image (`opsctl base-image`), because no registry is reachable there.
# The context holds app/opsctl/{__init__.py,sim/} and the prometheus_client wheel that the host
# downloaded (pinned to the version opsctl was tested with); nothing is fetched during the build.
ARG BASE_IMAGE=opsctl/debian-base:bookworm
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY wheels/ /tmp/wheels/
# --target keeps the wheel out of Debian's externally managed system site-packages.
RUN python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir \
        --root-user-action=ignore --target /opt/opsctl/site /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels

COPY app/ /opt/opsctl/app/
COPY opsctl-build/ /opt/opsctl/build/

ENV PYTHONPATH=/opt/opsctl/app:/opt/opsctl/site \
    OPSCTL_BUILD_METADATA=/opt/opsctl/build/build.json

RUN python3 -m compileall -q --invalidation-mode checked-hash /opt/opsctl/app /opt/opsctl/site \
    && python3 /opt/opsctl/build/imagecheck.py /opt/opsctl/build/expect.json

# The simulator needs no privilege: run as nobody.
USER 65534:65534
EXPOSE 30000
CMD ["python3", "-m", "opsctl.sim"]

# syntax=docker/dockerfile:1
# Ballast image. The entry point is `ballast`: run `ballast extender`, `ballast annotator` or
# `ballast agent` (manifests: scheduler_config/deploy/). Without arguments it serves the extender with the
# bundled policy on 127.0.0.1 only: the extender has no authentication and /bind acts with the cluster
# identity it is given, so it must not listen on the network by default (docs/security.md, "Who may
# call the extender"). For a local try-out, `docker run --network host ballast` or pass
# `extender --host 0.0.0.0 ...` explicitly. The Kubernetes manifests pass their own arguments.
#
# Nothing is written at run time, so every program runs with a read-only root file system: bytecode for
# Ballast, its dependencies and the standard library is compiled here (hash-based .pyc files that never
# go stale when layers are copied) and PYTHONDONTWRITEBYTECODE keeps Python from trying. The extender and
# the annotator run as UID 65532; the agent's DaemonSet runs it as UID 0 without capabilities
# (scheduler_config/deploy/agent.yaml says why).
#
# The base is pinned by digest, so a rebuild gets the same base layers whatever the tag points at today.
# To move to a newer base (security updates of Debian and CPython), look the digest up and replace it on
# both FROM lines: docker buildx imagetools inspect python:3.11-slim-bookworm (the "Digest:" line).

FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Exact versions from requirements.lock. The build tools are pinned too: setup.py generates the CRI gRPC
# stubs with grpcio-tools, and the generated code refuses to import with a grpcio older than the
# grpcio-tools that wrote it.
COPY requirements.lock ./
RUN python -m pip install -c requirements.lock setuptools grpcio-tools
COPY pyproject.toml setup.py README.md ./
COPY ballast ./ballast
# A wheel built without isolation (the pinned tools above), installed with its pinned dependencies into
# a virtualenv of its own that carries no pip; then every module is compiled.
RUN python -m pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/ballast \
 && python -m pip --python /opt/ballast/bin/python install --no-compile -c requirements.lock /wheels/ballast-*.whl \
 && python -m pip --python /opt/ballast/bin/python check \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/ballast/lib

FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
ENV PATH=/opt/ballast/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The base image deletes the standard library's .pyc files; compile them once here rather than in every
# process (and every exec probe) at start. pip, setuptools and wheel have no use at run time.
RUN python -m pip uninstall -y -q pip setuptools wheel \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      -x '/(idlelib|lib2to3|tkinter|turtledemo|ensurepip|pydoc_data)/' /usr/local/lib/python3.11 \
 && groupadd --system --gid 65532 ballast \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin ballast
COPY --from=build /opt/ballast /opt/ballast
COPY scheduler_config/policy.yaml /etc/ballast/policy.yaml
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["ballast"]
CMD ["extender", "--host", "127.0.0.1", "--port", "8888", "--policy", "/etc/ballast/policy.yaml"]

# syntax=docker/dockerfile:1
#
# mcp-shim images, one file:
#
#   builder       builds the mcp-shim wheel and the wheels of its pinned dependencies
#   runtime       the gateway: the wheel installed in a slim image, non-root,
#                 `mcp-shim` as the entrypoint, configured by MCP_SHIM_*
#   runtime-node  runtime plus Node.js and npm, for stdio servers started with `npx`
#   runtime-uv    runtime plus uv, for stdio servers started with `uvx`
#   demo          the bundled demo legacy MCP server (tests/fixtures/legacy_server.py
#                 on the official Python SDK mcp 1.x), for docker-compose.yml
#
#   docker build --target runtime -t mcp-shim .                # the gateway
#   docker build --target runtime-node -t mcp-shim:node .      # ... with npx
#   docker build --target runtime-uv -t mcp-shim:uv .          # ... with uvx
#   docker build --target demo -t mcp-shim-demo .              # the demo legacy server
#
# The last stage is `demo`, so a build without --target makes the demo server:
# name the target.
#
# tests/integration/test_docker.py lints this file (hadolint) and checks that
# docker-compose.yml agrees with it; keep the HEALTHCHECK commands in both in step.

FROM python:3.11.15-slim-trixie AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# ---------------------------------------------------------------------------
FROM base AS builder
WORKDIR /src
# Only what the wheel is built from (pyproject.toml reads README.md).
COPY pyproject.toml README.md ./
COPY app/ app/
COPY translators/ translators/
# One wheel for mcp-shim plus one per pinned dependency, so the runtime stage
# installs from local files only; and their digests, for the runtime stage's
# cache (below).
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && sha256sum /wheels/*.whl > /wheels.sha256

# ---------------------------------------------------------------------------
FROM base AS runtime
RUN groupadd --system --gid 10001 mcpshim \
    && useradd --system --uid 10001 --gid mcpshim --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin mcpshim
# podman and buildah reuse a cached `RUN --mount=...,from=builder` layer even
# when the builder stage has changed (buildah issues 4522 and 6609; Docker's
# BuildKit does not): copying the wheels' digests first makes a new wheel a new
# layer here, so the install below runs again. The file also says what is
# installed.
COPY --from=builder /wheels.sha256 /usr/local/share/mcp-shim/wheels.sha256
# The wheels are bind-mounted, not copied: they never become a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels mcp-shim==0.1.0
# A container must listen on all its interfaces; the port is published by the
# host (docker-compose.yml publishes it on 127.0.0.1 only).
ENV MCP_SHIM_HOST=0.0.0.0 \
    MCP_SHIM_PORT=8080
USER 10001:10001
EXPOSE 8080
# No curl in the slim image: Python's urllib. Non-2xx raises, so the exit code is 1.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MCP_SHIM_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["mcp-shim"]

# ---------------------------------------------------------------------------
# The runtime can start a stdio server written in Python only: the README's
# `npx ...` and `uvx ...` examples need Node.js or uv in the image. These two
# stages add them and nothing else; the user, entrypoint and healthcheck are
# the runtime's (inherited). For another runtime, `FROM mcp-shim` and install
# it the same way (README.md, "Which image").
FROM runtime AS runtime-node
# Debian's own Node.js and npm: the distribution's security updates, no third
# repository to trust. Pinned on the major version the base's Debian release
# ships (13: Node.js 20, npm 9), not on an exact Debian version, which the
# mirror drops at the next security update; with a base on another Debian
# release, pass its major: --build-arg NODEJS_MAJOR=18 for Debian 12.
ARG NODEJS_MAJOR=20
ARG NPM_MAJOR=9
USER 0:0
# No recommends (compilers, docs), no package lists kept.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        "nodejs=${NODEJS_MAJOR}.*" "npm=${NPM_MAJOR}.*" \
    && rm -rf /var/lib/apt/lists/*
# npx caches the packages it fetches under $HOME/.npm, and a stdio server
# inherits only PATH, HOME and LANG of the gateway's environment (plus
# MCP_SHIM_UPSTREAM_ENV's names): the user's home, /nonexistent, cannot be
# created, so HOME is /tmp, writable here and an emptyDir in
# deploy/kubernetes/ (whose root file system is read-only).
ENV HOME=/tmp
USER 10001:10001

# ---------------------------------------------------------------------------
FROM runtime AS runtime-uv
USER 0:0
# uv and uvx from PyPI, one exact version: a new uv is a deliberate change here.
# uv trusts its own built-in CA roots unless told otherwise; the system's store
# is the one pip, Python and npm use here, and where a CA of your own is
# added. A file, not UV_SYSTEM_CERTS: a stdio server does not inherit the
# gateway's environment (below).
RUN pip install --no-cache-dir uv==0.13.9 \
    && mkdir -p /etc/uv \
    && printf 'system-certs = true\n' > /etc/uv/uv.toml
# uv keeps its cache and the tools' environments under $HOME, and a stdio
# server inherits only PATH, HOME and LANG of the gateway's environment (plus
# MCP_SHIM_UPSTREAM_ENV's names): the user's home, /nonexistent, cannot be
# created, so HOME is /tmp, writable here and an emptyDir in
# deploy/kubernetes/ (whose root file system is read-only).
ENV HOME=/tmp
USER 10001:10001

# ---------------------------------------------------------------------------
FROM base AS demo
RUN groupadd --system --gid 10002 demo \
    && useradd --system --uid 10002 --gid demo --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin demo
# The complete pinned set scripts/setup_peers.sh installs in .peers/legacy.
COPY tests/peers/legacy-requirements.txt /tmp/legacy-requirements.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/legacy-requirements.txt \
    && pip check \
    && rm /tmp/legacy-requirements.txt
WORKDIR /srv/demo
COPY tests/fixtures/legacy_server.py ./
COPY tests/fixtures/legacy/ legacy/
USER 10002:10002
EXPOSE 3001
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:3001/healthz', timeout=2)"]
ENTRYPOINT ["python", "legacy_server.py"]
CMD ["--host", "0.0.0.0", "--port", "3001"]

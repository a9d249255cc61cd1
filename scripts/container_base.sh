#!/usr/bin/env bash
# A local stand-in for the Dockerfile's base image, for machines that cannot
# pull from a container registry (tests/integration/test_container.py builds
# the Dockerfile as it is, from this base, with `podman build --pull=never`).
#
# The image is tagged with the name the Dockerfile's `FROM ... AS base` line
# gives (python:3.11.*-slim-*), so the Dockerfile needs no change at all. It
# is a Debian root file system made by `debootstrap --variant=minbase` with
# Debian's python3 and pip, laid out as the official python image is where the
# Dockerfile relies on it: `python` and `pip` on PATH under /usr/local/bin,
# pip free to install into the system (no PEP 668 marker), LANG=C.UTF-8.
# Python is Debian 12's 3.11, the minor version the Dockerfile names.
#
# This machine's TLS to the package registries may pass a proxy whose CA only
# the host's bundle trusts: the host's /etc/ssl/certs/ca-certificates.crt is
# copied in and PIP_CERT points at it. A PIP_INDEX_URL or
# PIP_EXTRA_INDEX_URL of the host (http/https only) goes into /etc/pip.conf.
#
# An image of that name that is there already is kept: the stand-in of the
# same recipe (label io.mcp-shim.stand-in-base), or a real python image.
# A stand-in of another recipe is made anew. About 40-90 s when made.
#
# Usage: scripts/container_base.sh [--force]
# Needs: root, podman, debootstrap (scripts/setup_peers.sh podman installs them).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Bump when the way the stand-in is made changes.
RECIPE=1
SUITE=bookworm
MIRROR="${MCP_SHIM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
LABEL=io.mcp-shim.stand-in-base

say() { printf 'container_base: %s\n' "$*"; }
die() {
    printf 'container_base: ERROR: %s\n' "$*" >&2
    exit 1
}
trap 'die "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

[[ $(id -u) -eq 0 ]] || die "must run as root (podman as root, debootstrap)"
command -v podman >/dev/null || die "podman is missing: apt-get install podman buildah runc"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"

BASE="$(awk 'toupper($1) == "FROM" && toupper($3) == "AS" && $4 == "base" { print $2; exit }' \
    "$ROOT/Dockerfile")"
[[ -n "$BASE" ]] || die "no 'FROM <image> AS base' line in the Dockerfile"
[[ "$BASE" == python:3.11.* ]] || die "the Dockerfile's base is $BASE; this stand-in is Python 3.11"

if [[ $FORCE -eq 0 ]] && podman image exists "$BASE"; then
    have="$(podman image inspect --format "{{ index .Labels \"$LABEL\" }}" "$BASE")"
    if [[ "$have" == "$RECIPE" ]]; then
        say "$BASE: stand-in present (recipe $RECIPE)"
        exit 0
    elif [[ -z "$have" || "$have" == "<no value>" ]]; then
        say "$BASE: present (not a stand-in), kept"
        exit 0
    fi
    say "$BASE: stand-in of recipe $have, making recipe $RECIPE"
fi

WORK="$(mktemp -d /var/tmp/mcp-shim-base.XXXXXX)"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
FS="$WORK/rootfs"

say "debootstrap $SUITE (minbase + python3, pip) ..."
if ! debootstrap --variant=minbase --include=python3,python3-pip \
    "$SUITE" "$FS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2 || true
    die "debootstrap failed (log above)"
fi

# The python image's layout, where the Dockerfile uses it.
ln -sf /usr/bin/python3 "$FS/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$FS/usr/local/bin/pip"
rm -f "$FS"/usr/lib/python3*/EXTERNALLY-MANAGED
# The host's CA bundle: the registries' TLS may be intercepted by a CA only it holds.
cp /etc/ssl/certs/ca-certificates.crt "$FS/etc/ssl/certs/ca-certificates.crt"
{
    echo "[global]"
    echo "cert = /etc/ssl/certs/ca-certificates.crt"
    if [[ "${PIP_INDEX_URL:-}" == http* ]]; then
        echo "index-url = $PIP_INDEX_URL"
    fi
    if [[ "${PIP_EXTRA_INDEX_URL:-}" == http* ]]; then
        echo "extra-index-url = $PIP_EXTRA_INDEX_URL"
    fi
} >"$FS/etc/pip.conf"
# What a slim image leaves out: package lists and caches, documentation.
rm -rf "$FS"/var/lib/apt/lists/* "$FS"/var/cache/apt/* "$FS"/var/cache/debconf/*-old \
    "$FS"/usr/share/doc/* "$FS"/usr/share/man/* "$FS"/usr/share/info/* \
    "$FS"/var/log/*.log "$FS"/var/log/apt/*
find "$FS/usr/lib/python3" "$FS"/usr/lib/python3.* -name __pycache__ -prune -exec rm -rf {} +

say "podman import as $BASE ..."
podman rmi --force "$BASE" >/dev/null 2>&1 || true
tar -C "$FS" --numeric-owner -c . | podman import \
    --change "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    --change "LABEL $LABEL=$RECIPE" \
    --change 'CMD ["python3"]' \
    - "$BASE" >/dev/null
say "$BASE: ready ($(podman image inspect --format '{{.Size}}' "$BASE") bytes)"

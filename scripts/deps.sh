#!/usr/bin/env bash
# Installs what the build needs when it is missing: a C toolchain and libzmq (cgo, github.com/pebbe/zmq4).
# Idempotent and quiet when everything is present; uses apt-get (Debian) otherwise.
set -euo pipefail

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if ! pkg-config --exists libzmq 2>/dev/null; then
  need+=(libzmq3-dev)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
  echo "deps: Go is required (https://go.dev/doc/install)" >&2
  exit 1
fi
go mod download

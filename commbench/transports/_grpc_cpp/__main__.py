"""python -m commbench.transports._grpc_cpp: build the grpc-cpp extension (launchers/setup.sh runs it)."""

import sys

from commbench.core.errors import Unavailable
from commbench.transports._grpc_cpp import build, find, runtime_version

try:
    lib = find()
    if lib is not None and runtime_version() is not None:
        print(f"grpc-cpp: {lib} is up to date")
    else:
        build()
except Unavailable as exc:
    print(f"grpc-cpp: not built: {exc}", file=sys.stderr)
    sys.exit(2)

"""The code stays ruff-clean (part of the test command, so CI checks it too)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    r = subprocess.run([ruff, "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_generated_protobuf_matches_the_proto(tmp_path):
    proto_dir = ROOT / "commbench" / "transports" / "_proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={tmp_path}",
                    str(proto_dir / "commbench.proto")], check=True)
    def descriptor(path: Path) -> str:  # the serialized descriptor, not protoc's version stamp
        return next(line for line in path.read_text().splitlines() if "AddSerializedFile" in line)

    assert descriptor(tmp_path / "commbench_pb2.py") == descriptor(proto_dir / "commbench_pb2.py"), \
        "regenerate commbench_pb2.py (see commbench.proto)"

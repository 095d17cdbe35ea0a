"""The code stays ruff-clean and type-checks (part of the test command, so CI checks it too), its
imports flow one way, and the generated protobuf matches its .proto."""

import ast
import graphlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    r = subprocess.run([ruff, "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_types_check():
    """mypy over commbench/ (pyproject.toml's [tool.mypy]: the modules still to fix are listed there)."""
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_generated_protobuf_matches_the_proto(tmp_path):
    proto_dir = ROOT / "commbench" / "transports" / "_proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={tmp_path}",
                    str(proto_dir / "commbench.proto")], check=True)
    def descriptor(path: Path) -> str:  # the serialized descriptor, not protoc's version stamp
        return next(line for line in path.read_text().splitlines() if "AddSerializedFile" in line)

    assert descriptor(tmp_path / "commbench_pb2.py") == descriptor(proto_dir / "commbench_pb2.py"), \
        "regenerate commbench_pb2.py (see commbench.proto)"


# the layers, lowest first: a module imports (at its top or inside a function) only from its own layer
# or below; commands import the libraries, never the reverse
LAYERS = [("core",), ("profiles",), ("transports",), ("launch",), ("benchmarks", "emulators"),
          ("training", "importers", "presentation"), ("planning",), ("commands",), ("cli", "__main__"),
          ("reference",)]  # the reference pages are generated from the whole command line


def imports_of_package() -> dict[str, set[str]]:
    """commbench's modules -> the commbench modules each imports."""
    pkg = ROOT / "commbench"
    mods = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in pkg.rglob("*.py")}

    def owner(name: str) -> str | None:  # a name imported -> the module that holds it
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here.split(".")[:len(here.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            found |= {o for n in names if n.startswith("commbench") and (o := owner(n)) not in (None, mod)}
        graph[mod] = found
    return graph


def layer(mod: str) -> int:
    if mod == "commbench":
        return 0
    top = mod.split(".")[1]
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_imports_flow_one_way():
    """No import circle between modules, no module importing from a layer above its own."""
    graph = imports_of_package()
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"an import circle: {' -> '.join(exc.args[1])}") from None
    up = sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs if layer(b) > layer(a))
    assert not up, up

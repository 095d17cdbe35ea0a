"""The shape of the code, for before/after comparisons of a refactor: lines per package, the longest
functions, radon's maintainability grades and worst cyclomatic complexities, and reads of options
by name from a namespace.

    python bench/code_metrics.py [ROOT]      # ROOT: a checkout (default: this one)

radon is not a dependency of commbench: ``pip install radon`` to get its grades (skipped without).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "commbench").rglob("*.py") if "_proto" not in p.parts)


def package_lines(root: Path, files: list[Path]) -> Counter:
    out: Counter = Counter()
    for p in files:
        rel = p.relative_to(root / "commbench")
        out["commbench/" + (str(rel.parent) if rel.parent != Path(".") else "(top)")] += len(p.read_text().splitlines())
    return out


def longest_functions(root: Path, files: list[Path], n: int = 10) -> list[tuple[int, str]]:
    found = []
    for p in files:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{p.relative_to(root)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)[:n]


def radon_report(files: list[Path]) -> list[str]:
    try:
        from radon.complexity import cc_visit
        from radon.metrics import mi_rank, mi_visit
    except ImportError:
        return ["radon not installed (pip install radon): grades skipped"]
    grades: Counter = Counter()
    worst_mi, worst_cc = [], []
    for p in files:
        code = p.read_text()
        mi = mi_visit(code, multi=True)
        grades[mi_rank(mi)] += 1
        worst_mi.append((mi, p.name))
        worst_cc += [(b.complexity, f"{p.name} {b.name}") for b in cc_visit(code)]
    lines = [f"maintainability grades (modules): {dict(sorted(grades.items()))}",
             "lowest maintainability: " + ", ".join(f"{name} {mi:.0f}" for mi, name in sorted(worst_mi)[:5]),
             "highest cyclomatic complexity: " + ", ".join(f"{name} {cc}" for cc, name in sorted(worst_cc,
                                                                                               reverse=True)[:8])]
    return lines


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    files = python_files(root)
    lines = package_lines(root, files)
    print(f"# {root}: {len(files)} modules, {sum(lines.values())} lines")
    for pkg, n in sorted(lines.items()):
        print(f"{pkg:32} {n:6d}")
    print("# longest functions (lines)")
    for n, where in longest_functions(root, files):
        print(f"{n:5d}  {where}")
    print("# radon")
    for line in radon_report(files):
        print(line)
    text = "".join(p.read_text() for p in files)
    by_name = len(re.findall(r"getattr\(args", text))
    namespace = len(re.findall(r"(?:config|self)\.args\b", text))
    print(f"# getattr(args: {by_name}; config.args / self.args reads: {namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

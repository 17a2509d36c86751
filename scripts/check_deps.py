#!/usr/bin/env python3
"""Checks the dependency direction of src/ from the #include lines.

Each folder of src/ is one library; a file in folder A may include "B/..." only when B is A
itself or listed for A below (the list in docs/ARCHITECTURE.md, "Dependency direction").
A folder missing from the list fails too, so a new library must say what it depends on.
Exit status 0 when every include is allowed, 1 otherwise (one line per offending include).

usage: scripts/check_deps.py [REPO_ROOT]
"""
import pathlib
import re
import sys

# A -> libraries A may include (besides itself). Keep in step with docs/ARCHITECTURE.md.
ALLOWED = {
    "base": set(),
    "tensor": {"base"},
    "kernels": {"tensor", "base"},
    "kv": {"tensor", "base"},
    "tokenizer": {"base"},
    "sampling": {"base"},
    "model": {"kernels", "kv", "tokenizer", "tensor", "base"},
    "runtime": {"model", "kvtier", "kv", "sampling", "tokenizer", "grammar", "tensor", "base"},
    "eval": {"runtime", "model", "kv", "sampling", "tokenizer", "tensor", "base"},
    "trace": {"base"},
    "plot": {"base"},
    "sim": {"cost", "plan", "loadgen", "plot", "runtime", "kv", "trace", "base"},
    "cost": {"kv", "tensor", "base"},
    "plan": {"cost", "model", "plot", "kv", "tokenizer", "tensor", "base"},
    "profile": {"runtime", "plan", "cost", "model", "kernels", "kv", "tensor", "base"},
    "chat": {"model", "tokenizer", "base"},
    "promptlint": {"chat", "kv", "tokenizer", "base"},
    "toolcall": {"base"},
    "grammar": {"base"},
    "semcache": {"kernels", "base"},
    "kvevents": {"kv", "base"},
    "kvtier": {"kv", "base"},
    "http": {"base"},
    "server": {"http", "runtime", "kvtier", "grammar", "toolcall", "semcache", "kvevents", "model", "kv", "sampling", "tokenizer",
               "tensor", "base"},
    "loadgen": {"trace", "base"},
    "cli": {"server", "http", "chat", "toolcall", "grammar", "semcache", "kvevents", "kvtier", "loadgen", "eval", "sim", "plot", "promptlint", "trace", "plan", "profile", "cost", "runtime", "model", "kv",
            "sampling", "tokenizer", "kernels", "tensor", "base"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    src = root / "src"
    libraries = {p.name for p in src.iterdir() if p.is_dir()}
    errors = []
    for lib in sorted(libraries - ALLOWED.keys()):
        errors.append(f"src/{lib}/: a library with no dependency rule in {__file__}")
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".inc") or not path.is_file():
            continue
        lib = path.relative_to(src).parts[0]
        allowed = ALLOWED.get(lib, set())
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target == lib or target not in libraries:
                continue
            if target not in allowed:
                rel = path.relative_to(root)
                errors.append(f"{rel}:{number}: {lib}/ may not include {target}/ ({line.strip()})")
    for e in errors:
        print(e)
    if errors:
        print(f"check_deps: {len(errors)} forbidden include(s); see docs/ARCHITECTURE.md")
        return 1
    print(f"check_deps: {len(libraries)} libraries, every include follows the dependency rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

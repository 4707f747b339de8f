#!/usr/bin/env python3
"""Checks that every file and item docs/traceability.md names exists.

Each back-quoted reference `path` or `path::item` must name an existing file
or directory (paths relative to the repository root; `../shared/...` as the
document itself says, checked only where the shared documents are present). A back-quoted `::item` continues the last path named earlier on
the same line. `a/b`, `{a, b}` and `Type::method` name several items; each
must be defined in the file (fn, struct, enum, trait, const, static, mod,
type, or a field/variant), or, for a directory, in one of its .rs files.

Usage: scripts/check-traceability.py [REPO_ROOT]. Exit 1 lists what did not
resolve, one per line with the document line number.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "docs", "traceability.md")
# A repository path (not `.git/...`, which names a sandbox path).
PATH = re.compile(r"^((?:\.\./)?[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)+/?)(?:::(.+))?$")


def resolve(path):
    """`../shared/...` is the shared documents next to the main checkout
    (/work/main) or, from a worktree (/work/wt/NAME), two levels up."""
    if path.startswith("../shared/"):
        for up in (os.path.join(ROOT, ".."), os.path.join(ROOT, "..", "..")):
            candidate = os.path.normpath(os.path.join(up, path[len("../"):]))
            if os.path.exists(candidate):
                return candidate
    return os.path.join(ROOT, path)


def defined(name, text):
    pattern = (
        r"\b(?:fn|struct|enum|trait|const|static|mod|type|macro_rules!)\s+" + re.escape(name) + r"\b"
        r"|^\s*(?:pub(?:\([a-z]+\))?\s+)?" + re.escape(name) + r"\b\s*[:,({=]"
    )
    return re.search(pattern, text, re.M) is not None


def sources(target):
    if os.path.isdir(target):
        for d, _, files in os.walk(target):
            for f in files:
                if f.endswith(".rs"):
                    yield open(os.path.join(d, f), errors="replace").read()
    else:
        yield open(target, errors="replace").read()


def main():
    problems = []
    checked = 0
    for number, line in enumerate(open(DOC).read().splitlines(), 1):
        current = None
        for token in re.findall(r"`([^`]+)`", line):
            if token.startswith("::") and current:
                items = token[2:]
            else:
                m = PATH.match(token)
                if not m:
                    continue
                target = resolve(m.group(1))
                if m.group(1).startswith("../") and not os.path.exists(target):
                    # Outside the repository: absent from a bare checkout
                    # (CI clones the repository alone). Not checked.
                    current = None
                    continue
                if not os.path.exists(target):
                    problems.append(f"{number}: {token}: no such file")
                    current = None
                    continue
                current, items = target, m.group(2)
                checked += 1
            if not items:
                continue
            for name in re.split(r"[{},/ ]+", items):
                name = name.split("::")[-1]
                if not name:
                    continue
                checked += 1
                if not any(defined(name, text) for text in sources(current)):
                    problems.append(f"{number}: {os.path.relpath(current, ROOT)}: {name} not defined there")
    for p in problems:
        print(p)
    print(f"{checked} references checked, {len(problems)} unresolved")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

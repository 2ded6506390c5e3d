#!/usr/bin/env python3
"""Checks that no include in tracer/ runs back up (tracer/README.md).

The tracer's folders, lowest first: recording/ (what runs on the program's threads: records,
clocks, the ring), then sources/ (the hooks that make events) and sending/ (the sender
thread's work), which never include each other, then process/ (start, fork, exit), which
wires them. A file may include its own folder's headers and those of the folders it stands
on; proto/ and system headers are below all. Tests (any tests/ folder) may include anything.

    python3 tools/check-tracer-layers.py [REPO_ROOT]

Prints each include that breaks the order and exits 1; exits 0 when there is none.
"""
import os
import re
import sys

# Folder -> the tracer folders its files may include (its own among them).
ALLOWED = {
    "recording": {"recording"},
    "sources": {"recording", "sources"},
    "sending": {"recording", "sending"},
    "process": {"recording", "sources", "sending", "process"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SUFFIXES = (".h", ".cc", ".cpp", ".c", ".inc")


def folder_of(path):
    """The top folder under tracer/ of a path relative to tracer/, or None."""
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else None


def check(root):
    tracer = os.path.join(root, "tracer")
    problems = []
    checked = 0
    for directory, subdirs, files in os.walk(tracer):
        subdirs.sort()
        relative_dir = os.path.relpath(directory, tracer)
        if "tests" in relative_dir.split(os.sep):
            continue
        for name in sorted(files):
            if not name.endswith(SUFFIXES):
                continue
            relative = os.path.normpath(os.path.join(relative_dir, name))
            folder = folder_of(relative)
            if folder not in ALLOWED:
                problems.append(f"tracer/{relative}: outside the tracer's folders "
                                f"({', '.join(sorted(ALLOWED))})")
                continue
            checked += 1
            with open(os.path.join(directory, name), encoding="utf-8") as source:
                for number, line in enumerate(source, 1):
                    match = INCLUDE.match(line)
                    if match is None:
                        continue
                    target = match.group(1)
                    if target.startswith("tracer/"):
                        included = target[len("tracer/"):]
                    elif "/" not in target and os.path.exists(os.path.join(directory, target)):
                        included = os.path.normpath(os.path.join(relative_dir, target))
                    else:
                        continue  # proto/, generated and system headers: below all
                    to = folder_of(included)
                    if to not in ALLOWED[folder]:
                        problems.append(f"tracer/{relative}:{number}: {folder}/ includes "
                                        f"tracer/{included}, from {to}/, which it may not "
                                        f"(may: {', '.join(sorted(ALLOWED[folder]))})")
    return checked, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    checked, problems = check(root)
    for problem in problems:
        print(problem)
    if checked == 0:
        print("no tracer sources found under", root)
        return 1
    if problems:
        print(f"{len(problems)} include(s) against the tracer's folder order (tracer/README.md)")
        return 1
    print(f"tracer layers: {checked} files, no include runs back up")
    return 0


if __name__ == "__main__":
    sys.exit(main())

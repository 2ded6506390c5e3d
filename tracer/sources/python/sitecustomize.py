"""cumemtrace's Python start-up hook.

`cumemtrace run` puts this folder first on PYTHONPATH, so the interpreter runs this file at
start. It names what the program's tensors are once the program imports torch
(cumemtrace_categories.py, unless `--no-categories`), follows which module each thread is in
(cumemtrace_modules.py, with `--modules`), wraps the functions named with
`--phase PHASE=MODULE:QUALNAME` in phase ranges, then runs the sitecustomize it shadows (a
distribution's or a virtual environment's), if any.
"""
import os
import sys


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder == here or not os.path.isfile(candidate):
            continue
        import importlib.util
        spec = importlib.util.spec_from_file_location("sitecustomize", candidate)
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
        return


if os.environ.get("CUMEMTRACE_CATEGORIES", "1") != "0":
    try:
        import cumemtrace_categories
        cumemtrace_categories.install()
    except Exception as error:  # never the reason the program fails
        sys.stderr.write(f"cumemtrace: categories not read: {error}\n")

if os.environ.get("CUMEMTRACE_MODULES", "0") == "1":
    try:
        import cumemtrace_modules
        cumemtrace_modules.install()
    except Exception as error:  # never the reason the program fails
        sys.stderr.write(f"cumemtrace: modules not followed: {error}\n")

try:
    import cumemtrace_phases
    cumemtrace_phases.install(os.environ.get("CUMEMTRACE_PYTHON_PHASES", ""))
except Exception as error:  # never the reason the program fails
    sys.stderr.write(f"cumemtrace: --phase hooks not installed: {error}\n")

try:
    _run_shadowed_sitecustomize()
except Exception as error:
    sys.stderr.write(f"cumemtrace: the program's own sitecustomize failed: {error}\n")

"""cumemtrace's pytest plugin: each test's own GPU memory figures, and a limit per test.

Under `cumemtrace run -- pytest ...` (`run` loads this plugin for a pytest command line), every
test runs inside a range named "pytest: NODEID" that covers its setup, call and teardown, so
the run's summary has one phase row per test: the peak while it ran, its rise above the
memory in use when it started, what it allocated and freed.

    @pytest.mark.gpu_memory_limit("2 GiB")
    def test_forward(): ...

makes that test's rise above its entry a budget of the run ("rise:pytest: NODEID"): `run`
then ends with a line naming each test over its limit, and exits with status 86 when pytest
itself passed. The limits are written, one JSON line each, to the file `run` names in
CUMEMTRACE_BUDGET_FILE (pytest-budgets.jsonl in the run's folder, which `cumemtrace check`
reads too).

Without cumemtrace, the ranges cost nothing (no tracer is loaded, none are sent) and the
marker is only registered. Load it by hand with `-p cumemtrace_pytest` with
<prefix>/share/cumemtrace/pytest on PYTHONPATH.
"""
import ctypes
import json
import os
import re

import pytest

RANGE_PREFIX = "pytest: "
# What `cumemtrace --budget` accepts as a size: a number and an optional unit.
_SIZE = re.compile(r"^\s*(\d+(\.\d*)?|\.\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def _range_calls():
    """The tracer's two range calls when it is loaded in this process, else None."""
    try:
        process = ctypes.CDLL(None)
        push = process.cumemtrace_range_push
        pop = process.cumemtrace_range_pop
    except (OSError, AttributeError):
        return None
    push.argtypes = [ctypes.c_char_p]
    push.restype = ctypes.c_int
    pop.argtypes = []
    pop.restype = ctypes.c_int
    return push, pop


class _Plugin:
    def __init__(self):
        self.calls = _range_calls()
        self.budget_file = os.environ.get("CUMEMTRACE_BUDGET_FILE") or None

    def limit_of(self, item):
        marker = item.get_closest_marker("gpu_memory_limit")
        if marker is None:
            return None
        if len(marker.args) != 1 or not isinstance(marker.args[0], str) or marker.kwargs:
            raise pytest.UsageError(
                f"{item.nodeid}: gpu_memory_limit takes one size, e.g. gpu_memory_limit(\"2 GiB\")")
        if not _SIZE.match(marker.args[0]):
            raise pytest.UsageError(
                f"{item.nodeid}: gpu_memory_limit(\"{marker.args[0]}\") is not a size "
                "(a number and B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")
        return marker.args[0].strip()

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, items):
        for item in items:  # a malformed limit stops the session before any test runs
            self.limit_of(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        limit = self.limit_of(item)
        name = RANGE_PREFIX + item.nodeid
        if limit is not None and self.budget_file is not None:
            line = json.dumps({"key": "rise:" + name, "limit": limit, "test": item.nodeid})
            # One write per line, appended: pytest-xdist's workers share the file.
            fd = os.open(self.budget_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        if self.calls is not None:
            self.calls[0](name.encode("utf-8", "surrogateescape"))
        try:
            yield
        finally:
            if self.calls is not None:
                self.calls[1]()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "gpu_memory_limit(size): under `cumemtrace run`, fail the run when this test's GPU "
        "memory rises more than SIZE (e.g. \"2 GiB\") above what was in use when it started")
    config.pluginmanager.register(_Plugin(), "cumemtrace-budgets")

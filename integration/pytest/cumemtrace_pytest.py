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

Each test also gets its own verdict inside pytest, when the plugin can read a test's memory in
the process: the test's peak above what was in use when its setup began, over setup and call,
is compared with its limit, and a test over it fails with a message naming both figures (its
teardown is not counted: the verdict is given with the call's report). The terminal summary
lists every test's figures. By default the figures are PyTorch's
(`torch.cuda.reset_peak_memory_stats()` at the setup, `torch.cuda.max_memory_allocated()` at
the end of the call, on the current device) when the tests imported torch and CUDA is
available; without them (no GPU, no torch) there is no per-test verdict, and only the run's
budget judges the test. A conftest.py can give another source by implementing the hook
`pytest_cumemtrace_memory_source(config)`: it returns an object with `name` (a string),
`start(item)` (the bytes in use when the test's setup begins) and `peak(item)` (the highest
bytes in use since `start`), or None for the default.

Without cumemtrace, the ranges cost nothing (no tracer is loaded, none are sent) and the
marker is only registered (and, where a source gives figures, judged per test). Load it by
hand with `-p cumemtrace_pytest` with <prefix>/share/cumemtrace/pytest on PYTHONPATH.
"""
import ctypes
import json
import os
import re
import sys

import pytest

RANGE_PREFIX = "pytest: "
# What `cumemtrace --budget` accepts as a size: a number and an optional unit.
_SIZE = re.compile(r"^\s*(\d+(\.\d*)?|\.\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
# Its units as `cumemtrace --budget` reads them (collector/output/budgets.cc, ParseByteSize).
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def _size_bytes(text):
    """The bytes of a size the marker accepts, or None."""
    match = _SIZE.match(text)
    if match is None or (match.group(3) or "").lower() not in _UNITS:
        return None
    return round(float(match.group(1)) * _UNITS[(match.group(3) or "").lower()])


def _bytes(n):
    """n bytes as the summary writes them: 3 significant digits and a binary unit."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            digits = 0 if value >= 100 else 1 if value >= 10 else 2
            return f"{value:.{digits}f} {unit}"
    return f"{n} B"


class _Hooks:
    @pytest.hookspec(firstresult=True)
    def pytest_cumemtrace_memory_source(self, config):
        """The source of each test's memory figures (the module's docstring), or None."""


class _TorchMemory:
    """PyTorch's allocator on the current CUDA device."""
    name = "torch.cuda.max_memory_allocated"

    def __init__(self, torch):
        self.cuda = torch.cuda

    def start(self, item):
        self.cuda.reset_peak_memory_stats()
        return self.cuda.memory_allocated()

    def peak(self, item):
        return self.cuda.max_memory_allocated()


def _torch_source():
    torch = sys.modules.get("torch")  # never imported here: only a torch the tests use
    try:
        if torch is not None and torch.cuda.is_available():
            return _TorchMemory(torch)
    except Exception:  # a broken CUDA setup: no figures, the run's budget still judges
        pass
    return None


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
    def __init__(self, config):
        self.config = config
        self.calls = _range_calls()
        self.budget_file = os.environ.get("CUMEMTRACE_BUDGET_FILE") or None
        self.source = None  # resolved at the first test: the tests' imports are done by then
        self.resolved = False
        self.entry = {}    # nodeid -> bytes in use when its setup began
        self.figures = []  # (nodeid, peak, rise, limit or None, over)

    def limit_of(self, item):
        marker = item.get_closest_marker("gpu_memory_limit")
        if marker is None:
            return None
        if len(marker.args) != 1 or not isinstance(marker.args[0], str) or marker.kwargs:
            raise pytest.UsageError(
                f"{item.nodeid}: gpu_memory_limit takes one size, e.g. gpu_memory_limit(\"2 GiB\")")
        if _size_bytes(marker.args[0]) is None:
            raise pytest.UsageError(
                f"{item.nodeid}: gpu_memory_limit(\"{marker.args[0]}\") is not a size "
                "(a number and B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")
        return marker.args[0].strip()

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, items):
        for item in items:  # a malformed limit stops the session before any test runs
            self.limit_of(item)

    def memory_source(self):
        if not self.resolved:
            self.resolved = True
            self.source = (self.config.hook.pytest_cumemtrace_memory_source(config=self.config)
                           or _torch_source())
        return self.source

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        source = self.memory_source()
        if source is not None:
            self.entry[item.nodeid] = source.start(item)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        entry = self.entry.get(item.nodeid)
        # The call's report, or the setup's when the setup failed or skipped the test.
        ended = call.when == "call" or (call.when == "setup" and not report.passed)
        if entry is None or not ended:
            return
        del self.entry[item.nodeid]
        if report.skipped:
            return
        peak = self.source.peak(item)
        rise = max(0, peak - entry)
        limit = self.limit_of(item)
        limit_bytes = None if limit is None else _size_bytes(limit)
        over = limit_bytes is not None and rise > limit_bytes
        self.figures.append((item.nodeid, peak, rise, limit, over))
        if over and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid}: GPU memory rose {_bytes(rise)} ({rise:,} B) above what was in "
                f"use when it started, over its gpu_memory_limit(\"{limit}\") ({limit_bytes:,} B)"
                f"; peak {_bytes(peak)} ({self.source.name})")

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter):
        if not self.figures:
            return
        rows = [("test", "peak", "+above entry", "limit", "verdict")]
        for nodeid, peak, rise, limit, over in self.figures:
            verdict = "" if limit is None else ("EXCEEDED" if over else "met")
            rows.append((nodeid, _bytes(peak), "+" + _bytes(rise), limit or "", verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        terminalreporter.section(f"GPU memory per test ({self.source.name})")
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:4])]
            terminalreporter.write_line(("  ".join(cells) + "  " + row[4]).rstrip())

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


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(_Hooks)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "gpu_memory_limit(size): under `cumemtrace run`, fail the run when this test's GPU "
        "memory rises more than SIZE (e.g. \"2 GiB\") above what was in use when it started")
    config.pluginmanager.register(_Plugin(config), "cumemtrace-budgets")

"""Hardware counters of one CPU, for workloads.py --cpu-counters.

The workloads' main thread runs alone on one CPU (--pin), and PyTorch's autograd worker,
which it starts, inherits that CPU; the tracer's and the collector's threads run elsewhere.
So everything the program's own threads execute, the tracer's hook included, is counted by
one per-CPU counter, whichever thread runs it. Cycles are counted only while the CPU is not
halted, so they measure the program's CPU work at any clock frequency: the wall clock of the
Python-bound workloads spreads by 25-50% between processes on the GPU machine, and this is a
sharper figure of what tracing adds. Needs perf_event_paranoid <= 0 (or CAP_PERFMON).
"""
import ctypes
import os
import struct

_SYSCALL_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_PERF_TYPE_HARDWARE = 0
EVENTS = {"cycles": 0, "instructions": 1}  # PERF_COUNT_HW_*
_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0: type, size, config, ..., flags, as far as config1
_FLAG_DISABLED = 1 << 0
_READ_TIMES = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING


class CpuCounters:
    """Counts EVENTS on `cpu` for every task that runs there; read() returns their totals,
    scaled where the kernel had to share the hardware counters between them."""

    def __init__(self, cpu):
        libc = ctypes.CDLL(None, use_errno=True)
        number = _SYSCALL_PERF_EVENT_OPEN.get(os.uname().machine)
        if number is None:
            raise OSError(f"no perf_event_open number for {os.uname().machine}")
        self._fds = {}
        for name, config in EVENTS.items():
            attr = bytearray(_ATTR_SIZE)
            struct.pack_into("IIQQQQQ", attr, 0, _PERF_TYPE_HARDWARE, _ATTR_SIZE, config, 0, 0,
                             _READ_TIMES, _FLAG_DISABLED)
            buffer = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
            fd = libc.syscall(number, buffer, -1, cpu, -1, 0)  # pid -1: every task on `cpu`
            if fd < 0:
                error = ctypes.get_errno()
                self.close()
                raise OSError(error, f"perf_event_open({name}, cpu {cpu}): {os.strerror(error)}")
            self._fds[name] = fd
        for fd in self._fds.values():
            libc.ioctl(fd, 0x2400, 0)  # PERF_EVENT_IOC_ENABLE

    def read(self):
        totals = {}
        for name, fd in self._fds.items():
            value, enabled, running = struct.unpack("QQQ", os.read(fd, 24))
            totals[name] = value * enabled / running if running else 0.0
        return totals

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

"""The in-process figures of CUMEMTRACE_BENCH_ALTERNATE_MS (torch_bridge.cc): the bridge does
its work in the even windows of N ms of CLOCK_MONOTONIC (time.perf_counter's clock) and
returns at once in the odd ones, so that one process times itself both ways, interleaved
every window, and the CPU's changes of speed fall on both alike. Torch-free: workloads.py
uses it in the traced program, overhead_stats_test.py tests it."""
import statistics


def lowest_decile_and_median(spans):
    """The lowest decile and the median of the spans' lengths (start, end in seconds)."""
    times = [end - start for start, end in spans]
    return statistics.quantiles(times, n=10)[0], statistics.median(times)


def alternating_times(spans, window_ms):
    """The lowest decile and the median of the spans (start, end in seconds: settling
    iterations or whole steps) that lie whole in an even window (the bridge on) and in an odd
    one (off), how many each, and how many crossed an edge. A state with fewer than 10 spans
    gets its count only."""
    window = window_ms / 1e3
    on, off = [], []
    for start, end in spans:
        first, last = int(start // window), int(end // window)
        if first == last:
            (off if first % 2 else on).append((start, end))
    # Those across a window's edge are left out. A longer span crosses one more often, which
    # favours the shorter ones of each state a little: keep the windows several spans long,
    # and see how many were cut.
    figures = {"cut@count": len(spans) - len(on) - len(off)}
    for state, spans_of_state in (("on", on), ("off", off)):
        if len(spans_of_state) >= 10:
            figures[state], figures[state + "@median"] = lowest_decile_and_median(spans_of_state)
        figures[state + "@count"] = len(spans_of_state)
    return figures

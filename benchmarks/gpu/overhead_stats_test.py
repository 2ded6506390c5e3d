#!/usr/bin/env python3
"""overhead.py's figures without a GPU: the paired interval and the pooling of earlier runs'
--out files, on fabricated rounds (python3 -m unittest, or ctest)."""
import contextlib
import io
import json
import math
import os
import shutil
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402
from alternating_windows import alternating_times  # noqa: E402


def run_file(directory, name, rows, workload="ep50-settle", unit="ms", spread=0.01):
    """An --out file as overhead.py writes it: {config: samples} of one workload."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump([{"workload": workload, "config": config, "unit": unit, "samples": v,
                    "spread_samples": [spread] * len(v) if spread is not None else []}
                   for config, v in rows.items()], f)
    return path


class PairedIntervalTest(unittest.TestCase):
    def test_a_constant_ratio_has_no_width(self):
        samples = {("w", "untraced"): [10.0, 12.0, 9.0], ("w", "traced"): [10.5, 12.6, 9.45]}
        mean, low, high = overhead.paired_interval(samples, "w", "traced")
        for value in (mean, low, high):
            self.assertAlmostEqual(value, 1.05)

    def test_two_rounds_take_t_for_one_degree_of_freedom(self):
        samples = {("w", "untraced"): [10.0, 10.0], ("w", "traced"): [10.0, 11.0]}
        mean, low, high = overhead.paired_interval(samples, "w", "traced")
        logs = [0.0, math.log(1.1)]
        half = 12.71 * (math.log(1.1) / math.sqrt(2)) / math.sqrt(2)
        self.assertAlmostEqual(mean, math.sqrt(1.1))
        self.assertAlmostEqual(low, math.exp(sum(logs) / 2 - half))
        self.assertAlmostEqual(high, math.exp(sum(logs) / 2 + half))

    def test_pairs_by_round_not_by_rank(self):
        # Sorted, these would pair into a constant 1.0; by round they are 2x and 0.5x.
        samples = {("w", "untraced"): [1.0, 2.0], ("w", "traced"): [2.0, 1.0]}
        self.assertEqual(overhead.paired_ratios(samples, "w", "traced"), [2.0, 0.5])


class PoolTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.first = run_file(self.dir, "a.json", {"untraced": [10.0, 11.0],
                                                   "cumemtrace": [10.5, 11.0]})
        self.second = run_file(self.dir, "b.json", {"untraced": [9.0], "cumemtrace": [9.9],
                                                    "untraced, tracker probe: noop": [9.2]},
                               spread=0.02)
        self.both = {"untraced", "cumemtrace"}

    def refused(self, paths, keep, message):
        with self.assertRaises(SystemExit) as exit:
            overhead.pooled_samples(paths, keep, None)
        self.assertIn(message, str(exit.exception.code))

    def test_rounds_stay_paired_across_files(self):
        samples, wanted, units = overhead.pooled_samples([self.first, self.second], self.both,
                                                         None)
        self.assertEqual(wanted, ["ep50-settle"])
        self.assertEqual(units, {"ep50-settle": "ms"})
        self.assertEqual(samples[("ep50-settle", "cumemtrace")], [10.5, 11.0, 9.9])
        self.assertEqual(samples[("ep50-settle@spread", "cumemtrace")], [0.01, 0.01, 0.02])
        ratios = overhead.paired_ratios(samples, "ep50-settle", "cumemtrace")
        for got, want in zip(ratios, [1.05, 1.0, 1.1]):
            self.assertAlmostEqual(got, want)

    def test_what_would_pair_with_another_run_is_refused(self):
        # The probe's one round would pair with the first file's untraced process.
        self.refused([self.first, self.second], None, "different numbers of rounds")
        self.refused([self.first, self.first], self.both, "given twice")
        other_unit = run_file(self.dir, "c.json", {"untraced": [1.0], "cumemtrace": [1.1]},
                              unit="ms/step")
        self.refused([self.first, other_unit], self.both, "measures ep50-settle in ms/step")

    def test_workloads_pool_on_their_own(self):
        launch = run_file(self.dir, "launch.json", {"untraced": [6.0] * 5, "cumemtrace": [6.6] * 5},
                          workload="launch")
        samples, wanted, _ = overhead.pooled_samples([self.first, launch], self.both, None)
        self.assertEqual(wanted, ["ep50-settle", "launch"])
        self.assertEqual(len(samples[("launch", "cumemtrace")]), 5)
        samples, wanted, _ = overhead.pooled_samples([self.first, launch], self.both, {"launch"})
        self.assertEqual(wanted, ["launch"])

    def test_spreads_only_where_every_file_kept_them(self):
        old = run_file(self.dir, "old.json", {"untraced": [9.0], "cumemtrace": [9.9]},
                       spread=None)
        samples, _, _ = overhead.pooled_samples([self.first, old], self.both, None)
        self.assertNotIn(("ep50-settle@spread", "cumemtrace"), samples)

    def test_summarize_writes_what_it_prints(self):
        out = os.path.join(self.dir, "pooled.json")
        samples, wanted, units = overhead.pooled_samples([self.first, self.second], self.both,
                                                         None)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, wanted, out, units)
        mean, low, high = overhead.paired_interval(samples, "ep50-settle", "cumemtrace")
        self.assertAlmostEqual(mean, (1.05 * 1.0 * 1.1) ** (1 / 3))
        self.assertIn("median of 3 processes", printed.getvalue())
        self.assertIn(f"paired mean {mean:.3f}x (95%: {low:.3f}-{high:.3f})", printed.getvalue())
        with open(out) as f:
            row = next(r for r in json.load(f) if r["config"] == "cumemtrace")
        self.assertAlmostEqual(row["paired_mean_ratio_to_untraced"], mean)
        self.assertEqual(row["paired_mean_95_interval"], [low, high])
        self.assertAlmostEqual(row["paired_ratio_to_untraced"], 1.05)
        self.assertEqual(row["spread_samples"], [0.01, 0.01, 0.02])
        again, _, _ = overhead.pooled_samples([out], None, None)
        self.assertEqual(again, samples)


class WindowsTest(unittest.TestCase):
    """The in-process figures of a run with CUMEMTRACE_BENCH_ALTERNATE_MS: each process pairs
    its own windows, whatever the other processes measured."""

    def samples(self):
        name = "cumemtrace, 50 ms windows"
        return {("ep50-settle", "untraced"): [10.0, 20.0],
                ("ep50-settle", name): [14.0, 30.0],
                ("ep50-settle@on", name): [10.2, 20.0],
                ("ep50-settle@off", name): [10.0, 20.4],
                ("ep50-settle@on@median", name): [11.0, 22.0],
                ("ep50-settle@off@median", name): [11.0, 22.0],
                ("ep50-settle@cut@count", name): [5, 7]}

    def test_each_process_is_its_own_pair(self):
        samples = self.samples()
        name = "cumemtrace, 50 ms windows"
        ratios = overhead.window_ratios(samples, "ep50-settle", name)
        self.assertEqual([round(r, 6) for r in ratios], [1.02, round(20.0 / 20.4, 6)])
        self.assertEqual(overhead.window_ratios(samples, "ep50-settle", name, "@median"),
                         [1.0, 1.0])
        self.assertEqual(overhead.window_ratios(samples, "ep50-settle", "untraced"), [])

    def test_printed_and_written_so_that_a_pool_gives_them_again(self):
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        out = os.path.join(directory, "run.json")
        samples = self.samples()
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, ["ep50-settle"], out)
        mean, low, high = overhead.mean_interval([1.02, 20.0 / 20.4])
        self.assertAlmostEqual(mean, math.sqrt(1.02 * 20.0 / 20.4))
        self.assertIn(f"mean {mean:.3f}x (95%: {low:.3f}-{high:.3f})", printed.getvalue())
        self.assertIn("2 processes: 1.020, 0.980", printed.getvalue())
        again, _, _ = overhead.pooled_samples([out], None, None)
        self.assertEqual(again, samples)

    def test_each_window_against_the_untraced_process_of_its_round(self):
        samples = self.samples()
        name = "cumemtrace, 50 ms windows"
        off = overhead.paired_ratios(samples, "ep50-settle", name, "ep50-settle@off")
        self.assertEqual([round(r, 6) for r in off], [1.0, 1.02])
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, ["ep50-settle"], None)
        for state, ratios in (("off", [1.0, 1.02]), ("on", [1.02, 1.0])):
            mean, low, high = overhead.mean_interval(ratios)
            self.assertIn(f"{state} windows against untraced, lowest decile, paired mean "
                          f"{mean:.3f}x (95%: {low:.3f}-{high:.3f})", printed.getvalue())

    def test_without_untraced_processes_no_window_is_set_against_them(self):
        samples = {k: v for k, v in self.samples().items() if k[1] != "untraced"}
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, ["ep50-settle"], None)
        self.assertIn("2 processes: 1.020, 0.980", printed.getvalue())
        self.assertNotIn("against untraced", printed.getvalue())


class AlternatingTimesTest(unittest.TestCase):
    """workloads.py's split of a process's spans into the windows of the bridge on and off."""

    def test_spans_whole_in_a_window_go_to_its_state_and_those_across_an_edge_to_none(self):
        # 50 ms windows: [0, 50) on, [50, 100) off, [100, 150) on. Twelve 4 ms spans in each
        # of the first two, and three across the edges at 50 and 100 ms.
        spans = [(0.001 + 0.004 * i, 0.005 + 0.004 * i) for i in range(12)]
        spans += [(0.051 + 0.004 * i, 0.054 + 0.004 * i) for i in range(12)]
        spans += [(0.048, 0.052), (0.099, 0.101), (0.149, 0.1515)]
        figures = alternating_times(spans, 50)
        self.assertEqual(figures["on@count"], 12)
        self.assertEqual(figures["off@count"], 12)
        self.assertEqual(figures["cut@count"], 3)
        self.assertAlmostEqual(figures["on@median"], 0.004)
        self.assertAlmostEqual(figures["off@median"], 0.003)
        self.assertAlmostEqual(figures["on"], 0.004)

    def test_a_state_with_too_few_spans_has_its_count_and_no_figure(self):
        spans = [(0.001 * i, 0.001 * i + 0.0005) for i in range(40)]  # all in [0, 50 ms)
        figures = alternating_times(spans, 50)
        self.assertEqual((figures["on@count"], figures["off@count"]), (40, 0))
        self.assertIn("on", figures)
        self.assertNotIn("off", figures)
        self.assertNotIn("off@median", figures)

    def test_a_workload_without_settling_iterations_is_said_in_steps(self):
        name = "cumemtrace, 50 ms windows"
        samples = {("launch", "untraced"): [7.0, 7.2], ("launch", name): [7.1, 7.3],
                   ("launch@on", name): [7.07, 7.2], ("launch@off", name): [7.0, 7.2],
                   ("launch@on@count", name): [40, 41]}
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        out = os.path.join(directory, "run.json")
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, ["launch"], out)
        self.assertIn("the steps with the bridge on against those with it off",
                      printed.getvalue())
        self.assertIn("2 processes: 1.010, 1.000", printed.getvalue())
        with open(out) as f:
            units = {row["workload"]: row["unit"] for row in json.load(f)}
        self.assertEqual(units["launch@on"], "ms/step, lowest decile, bridge on")
        self.assertEqual(units["launch@on@count"], "steps")


class SlowRoundsTest(unittest.TestCase):
    def test_a_round_with_one_slow_process_leaves_every_figure_of_it(self):
        samples = {("w", "untraced"): [10.0, 17.0, 11.0, 10.5],
                   ("w", "traced"): [10.2, 10.4, 16.0, 10.6],
                   ("w@median", "untraced"): [1.0, 2.0, 3.0, 4.0],
                   ("w@median", "traced"): [5.0, 6.0, 7.0, 8.0],
                   ("w@spread", "traced"): [0.1, 0.2, 0.3, 0.4],
                   ("other", "traced"): [20.0, 20.0]}
        self.assertEqual(overhead.drop_slow_rounds(samples, ["w"], 13.5), {"w": (2, 4)})
        self.assertEqual(samples[("w", "untraced")], [10.0, 10.5])
        self.assertEqual(samples[("w", "traced")], [10.2, 10.6])
        # The other figures of those rounds go too, so rounds stay paired across figures;
        # a workload not asked for keeps its rounds.
        self.assertEqual(samples[("w@median", "traced")], [5.0, 8.0])
        self.assertEqual(samples[("w@spread", "traced")], [0.1, 0.4])
        self.assertEqual(samples[("other", "traced")], [20.0, 20.0])
        self.assertEqual(overhead.paired_ratios(samples, "w", "traced"), [1.02, 10.6 / 10.5])

    def test_the_limit_is_on_the_workloads_own_figure_only(self):
        # A step time far above the limit does not make its round slow: it is another unit.
        samples = {("w", "untraced"): [10.0, 11.0], ("w@step", "untraced"): [700.0, 800.0]}
        self.assertEqual(overhead.drop_slow_rounds(samples, ["w"], 13.5), {"w": (0, 2)})
        self.assertEqual(samples[("w@step", "untraced")], [700.0, 800.0])

    def test_a_figure_only_some_pooled_files_had_goes(self):
        # Pooled: the main figure has 3 rounds, the median figure only the last file's 2.
        samples = {("w", "untraced"): [10.0, 10.0, 10.0], ("w", "traced"): [10.1, 17.0, 10.2],
                   ("w@median", "untraced"): [1.0, 2.0], ("w@median", "traced"): [3.0, 4.0]}
        self.assertEqual(overhead.drop_slow_rounds(samples, ["w"], 13.5), {"w": (1, 3)})
        self.assertEqual(samples[("w", "traced")], [10.1, 10.2])
        self.assertNotIn(("w@median", "traced"), samples)
        self.assertNotIn(("w@median", "untraced"), samples)


class ProgramRoundsTest(unittest.TestCase):
    def rounds_args(self, configs):
        """Each configuration's workloads.py --rounds value, None where it has none."""
        found = {}
        for name, (argv, _) in configs.items():
            program = argv[argv.index("--") + 1:] if "--" in argv else argv
            found[name] = (program[program.index("--rounds") + 1]
                           if "--rounds" in program else None)
        return found

    def test_every_python_configuration_times_the_rounds_asked_for(self):
        configs = overhead.python_configs("cumemtrace", "/scratch", "ep200-settle",
                                          program_rounds=2)
        self.assertEqual(set(self.rounds_args(configs).values()), {"2"})
        # cumemtrace's own options stay before "--": the rounds are the program's.
        argv = configs["cumemtrace --no-kernels"][0]
        self.assertLess(argv.index("--no-kernels"), argv.index("--"))

    def test_without_it_workloads_py_keeps_its_own_default(self):
        configs = overhead.python_configs("cumemtrace", "/scratch", "ep200-settle")
        self.assertEqual(set(self.rounds_args(configs).values()), {None})

    def test_refused_where_it_would_mean_nothing(self):
        for argv in (["--pool", "a.json", "--program-rounds", "2"],
                     ["--pool", "a.json", "--program-rounds", "0"],
                     ["--cumemtrace", "c", "--libtorch-train", "l", "--program-rounds", "0"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()) as err, \
                    mock.patch.object(sys, "argv", ["overhead.py", *argv]):
                with self.assertRaises(SystemExit) as exit_:
                    overhead.main()
                self.assertEqual(exit_.exception.code, 2)
                self.assertIn("--program-rounds", err.getvalue())


if __name__ == "__main__":
    unittest.main()

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402


def run_file(directory, name, rows):
    """An --out file as overhead.py writes it: {config: samples} of one workload."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump([{"workload": "ep50-settle", "config": config, "unit": "ms", "samples": v,
                    "spread_samples": [0.01] * len(v)} for config, v in rows.items()], f)
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
                                                    "untraced, tracker probe: noop": [9.2]})

    def test_rounds_stay_paired_across_files(self):
        samples, wanted, rounds, units = overhead.pooled_samples(
            [self.first, self.second], {"untraced", "cumemtrace"})
        self.assertEqual(wanted, ["ep50-settle"])
        self.assertEqual(rounds, 3)
        self.assertEqual(units, {"ep50-settle": "ms"})
        self.assertEqual(samples[("ep50-settle", "cumemtrace")], [10.5, 11.0, 9.9])
        ratios = overhead.paired_ratios(samples, "ep50-settle", "cumemtrace")
        for got, want in zip(ratios, [1.05, 1.0, 1.1]):
            self.assertAlmostEqual(got, want)

    def test_a_configuration_missing_from_a_file_is_refused(self):
        # Its rounds would pair with another file's untraced processes.
        with self.assertRaises(SystemExit):
            overhead.pooled_samples([self.first, self.second], None)

    def test_summarize_round_trips_through_pool(self):
        out = os.path.join(self.dir, "pooled.json")
        samples, wanted, rounds, units = overhead.pooled_samples(
            [self.first, self.second], {"untraced", "cumemtrace"})
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            overhead.summarize(samples, wanted, rounds, out, units)
        self.assertIn("median of 3 processes", printed.getvalue())
        again, _, _, _ = overhead.pooled_samples([out], None)
        self.assertEqual(again, samples)
        mean, _, _ = overhead.paired_interval(again, "ep50-settle", "cumemtrace")
        self.assertAlmostEqual(mean, (1.05 * 1.0 * 1.1) ** (1 / 3))


if __name__ == "__main__":
    unittest.main()

// `cumemtrace compare`: runs side by side (peak, lifetime classes at the peak, activation
// memory, per-phase peaks), each with its difference from the first.
#include <getopt.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/trace_summary.h"

namespace cumemtrace {
namespace {

constexpr char kCompareHelp[] = R"(Usage: cumemtrace compare [OPTIONS] RUN RUN...

Puts traced runs side by side: the device peak, what was live at it by lifetime class
(persistent, activation, gradient, temporary), activation memory (peak minus persistent),
and each phase's peak, median rise above entry per iteration, and bytes allocated, with
every run's difference from the first. RUN is a .cmtrace file or an output folder of
`cumemtrace run`, optionally as LABEL=RUN (the label defaults to the folder or file name).

Options:
      --csv=FILE          also write the table as CSV (label,pid,device,metric,bytes,
                          difference_from_first); refused if FILE exists
  -h, --help              show this help
%s
Exit status: 0, 1 when a run cannot be read, 2 for bad usage.
)";

}  // namespace

int CompareCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"csv", required_argument, nullptr, 'c'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::string csv_path;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":h", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'c': csv_path = optarg; break;
      case 'h': PrintHelpWithAnalysisOptions(kCompareHelp); return 0;
      case ':': return UsageError("compare", std::string("option '") + argv[optind - 1] +
                                                 "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("compare", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (argc - optind < 2) return UsageError("compare", "give at least two runs");
  if (!csv_path.empty() && PathExists(csv_path)) {
    return UsageError("compare", csv_path + " already exists");
  }
  AnalysisOptions options;
  std::string error;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("compare", error);

  std::vector<RunFigures> runs;
  for (int i = optind; i < argc; ++i) {
    const auto [label, arg] = LabeledRun(argv[i]);
    RunFigures figures;
    if (!FiguresOfTrace(arg, options, label, &figures, &error)) {
      LogLine(error);
      return 1;
    }
    runs.push_back(std::move(figures));
  }
  const std::string text = CompareText(runs);
  fputs(text.c_str(), stdout);
  if (!csv_path.empty() && !WriteNewFile(csv_path, CompareCsv(runs), &error)) {
    LogLine(error);
    return 1;
  }
  return 0;
}

}  // namespace cumemtrace

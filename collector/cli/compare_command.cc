// `cumemtrace compare`: runs side by side (peak, lifetime classes at the peak, activation
// memory, per-phase peaks), each with its difference from the first.
#include <getopt.h>
#include <stdio.h>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/trace_summary.h"
#include "collector/engine/engine.h"
#include "collector/output/budgets.h"
#include "collector/output/exports.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {
namespace {

constexpr char kCompareHelp[] = R"(Usage: cumemtrace compare [OPTIONS] RUN RUN...

Puts traced runs side by side: the device peak, what was live at it by lifetime class
(persistent, activation, gradient, temporary), activation memory (peak minus persistent),
and each phase's peak, median rise above entry per iteration, and bytes allocated, with
every run's difference from the first. RUN is a .cmtrace file or an output folder of
`cumemtrace run`, optionally as LABEL=RUN (the label defaults to the folder or file name).

Options:
      --json              print the figures as JSON (schema cumemtrace.compare/1, each run
                          with difference_from_first) instead of the table
      --csv=FILE          also write the table as CSV (label,pid,device,metric,bytes,
                          difference_from_first); refused if FILE exists
      --fail-above=LIMIT  exit with status 86 when a run's peak, activation memory, a
                          lifetime class at the peak or a phase's peak grew against the
                          first run (the baseline) by more than LIMIT: a percentage of
                          the baseline's figure (5%) or a size (64MiB); a last line on
                          stderr names each figure that grew, by how much
      --html=FILE         also write the compare page (the runs' memory on one time axis,
                          aligned at their first steady-state iteration; opens in a
                          browser); refused if FILE exists
  -h, --help              show this help
%s
Exit status: 0, 86 when a figure grew beyond --fail-above, 1 when a run cannot be read, 2
for bad usage.
)";

}  // namespace

int CompareCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"csv", required_argument, nullptr, 'c'},
      {"html", required_argument, nullptr, 'H'},
      {"json", no_argument, nullptr, 'j'},
      {"fail-above", required_argument, nullptr, 'F'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::string csv_path, html_path;
  bool as_json = false;
  std::optional<GrowthLimit> fail_above;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":h", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'c':
        if (*optarg == '\0') return EmptyValueError("compare", "--csv");
        csv_path = optarg;
        break;
      case 'H':
        if (*optarg == '\0') return EmptyValueError("compare", "--html");
        html_path = optarg;
        break;
      case 'j': as_json = true; break;
      case 'F': {
        GrowthLimit limit;
        std::string error;
        if (!ParseGrowthLimit(optarg, &limit, &error)) return UsageError("compare", error);
        fail_above = limit;
        break;
      }
      case 'h': PrintHelpWithAnalysisOptions(kCompareHelp); return 0;
      case ':': return UsageError("compare", std::string("option '") + argv[optind - 1] +
                                                 "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("compare", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (argc - optind < 2) return UsageError("compare", "give at least two runs");
  for (const std::string& path : {csv_path, html_path}) {
    if (!path.empty() && PathExists(path)) return UsageError("compare", path + " already exists");
  }
  AnalysisOptions options;
  std::string error;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("compare", error);
  AnalysisOptions exact = options;  // the page draws every event, in exact order
  exact.timelines = exact.sorted = true;

  std::vector<RunFigures> runs;
  std::vector<std::unique_ptr<AnalyzedTrace>> traces;  // only for the page
  std::vector<ViewerRun> viewer_runs;
  for (int i = optind; i < argc; ++i) {
    const auto [label, arg] = LabeledRun(argv[i]);
    RunFigures figures;
    if (html_path.empty()) {
      if (!FiguresOfTrace(arg, options, label, &figures, &error)) {
        LogLine(error);
        return 1;
      }
    } else {
      std::string path = arg;
      if (!ResolveTracePath(&path, &error)) {
        LogLine(error);
        return 1;
      }
      traces.push_back(Analyze({path, {}}, exact, &error));
      if (traces.back() == nullptr) {
        LogLine(error);
        return 1;
      }
      figures = FiguresOf(*traces.back()->report, label);
      viewer_runs.push_back(ViewerRun{label, traces.back().get()});
    }
    runs.push_back(std::move(figures));
  }
  const std::string text = as_json ? CompareJson(runs) : CompareText(runs);
  fputs(text.c_str(), stdout);
  if (!csv_path.empty() && !WriteNewFile(csv_path, CompareCsv(runs), &error)) {
    LogLine(error);
    return 1;
  }
  if (!html_path.empty()) {
    std::ostringstream html;
    WriteCompareViewerHtml(viewer_runs, html);
    if (!WriteNewFile(html_path, html.str(), &error)) {
      LogLine(error);
      return 1;
    }
    LogLine("open " + html_path);
  }
  if (fail_above) {
    const std::vector<Growth> grown = GrowthBeyond(runs, *fail_above);
    LogLine(GrowthVerdict(runs, *fail_above, grown));
    if (!grown.empty()) return kExitBudgetExceeded;
  }
  return 0;
}

}  // namespace cumemtrace

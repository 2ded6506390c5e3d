// `cumemtrace check`: memory budgets over a recorded trace, as an exit status for CI.
#include <getopt.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/budget_check.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/trace_summary.h"
#include "collector/engine/engine.h"

namespace cumemtrace {
namespace {

constexpr char kCheckHelp[] = R"(Usage: cumemtrace check --budget KEY=SIZE [--budget ...] TRACE

Checks memory budgets against a recorded trace (a .cmtrace file or an output folder of
`cumemtrace run`) and prints each budget's limit, the highest figure and where it was,
then a line naming every budget exceeded, by how much and where. `cumemtrace run
--budget` checks the same at the end of a run. A run folder's pytest-budgets.jsonl (the
gpu_memory_limit markers of a traced pytest session) is checked too.

Options:
  -b, --budget=KEY[@SCOPE]=SIZE
                          an upper limit (repeatable). KEY is a figure of the summary:
                            peak                 the device peak
                            PHASE, phase:PHASE   the peak inside a phase (forward, ...)
                            rise:PHASE           a phase's rise above its entry
                            activation           activation memory (peak - persistent)
                            persistent, gradient, temporary, forward-to-backward, other
                                                 a lifetime class at the peak (also as
                                                 lifetime:CLASS)
                            category:NAME        a category's own peak (parameter,
                                                 gradient, optimizer_state, activation,
                                                 ...); those that name no lifetime class
                                                 also without category:
                          SCOPE: gpuN, rankN or pidN; without one, every device of every
                          process must meet it. SIZE: 20GiB, 512 MiB, 8GB, 1.5G, bytes
  -q, --quiet             print nothing when every budget is met
      --json              print the evaluation as JSON (schema cumemtrace.budgets/1:
                          each budget's figure, limit, outcome, highest figure and where,
                          and those over the limit) instead of the table
  -h, --help              show this help
%s
Exit status: 0 when every budget is met, 86 when one is exceeded, 1 when TRACE cannot be
read, 2 for bad usage: a budget that is malformed or names a figure the trace does not have
(the message lists the valid keys).
)";

}  // namespace

int CheckCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"budget", required_argument, nullptr, 'b'},
      {"quiet", no_argument, nullptr, 'q'},
      {"json", no_argument, nullptr, 'j'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::vector<Budget> budgets;
  bool quiet = false;
  bool json = false;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":b:qh", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'b': {
        Budget budget;
        std::string error;
        if (!ParseBudget(optarg, &budget, &error)) return UsageError("check", error);
        budgets.push_back(std::move(budget));
        break;
      }
      case 'q':
        quiet = true;
        break;
      case 'j':
        json = true;
        break;
      case 'h':
        PrintHelpWithAnalysisOptions(kCheckHelp);
        return 0;
      case ':':
        return UsageError("check", std::string("option '") + argv[optind - 1] + "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("check", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind >= argc) return UsageError("check", "no trace given");
  if (optind + 1 < argc) {
    return UsageError("check",
                      std::string("one trace at a time (unexpected '") + argv[optind + 1] + "')");
  }
  std::string path = argv[optind];
  std::string error;
  AnalysisOptions options;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("check", error);
  if (!ResolveTracePath(&path, &error)) {
    LogLine(error);
    return 1;
  }
  // A run folder keeps the budgets its pytest session asked for beside the trace.
  if (path != argv[optind] &&
      !ReadBudgetFile(std::string(argv[optind]) + "/" + kPytestBudgetFile, &budgets, &error)) {
    LogLine(error);
    return 1;
  }
  if (budgets.empty()) return UsageError("check", "no budget given (--budget KEY=SIZE)");
  std::unique_ptr<AnalyzedTrace> trace = Analyze({path, {}}, options, &error);
  if (trace == nullptr) {
    LogLine(error);
    return 1;
  }
  if (trace->report->truncated) {
    LogLine("warning: " + path + " is cut short (" + trace->report->truncation_reason +
            "); the budgets are checked on everything before that point");
  }
  return CheckBudgets("check", *trace->report, budgets, stdout, quiet, json);
}

}  // namespace cumemtrace

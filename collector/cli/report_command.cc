// `cumemtrace report`: summarize a trace file written by `run` or `daemon`.
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/report_html.h"
#include "collector/cli/trace_summary.h"

namespace cumemtrace {
namespace {

constexpr char kReportHelp[] = R"(Usage: cumemtrace report [OPTIONS] TRACE

Prints the summary of a trace: TRACE is a .cmtrace file, or an output folder of
`cumemtrace run` (its trace.cmtrace is used). A file that ends early (a copy taken while it
was being written, a full disk) is reported up to where it ends, with a warning.

Options:
      --json          print summary.json's content instead of the text summary
  -o, --output=DIR    also write DIR/summary.json and DIR/report.html, the viewer
                      (DIR is created if missing)
  -f, --force         replace an existing DIR/summary.json or DIR/report.html
  -h, --help          show this help
%s
Exit status: 0 on success (also for a truncated trace), 1 when TRACE cannot be read or is
not a trace, 2 for bad usage (including an existing summary.json without --force).
)";

// DIR/report.html and DIR/summary.json, both or neither (without --force), so that a retry
// after a full disk is not refused for a file the failed attempt left. Says what happened.
bool WriteOutputs(const AnalyzedTrace& trace, const std::string& summary_json,
                  const std::string& dir, bool force) {
  std::string error;
  if (!MakeOutputDir(dir, &error)) {
    LogLine(error);
    return false;
  }
  const std::string html_path = dir + "/report.html";
  if (!WriteReportHtml(trace, html_path, force, &error)) {
    LogLine(error + "; nothing was written to " + dir + "/");
    return false;
  }
  if (!WriteOutputFile(dir + "/summary.json", force ? Placement::kReplace : Placement::kNew,
                       summary_json, &error)) {
    if (force) {
      LogLine(error + "; report.html was replaced, summary.json was not");
    } else {
      unlink(html_path.c_str());
      LogLine(error + "; nothing was written to " + dir + "/");
    }
    return false;
  }
  return true;
}

}  // namespace

int ReportCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"json", no_argument, nullptr, 'j'},
      {"output", required_argument, nullptr, 'o'},
      {"force", no_argument, nullptr, 'f'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  bool json = false;
  bool force = false;
  std::string output_dir;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":o:fh", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'j': json = true; break;
      case 'o':
        if (*optarg == '\0') return EmptyValueError("report", "--output");
        output_dir = optarg;
        break;
      case 'f': force = true; break;
      case 'h': PrintHelpWithAnalysisOptions(kReportHelp); return 0;
      case ':': return UsageError("report", std::string("option '") + argv[optind - 1] +
                                                "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("report", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind >= argc) return UsageError("report", "no trace file given");
  if (optind + 1 < argc) {
    return UsageError("report", std::string("one trace at a time (unexpected '") +
                                    argv[optind + 1] + "')");
  }
  std::string path = argv[optind];
  {
    std::string error;
    if (!ResolveTracePath(&path, &error)) {
      LogLine(error);
      return 1;
    }
  }

  for (const char* name : {"/summary.json", "/report.html"}) {
    if (!output_dir.empty() && !force && PathExists(output_dir + name)) {
      LogLine(output_dir + name + " already exists (use --force to replace it)");
      return kExitUsage;
    }
  }

  TraceSummary summary;
  std::string error;
  AnalysisOptions options;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("report", error);
  // With -o, one analysis for the summary and the viewer.
  std::unique_ptr<AnalyzedTrace> detailed;
  if (!SummarizeTraceFile(path, options, &summary, &error,
                          output_dir.empty() ? nullptr : &detailed)) {
    LogLine(error);
    return 1;
  }
  if (!summary.warning.empty()) LogLine("warning: " + summary.warning);
  if (!output_dir.empty() && !WriteOutputs(*detailed, summary.json, output_dir, force)) {
    return 1;
  }
  const std::string& out = json ? summary.json : summary.text;
  fwrite(out.data(), 1, out.size(), stdout);
  if (json && !out.empty() && out.back() != '\n') fputc('\n', stdout);
  if (fflush(stdout) != 0) {
    LogLine("cannot write the report: " + ErrnoText());
    return 1;
  }
  return 0;
}

}  // namespace cumemtrace

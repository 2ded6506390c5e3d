// `cumemtrace export`: convert a trace into a file another tool opens (collector/output/exports.h).
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/output_names.h"
#include "collector/cli/trace_summary.h"
#include "collector/output/exports.h"
#include "collector/engine/engine.h"

namespace cumemtrace {
namespace {

constexpr char kExportHelp[] = R"(Usage: cumemtrace export [OPTIONS] --format FORMAT TRACE
       cumemtrace export [OPTIONS] --format html -o OUT.html RUN RUN...

Converts a trace for another viewer. TRACE is a .cmtrace file, or an output folder of
`cumemtrace run` (its trace.cmtrace is used). With several runs (html only), the page
compares them: their memory on one time axis, aligned at each run's first iteration start.
A RUN may be given as LABEL=RUN (the label defaults to the file or folder name).

Formats:
  perfetto     Perfetto protobuf trace: open it in https://ui.perfetto.dev
               (default output: TRACE.perfetto-trace)
  chrome       Chrome trace event JSON: chrome://tracing, Perfetto UI, speedscope
               (default output: TRACE.chrome.json)
  memory-viz   PyTorch memory snapshot (pickle): https://pytorch.org/memory_viz
               (default output: TRACE.memory_viz.pickle); one process: --pid, else the
               one with the highest device memory peak
  csv          the summary's tables, one CSV file each, in a folder
               (default output: TRACE.csv/)
  html         the self-contained viewer (default output: TRACE.report.html; with
               several runs, FIRST.compare.html)
  modules      the tensors at the tensor peak by module path (`run --modules`) as folded
               stacks, one "frame;frame;... bytes" line per module: a flame graph of the
               module tree in flamegraph.pl, inferno or speedscope (default output:
               TRACE.modules.folded)

TRACE.xxx means the trace file's path with .cmtrace replaced, next to it.

Options:
  -F, --format=FORMAT   one of the formats above (required)
  -o, --output=PATH     where to write (a folder for csv)
  -f, --force           replace an existing output
      --pid=PID         memory-viz: the traced process to export
      --at=oom          memory-viz: the state at the process's first out-of-memory (PyTorch's
                        OOM, else the first failed allocation) instead of the trace's end
  -h, --help            show this help
%s
Exit status: 0 on success (also for a truncated trace, with a warning), 1 when TRACE
cannot be read or the output cannot be written, 2 for bad usage (including an existing
output without --force). docs/exports.md describes every format.
)";

enum class Format { kPerfetto, kChrome, kMemoryViz, kCsv, kHtml, kModules };

bool ParseFormat(const std::string& name, Format* format, const char** suffix) {
  if (name == "perfetto") {
    *format = Format::kPerfetto;
    *suffix = ".perfetto-trace";
  } else if (name == "chrome") {
    *format = Format::kChrome;
    *suffix = ".chrome.json";
  } else if (name == "memory-viz") {
    *format = Format::kMemoryViz;
    *suffix = ".memory_viz.pickle";
  } else if (name == "csv") {
    *format = Format::kCsv;
    *suffix = ".csv";
  } else if (name == "html") {
    *format = Format::kHtml;
    *suffix = ".report.html";
  } else if (name == "modules") {
    *format = Format::kModules;
    *suffix = ".modules.folded";
  } else {
    return false;
  }
  return true;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The compare page of several runs (`export --format html RUN RUN...`).
int ExportCompareHtml(const std::vector<std::string>& args, const AnalysisOptions& options,
                      std::string output, bool force) {
  std::vector<std::string> labels, paths;
  for (const std::string& arg : args) {
    auto [label, path] = LabeledRun(arg);
    std::string error;
    if (!ResolveTracePath(&path, &error)) {
      LogLine(error);
      return 1;
    }
    labels.push_back(std::move(label));
    paths.push_back(std::move(path));
  }
  if (output.empty()) {
    const std::string ext = ".cmtrace";
    const std::string& first = paths.front();
    const bool has_ext = first.size() > ext.size() &&
                         first.compare(first.size() - ext.size(), ext.size(), ext) == 0;
    output = (has_ext ? first.substr(0, first.size() - ext.size()) : first) + ".compare.html";
  }
  if (!force && PathExists(output)) {
    LogLine(output + " already exists (use --force to replace it)");
    return kExitUsage;
  }
  for (const std::string& path : paths) {
    if (SameFile(output, path)) {
      LogLine(output + " is one of the traces being compared; choose another output (nothing " +
              "was changed)");
      return kExitUsage;
    }
  }
  const Placement placement = force ? Placement::kReplace : Placement::kNew;
  std::vector<std::unique_ptr<AnalyzedTrace>> traces;
  std::vector<ViewerRun> runs;
  std::string error;
  for (size_t i = 0; i < paths.size(); ++i) {
    traces.push_back(Analyze({paths[i], {}}, options, &error));
    if (traces.back() == nullptr) {
      LogLine(error);
      return 1;
    }
    if (traces.back()->report->truncated) {
      LogLine("warning: " + paths[i] + " is cut short (" +
              traces.back()->report->truncation_reason + "); the page shows what came before");
    }
    runs.push_back(ViewerRun{labels[i], traces.back().get()});
  }
  auto page = [&runs](std::ostream& out) { WriteCompareViewerHtml(runs, out); };
  if (!WriteOutputFile(output, placement, page, &error)) {
    LogLine(error);
    return 1;
  }
  LogLine("wrote " + output);
  return 0;
}

}  // namespace

int ExportCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"format", required_argument, nullptr, 'F'},
      {"output", required_argument, nullptr, 'o'},
      {"force", no_argument, nullptr, 'f'},
      {"pid", required_argument, nullptr, 'p'},
      {"at", required_argument, nullptr, 'a'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::string format_name, output;
  bool force = false;
  long pid = -1;
  std::string at;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":F:o:fh", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'F': format_name = optarg; break;
      case 'o':
        if (*optarg == '\0') return EmptyValueError("export", "--output");
        output = optarg;
        break;
      case 'f': force = true; break;
      case 'p': {
        uint32_t parsed = 0;
        if (!ParseProcessId(optarg, &parsed)) {
          return UsageError("export", std::string("--pid needs a process id (1 to 4294967295), ") +
                                          "not '" + optarg + "'");
        }
        pid = parsed;
        break;
      }
      case 'a':
        if (std::string(optarg) != "oom") {
          return UsageError("export", std::string("--at takes 'oom', not '") + optarg + "'");
        }
        at = optarg;
        break;
      case 'h': PrintHelpWithAnalysisOptions(kExportHelp); return 0;
      case ':': return UsageError("export", std::string("option '") + argv[optind - 1] +
                                                "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("export", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (format_name.empty()) {
    return UsageError("export",
                      "no --format given (perfetto, chrome, memory-viz, csv, html or modules)");
  }
  Format format;
  const char* suffix = nullptr;
  if (!ParseFormat(format_name, &format, &suffix)) {
    return UsageError("export", "unknown format '" + format_name +
                                    "' (perfetto, chrome, memory-viz, csv, html or modules)");
  }
  if (pid >= 0 && format != Format::kMemoryViz) {
    return UsageError("export", "--pid applies to --format memory-viz only");
  }
  if (!at.empty() && format != Format::kMemoryViz) {
    return UsageError("export", "--at applies to --format memory-viz only");
  }
  if (optind >= argc) return UsageError("export", "no trace file given");
  std::string error;
  AnalysisOptions options;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("export", error);
  options.timelines = options.sorted = true;  // exports draw every event, in exact order
  if (optind + 1 < argc) {
    if (format != Format::kHtml) {
      return UsageError("export", std::string("one trace at a time, except for --format html ") +
                                      "(unexpected '" + argv[optind + 1] + "')");
    }
    return ExportCompareHtml({argv + optind, argv + argc}, options, output, force);
  }
  std::string path = argv[optind];
  if (!ResolveTracePath(&path, &error)) {
    LogLine(error);
    return 1;
  }
  if (output.empty()) {
    const std::string ext = ".cmtrace";
    const bool has_ext = path.size() > ext.size() &&
                         path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
    output = (has_ext ? path.substr(0, path.size() - ext.size()) : path) + suffix;
  }
  if (format == Format::kCsv) {
    if (PathExists(output) && !IsDirectory(output)) {
      LogLine(output + " exists and is not a folder");
      return kExitUsage;
    }
  }
  if (!force && PathExists(output)) {
    LogLine(output + " already exists (use --force to replace it)");
    return kExitUsage;
  }
  if (SameFile(output, path)) {
    LogLine(output + " is the trace being exported; choose another output (nothing was changed)");
    return kExitUsage;
  }

  // lifetimes.csv has a row per allocation; the viewer groups a live set by lifetime class.
  options.keep_lifetimes = format == Format::kCsv || format == Format::kHtml;
  std::unique_ptr<AnalyzedTrace> trace = Analyze({path, {}}, options, &error);
  if (trace == nullptr) {
    LogLine(error);
    return 1;
  }
  if (trace->report->truncated) {
    LogLine("warning: " + path + " is cut short (" + trace->report->truncation_reason +
            "); the export covers everything before that point");
  }

  const Placement placement = force ? Placement::kReplace : Placement::kNew;
  bool ok = true;
  switch (format) {
    case Format::kPerfetto:
      ok = WriteOutputFile(
          output, placement, [&](std::ostream& out) { WritePerfettoTrace(*trace, out); }, &error);
      break;
    case Format::kChrome:
      ok = WriteOutputFile(
          output, placement, [&](std::ostream& out) { WriteChromeTrace(*trace, out); }, &error);
      break;
    case Format::kHtml:
      ok = WriteOutputFile(
          output, placement, [&](std::ostream& out) { WriteViewerHtml(*trace, out); }, &error);
      break;
    case Format::kModules: {
      const std::string folded = ModuleFoldedStacks(*trace->report);
      if (folded.empty()) {
        LogLine(path + " has no module paths (trace with `cumemtrace run --modules`)");
        return 1;
      }
      ok = WriteOutputFile(
          output, placement, [&](std::ostream& out) { out << folded; }, &error);
      break;
    }
    case Format::kMemoryViz: {
      const Report& report = *trace->report;
      if (report.processes.empty()) {
        LogLine(path + " holds no traced process");
        return 1;
      }
      size_t process = ProcessWithHighestPeak(report);
      uint64_t unused = 0;
      if (!at.empty() && pid < 0 && !FirstOutOfMemory(report.processes[process], &unused)) {
        // --at oom: the first process that ran out of memory, rather than the highest peak.
        for (size_t i = 0; i < report.processes.size(); ++i) {
          if (FirstOutOfMemory(report.processes[i], &unused)) {
            process = i;
            break;
          }
        }
      }
      if (pid >= 0) {
        process = report.processes.size();
        for (size_t i = 0; i < report.processes.size(); ++i) {
          if (report.processes[i].pid == static_cast<uint32_t>(pid)) process = i;
        }
        if (process == report.processes.size()) {
          return UsageError("export", "no process " + std::to_string(pid) + " in " + path);
        }
      } else if (report.processes.size() > 1) {
        LogLine("note: " + std::to_string(report.processes.size()) +
                " processes in the trace; exporting pid " +
                std::to_string(report.processes[process].pid) +
                (at.empty() ? ", the one with the highest device memory peak"
                            : ", the first that ran out of memory") +
                " (choose with --pid)");
      }
      uint64_t at_ns = 0;
      if (!at.empty() && !FirstOutOfMemory(report.processes[process], &at_ns)) {
        LogLine("pid " + std::to_string(report.processes[process].pid) + " in " + path +
                " never ran out of memory: nothing to export --at oom");
        return 1;
      }
      ok = WriteOutputFile(
          output, placement,
          [&](std::ostream& out) {
            if (at.empty()) {
              WriteMemoryVizSnapshot(*trace, process, out);
            } else {
              WriteMemoryVizSnapshotAt(*trace, process, at_ns, out);
            }
          },
          &error);
      break;
    }
    case Format::kCsv:
      if (!MakeOutputDir(output, &error)) {
        ok = false;
        break;
      }
      for (const auto& [name, content] : SummaryCsvTables(*trace->report)) {
        ok = WriteOutputFile(
            output + "/" + name, placement,
            // Captures the table, not the structured binding (C++20 only; clang rejects it).
            [&table = content](std::ostream& out) { out << table; }, &error);
        if (!ok) break;
      }
      break;
  }
  if (!ok) {
    LogLine(error);
    return 1;
  }
  LogLine("wrote " + output + (format == Format::kCsv ? "/" : ""));
  return 0;
}

}  // namespace cumemtrace

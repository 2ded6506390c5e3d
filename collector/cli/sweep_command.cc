// `cumemtrace sweep`: runs a program once per value of a parameter, each under tracing, and
// prints memory versus the parameter (the EP plan's "memory vs depth" table), with CSV and
// the viewer's sweep chart (sweep.html).
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/output_names.h"
#include "collector/cli/trace_summary.h"
#include "collector/output/exports.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {
namespace {

constexpr char kSweepHelp[] = R"(Usage: cumemtrace sweep --param NAME=V1,V2,... [OPTIONS] [--] [PROGRAM ARGS...]

Runs the program once per value of NAME, each time under `cumemtrace run`, with every
{NAME} in its arguments replaced by the value, then prints memory versus the parameter:
the device peak, the memory live at the peak that persists across iterations (weights,
optimizer state), and activation memory (peak minus persistent). Several programs or
modes go in one table with --run LABEL=COMMAND, once per command.

  cumemtrace sweep --param depth=10,50,100 -- python ep_train.py --depth {depth}
  cumemtrace sweep --param depth=10,50,100 \
      --run "EP=python ep_train.py --depth {depth}" --run "BP=python ep_train.py --bp --depth {depth}"

Options:
      --param=NAME=VALUES    the parameter and its comma-separated values (required)
      --run=LABEL=COMMAND    a labeled command, split like a shell would (no command
                             substitution); repeatable
      --label=LABEL          the label of the command given after --
  -o, --output=DIR           where the runs go (DIR/<label>-<NAME>=<value>/), sweep.csv and
                             sweep.html (the chart, opens in a browser);
                             default: a new folder cumemtrace-sweep-<n>/
      --allocator=MODE, --kernels[=WHAT], --no-kernels, --phase=PHASE=MODULE:QUALNAME
                             passed to every `cumemtrace run` (see its --help)
      --json                 print the points as JSON (schema cumemtrace.sweep/1) instead
                             of the table
  -h, --help                 show this help
%s
Exit status: 0 when every run exited 0, 1 otherwise, 2 for bad usage.
)";

struct Command {
  std::string label;
  std::vector<std::string> argv;
};

bool SplitCommand(const std::string& text, std::vector<std::string>* words, std::string* error) {
  // wordexp refuses '{' and '}' (shell syntax), which the {NAME} placeholders need: carry
  // them through as control characters and put them back after the split.
  std::string protected_text = text;
  for (char& c : protected_text) {
    if (c == '{') c = '\x01';
    if (c == '}') c = '\x02';
  }
  wordexp_t expansion;
  const int rc = wordexp(protected_text.c_str(), &expansion, WRDE_NOCMD);
  if (rc != 0) {
    *error = "cannot split '" + text + "'" +
             (rc == WRDE_CMDSUB ? " (command substitution is not allowed)" : "");
    return false;
  }
  words->assign(expansion.we_wordv, expansion.we_wordv + expansion.we_wordc);
  wordfree(&expansion);
  for (std::string& word : *words) {
    for (char& c : word) {
      if (c == '\x01') c = '{';
      if (c == '\x02') c = '}';
    }
  }
  return !words->empty();
}

std::string Substitute(std::string arg, const std::string& name, const std::string& value) {
  const std::string key = "{" + name + "}";
  for (size_t at = arg.find(key); at != std::string::npos; at = arg.find(key, at + value.size())) {
    arg.replace(at, key.size(), value);
  }
  return arg;
}

// Runs argv and returns its shell-style status (128+N for signal N, 127 when it cannot run).
int RunAndWait(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t child = fork();
  if (child < 0) return 127;
  if (child == 0) {
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int SweepCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"param", required_argument, nullptr, 'p'},
      {"run", required_argument, nullptr, 'r'},
      {"label", required_argument, nullptr, 'l'},
      {"output", required_argument, nullptr, 'o'},
      {"allocator", required_argument, nullptr, 'a'},
      {"no-kernels", no_argument, nullptr, 'k'},
      {"kernels", optional_argument, nullptr, 'K'},
      {"phase", required_argument, nullptr, 'f'},
      {"json", no_argument, nullptr, 'j'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::string param, label, output_dir;
  std::vector<std::string> run_specs, forwarded;
  bool as_json = false;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, "+:o:h", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'p': param = optarg; break;
      case 'r': run_specs.push_back(optarg); break;
      case 'l': label = optarg; break;
      case 'o':
        if (*optarg == '\0') return EmptyValueError("sweep", "--output");
        output_dir = optarg;
        break;
      case 'a': forwarded.push_back(std::string("--allocator=") + optarg); break;
      case 'k': forwarded.push_back("--no-kernels"); break;
      case 'K':
        if (KernelsEnvValue(optarg).empty()) {
          return UsageError("sweep", "--kernels must be 'records' or 'launches', not '" +
                                         std::string(optarg) + "'");
        }
        forwarded.push_back(optarg != nullptr ? std::string("--kernels=") + optarg
                                              : std::string("--kernels"));
        break;
      case 'f': forwarded.push_back(std::string("--phase=") + optarg); break;
      case 'j': as_json = true; break;
      case 'h': PrintHelpWithAnalysisOptions(kSweepHelp); return 0;
      case ':': return UsageError("sweep", std::string("option '") + argv[optind - 1] +
                                               "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("sweep", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  const size_t eq = param.find('=');
  if (param.empty() || eq == 0 || eq == std::string::npos) {
    return UsageError("sweep", "--param NAME=V1,V2,... is required");
  }
  const std::string name = param.substr(0, eq);
  const std::vector<std::string> values = SplitValues(param.substr(eq + 1));
  if (values.empty()) return UsageError("sweep", "--param " + name + " has no values");

  std::vector<Command> commands;
  std::string error;
  for (const std::string& spec : run_specs) {
    const size_t at = spec.find('=');
    Command c;
    if (at == std::string::npos || at == 0 || !SplitCommand(spec.substr(at + 1), &c.argv, &error)) {
      return UsageError("sweep", "--run wants LABEL=COMMAND, not '" + spec + "'" +
                                     (error.empty() ? "" : ": " + error));
    }
    c.label = spec.substr(0, at);
    commands.push_back(std::move(c));
  }
  if (optind < argc) commands.push_back(Command{label, {argv + optind, argv + argc}});
  if (commands.empty()) return UsageError("sweep", "no program to run (-- PROGRAM or --run)");
  AnalysisOptions options;
  if (!ToAnalysisOptions(flags, &options, &error)) return UsageError("sweep", error);
  if (flags.phase_rules_file.has_value()) {
    forwarded.push_back("--phase-rules=" + *flags.phase_rules_file);
  }
  if (!flags.iteration.empty()) forwarded.push_back("--iteration=" + flags.iteration);
  if (!flags.infer) forwarded.push_back("--no-infer");

  if (output_dir.empty()) {
    for (int n = 1;; ++n) {
      output_dir = "cumemtrace-sweep-" + std::to_string(n);
      if (mkdir(output_dir.c_str(), 0700) == 0) break;
      if (errno != EEXIST) {
        LogLine("cannot create " + output_dir + ": " + ErrnoText());
        return 1;
      }
    }
  } else if (mkdir(output_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    LogLine("cannot create " + output_dir + ": " + ErrnoText());
    return 1;
  }
  const std::string csv_path = output_dir + "/sweep.csv";
  const std::string html_path = output_dir + "/sweep.html";
  for (const std::string& path : {csv_path, html_path}) {
    if (PathExists(path)) return UsageError("sweep", path + " already exists");
  }

  const std::string self = ExecutableDir() + "/cumemtrace";
  std::vector<SweepPoint> points;
  bool all_ok = true;
  std::vector<std::string> run_folders;
  for (const std::string& value : values) {
    for (const Command& command : commands) {
      // Values and labels are text, never paths: "x=../../.." stays one folder inside -o.
      const std::string run_name = SweepRunFolderName(command.label, name, value, &run_folders);
      const std::string run_dir = output_dir + "/" + run_name;
      std::vector<std::string> run{self, "run", "-o", run_dir, "--quiet"};
      run.insert(run.end(), forwarded.begin(), forwarded.end());
      run.push_back("--");
      for (const std::string& arg : command.argv) run.push_back(Substitute(arg, name, value));
      // Progress, one line per step: "sweep 3/6: EP depth=200", then its time and status.
      const std::string step = std::to_string(points.size() + 1) + "/" +
                               std::to_string(values.size() * commands.size()) + ": " +
                               (command.label.empty() ? "" : command.label + " ") + name + "=" +
                               value;
      LogLine("sweep " + step);
      const auto started = std::chrono::steady_clock::now();
      SweepPoint point;
      point.label = command.label;
      point.value = value;
      point.exit_status = RunAndWait(run);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      char took[32];
      snprintf(took, sizeof(took), "%.1f s", seconds);
      LogLine("sweep " + step + " (" + took +
              (point.exit_status == 0 ? ")" : ", exit " + std::to_string(point.exit_status) + ")"));
      if (PathExists(run_dir + "/report.html")) point.page = run_name + "/report.html";
      all_ok = all_ok && point.exit_status == 0;
      if (!FiguresOfTrace(run_dir, options, command.label, &point.figures, &error)) {
        LogLine("sweep: " + run_dir + ": " + error);
      }
      points.push_back(std::move(point));
    }
  }
  const std::string table = as_json ? SweepJson(name, points) : SweepText(name, points);
  fputs(table.c_str(), stdout);
  std::ostringstream html;
  WriteSweepViewerHtml(name, points, html);
  if (!WriteNewFile(csv_path, SweepCsv(name, points), &error) ||
      !WriteNewFile(html_path, html.str(), &error)) {
    LogLine(error);
    return 1;
  }
  LogLine("sweep written to " + output_dir +
          "/ (sweep.csv, sweep.html, and one run folder per point); open " + html_path);
  return all_ok ? 0 : 1;
}

}  // namespace cumemtrace

// `cumemtrace run`: launch a program with the tracer injected, collect its streams (and
// those of its children) on a private socket into one trace file, then summarize it.
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/cli/analysis_flags.h"
#include "collector/cli/budget_check.h"
#include "collector/cli/cli_support.h"
#include "collector/cli/collector_server.h"
#include "collector/cli/commands.h"
#include "collector/cli/live_view.h"
#include "collector/cli/log.h"
#include "collector/cli/report_html.h"
#include "collector/cli/torch_bridge_cache.h"
#include "collector/cli/trace_summary.h"
#include "collector/cli/trace_writer.h"

extern char** environ;

namespace cumemtrace {
namespace {

constexpr char kRunHelp[] = R"(Usage: cumemtrace run [OPTIONS] [--] PROGRAM [ARGS...]

Runs PROGRAM with the cumemtrace tracer injected, records the GPU memory activity of it and
of every process it starts into one trace file, then prints a summary on stderr (the
program's own stdout is left untouched).

Options:
  -o, --output=DIR        write the trace into DIR (created if missing; refused when
                          DIR/trace.cmtrace, summary.json or report.html exists). Default: a
                          new folder cumemtrace-<program>-<n>/ in the current directory.
      --allocator=MODE    native (default): leave PyTorch's allocator as it is; its tensors
                          come from its own trace events (the PyTorch bridge), its segments
                          from the driver. async: PYTORCH_CUDA_ALLOC_CONF=
                          backend:cudaMallocAsync, so the driver sees every tensor (for a
                          torch without a bridge). A PYTORCH_CUDA_ALLOC_CONF already set in
                          the environment is always kept.
      --kernels[=WHAT]    record kernels, which costs 1-3 us per launch: WHAT records (the
                          default) gives every kernel's GPU start and end (CUPTI kernel
                          records), launches counts them at their launch call, on their
                          thread, without GPU times. By default no kernel is recorded,
                          unless PyTorch's tensors cannot be seen (no bridge for its
                          version): then launches are counted, as phase inference needs them
      --no-kernels        never record kernels (memory and NVTX only)
      --stacks[=KIND]     record where each allocation was made: KIND python (the default
                          when only --stacks is given) records the Python stack of the
                          allocating thread, native its native return addresses (named
                          after the run from the program's files), all both. On Python
                          3.11 to 3.13 a thread's frames are read even when it let go of the
                          GIL (PyTorch's operators do); on others, only a thread that holds
                          it has a Python stack. The summary lists the stacks that held the
                          most memory at the peak; report.html and the memory_viz export
                          show each allocation's stack
      --modules           PyTorch programs: record the nn.Module path each tensor was born
                          in (module hooks on the program's modules; backward tensors take
                          their forward operation's module). The summary and summary.json
                          list the tensor bytes at the tensor peak by module
      --ops               PyTorch programs: record the operator each tensor was born in
                          (aten::addmm inside aten::linear, or the autograd node in
                          backward) and autograd's link from a backward tensor to its
                          forward operation. The summary lists the tensor bytes at the
                          tensor peak by operator and where its largest tensors were born
      --budget=KEY[@SCOPE]=SIZE
                          an upper limit on a figure of the summary (repeatable), e.g.
                          peak=20GiB, forward=8GiB, activation=6GiB, peak@gpu1=20GiB,
                          peak@rank3=20GiB; the keys are those of `cumemtrace check
                          --help`. After the summary, a table of the budgets and a last
                          line naming each one exceeded, by how much and where
      --live              while the program runs, show each process's device memory now
                          and its peak so far, per GPU, by the phase that allocated it,
                          with the iteration count and the last iteration's rise, in the
                          bottom lines of the terminal, redrawn every second (the program's
                          output scrolls above it). Only when stderr is a terminal
      --quiet             silence the tracer's notices and do not print the summary (nor
                          the budgets, unless one is exceeded)
      --wait-when-full    keep every record: a thread whose record finds the tracer's
                          ring full waits until the tracer has sent enough to make room,
                          instead of dropping it (counted, and shown as a gap). For bursts
                          beyond what the tracer sends (2 to 5 million NVTX records a
                          second, by the CPU it gets); the program runs slower in them. A
                          lost or stalled collector still drops. PyTorch's tensor events
                          never wait
      --phase=PHASE=MODULE:QUALNAME
                          Python programs: wrap that function or method in an NVTX range
                          named PHASE, without editing the program (repeatable), e.g.
                          --phase settling=ep.trainer:Trainer.settle. MODULE is found when
                          the program imports it, at any time; one that was never imported
                          or called gets a warning at exit, and the run goes on.
      --no-categories     Python programs: do not read the program's optimizers and modules
                          to name parameters, buffers, gradients and optimizer state (their
                          categories are then inferred, as for a LibTorch program)
      --no-bridge-build   Python programs whose torch has no PyTorch bridge beside the
                          tracer: do not build one (by default it is built once, before the
                          program starts, from that torch's headers into
                          $XDG_CACHE_HOME/cumemtrace/bridges, and used from there)
  -h, --help              show this help
%s
The output folder holds trace.cmtrace (the raw trace; see `cumemtrace report`) and
summary.json, and report.html, the viewer (one file; open it in a browser). Exit status:
the program's own, 128+N when it was killed by signal N,
127 when it cannot be found, 126 when it cannot be executed, 2 for bad usage, 1 when the
output folder or trace file cannot be created. When the program exits with 0: 86 when a
budget is exceeded, 2 when a budget names a figure the run does not have (the message lists
the valid keys).
)";

// How the traced program ended.
struct ChildStatus {
  int exit_code = 0;
  int signal = 0;
  bool core_dumped = false;
  int ShellStatus() const { return signal != 0 ? 128 + signal : exit_code; }
};

// Resolves PROGRAM the way execvp would, before anything is created, so that a typo leaves
// no output folder behind. Returns 0 or the errno execvp would report.
int ResolveProgram(const std::string& program, std::string* resolved) {
  auto check = [](const std::string& path) -> int {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (!S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) return EACCES;
    return 0;
  };
  if (program.find('/') != std::string::npos) {
    *resolved = program;
    return check(program);
  }
  const char* path_env = getenv("PATH");
  const std::string search = path_env != nullptr ? path_env : "/bin:/usr/bin";
  int first_error = ENOENT;
  size_t start = 0;
  for (;;) {
    const size_t colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? std::string::npos
                                                                      : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    const int error = check(candidate);
    if (error == 0) {
      *resolved = candidate;
      return 0;
    }
    // Like execvp: a file found but not executable is reported unless a later one works.
    if ((error == EACCES || error == EISDIR) && first_error == ENOENT) first_error = error;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return first_error;
}

// Paths of the Unix sockets bound in this network namespace (/proc/net/unix); false when
// that cannot be read.
bool BoundUnixSocketPaths(std::set<std::string>* paths) {
  std::ifstream in("/proc/net/unix");
  std::string line;
  if (!std::getline(in, line)) return false;  // header
  while (std::getline(in, line)) {
    // "Num RefCount Protocol Flags Type St Inode Path": the path is the 8th field.
    std::istringstream fields(line);
    std::string field, path;
    for (int i = 0; i < 7 && fields >> field; ++i) {
    }
    if (fields >> path && !path.empty() && path[0] == '/') paths->insert(path);
  }
  return true;
}

// A `run` killed by SIGKILL leaves BASE/cumemtrace-run-XXXXXX/collector.sock behind. Such a
// folder is removed when it is ours (uid, 0700, not a link) and its socket is bound by no
// process any more; a live run's socket is always bound, and one still being set up has no
// socket file yet, so neither is touched.
void RemoveStaleRunSocketDirs(const std::string& base) {
  DIR* dir = opendir(base.c_str());
  if (dir == nullptr) return;
  std::set<std::string> bound;
  bool bound_read = false;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("cumemtrace-run-", 0) != 0 || name.size() != 21) continue;
    const std::string path = base + "/" + name;
    const std::string socket = path + "/collector.sock";
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) != 0) {
      continue;
    }
    if (lstat(socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (!bound_read) {
      if (!BoundUnixSocketPaths(&bound)) break;  // cannot tell: leave everything
      bound_read = true;
    }
    if (bound.count(socket) > 0) continue;
    if (unlink(socket.c_str()) == 0 && rmdir(path.c_str()) == 0) {
      LogLine("removed " + path + ", left behind by a run that was killed");
    }
  }
  closedir(dir);
}

// Creates DIR and its missing parents; records the ones it created (deepest last).
bool MakeDirs(const std::string& dir, std::vector<std::string>* created, std::string* error) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    *error = dir + " exists and is not a directory";
    return false;
  }
  const size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0 &&
      !MakeDirs(dir.substr(0, slash), created, error)) {
    return false;
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create " + dir + ": " + strerror(errno);
    return false;
  }
  created->push_back(dir);
  return true;
}

// The environment of the traced program: ours plus the injection variables.
std::vector<std::string> ChildEnvironment(const std::string& tracer, const std::string& socket,
                                          const std::string& allocator, const std::string& kernels,
                                          const std::string& stacks, bool modules, bool ops,
                                          bool quiet, bool wait_when_full,
                                          const std::vector<std::string>& python_phases,
                                          bool categories,
                                          const std::string& pytest_budget_file,
                                          const std::string& bridge_dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  auto find = [&env](const std::string& name) -> std::string* {
    for (std::string& entry : env) {
      if (entry.compare(0, name.size() + 1, name + "=") == 0) return &entry;
    }
    return nullptr;
  };
  auto set = [&](const std::string& name, const std::string& value) {
    std::string* entry = find(name);
    if (entry != nullptr) {
      *entry = name + "=" + value;
    } else {
      env.push_back(name + "=" + value);
    }
  };
  auto value_of = [&](const std::string& name) -> const char* {
    const std::string* entry = find(name);
    return entry == nullptr ? nullptr : entry->c_str() + name.size() + 1;
  };

  // ld.so splits LD_PRELOAD on ':' and spaces; ':' is the separator that survives paths.
  const char* preload = value_of("LD_PRELOAD");
  set("LD_PRELOAD", preload != nullptr && *preload != '\0' ? tracer + ":" + preload : tracer);
  for (const char* name : {"CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"}) {
    const char* current = value_of(name);
    if (current == nullptr || *current == '\0') set(name, tracer);
  }
  set("CUMEMTRACE_SOCKET", socket);
  if (!kernels.empty()) set("CUMEMTRACE_KERNELS", kernels);
  if (!stacks.empty()) set("CUMEMTRACE_STACKS", stacks);
  if (modules) set("CUMEMTRACE_MODULES", "1");
  if (ops) set("CUMEMTRACE_OPS", "1");
  if (quiet) set("CUMEMTRACE_QUIET", "1");
  if (wait_when_full) set("CUMEMTRACE_WAIT_WHEN_FULL", "1");
  if (value_of("PYTORCH_CUDA_ALLOC_CONF") != nullptr) {
    set("CUMEMTRACE_ALLOCATOR_MODE", "user");
  } else if (allocator == "async") {
    set("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");
    set("CUMEMTRACE_ALLOCATOR_MODE", "async");
  } else {
    set("CUMEMTRACE_ALLOCATOR_MODE", "native");
  }
  if (!categories) set("CUMEMTRACE_CATEGORIES", "0");
  auto prepend_python_path = [&](const std::string& dir) {
    const char* path = value_of("PYTHONPATH");
    set("PYTHONPATH", path != nullptr && *path != '\0' ? dir + ":" + path : dir);
  };
  if (!pytest_budget_file.empty()) {
    // pytest: the plugin that puts each test in its own range and reads its memory limits.
    prepend_python_path(PytestPluginDir());
    const char* plugins = value_of("PYTEST_PLUGINS");
    set("PYTEST_PLUGINS", plugins != nullptr && *plugins != '\0'
                              ? std::string(plugins) + ",cumemtrace_pytest"
                              : std::string("cumemtrace_pytest"));
    set("CUMEMTRACE_BUDGET_FILE", pytest_budget_file);
  }
  if (!bridge_dir.empty()) set("CUMEMTRACE_TORCH_BRIDGE_DIR", bridge_dir);
  if (!python_phases.empty()) {
    std::string spec;
    for (const std::string& phase : python_phases) spec += (spec.empty() ? "" : ";") + phase;
    set("CUMEMTRACE_PYTHON_PHASES", spec);
  }
  if (categories || !python_phases.empty()) {
    // A sitecustomize on PYTHONPATH installs the Python side at interpreter start (and then
    // runs any sitecustomize it shadows); the program's files are not touched.
    prepend_python_path(PythonHookDir());
  }
  return env;
}

// The run's one trace file receives every stream.
class SharedFilePolicy : public StreamPolicy {
 public:
  // With `live`, every message also goes to the live view's tally.
  SharedFilePolicy(TraceFileWriter* file, LiveTally* live) : file_(file), live_(live) {}
  TraceFileWriter* FileAtAccept(uint32_t, const PeerInfo&) override { return file_; }
  TraceFileWriter* FileAtHandshake(uint32_t, const PeerInfo&, const v1::Handshake&,
                                   std::string* error) override {
    *error = "no trace file";  // unreachable: FileAtAccept always answers
    return nullptr;
  }
  void StreamFinished(uint32_t stream_id, TraceFileWriter*) override {
    if (live_ != nullptr) live_->StreamEnded(stream_id);
  }
  void MessageRecorded(uint32_t stream_id, const v1::StreamMessage& message) override {
    if (live_ != nullptr) live_->Add(stream_id, message);
  }

 private:
  TraceFileWriter* file_;
  LiveTally* live_;
};

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Removes what `run` created when the program could not be started.
void RemoveCreated(const std::string& trace_path, const std::vector<std::string>& dirs) {
  if (!trace_path.empty()) unlink(trace_path.c_str());
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) rmdir(it->c_str());
}

// The name of a run's default folder: the program's, or for a Python interpreter the
// script's ("python train.py" → "train") or the module's ("python -m pkg.train" → "train").
std::string RunName(char** argv) {
  const std::string program = BaseName(argv[0]);
  bool python = program.rfind("python", 0) == 0;
  for (size_t k = 6; python && k < program.size(); ++k) {
    python = (program[k] >= '0' && program[k] <= '9') || program[k] == '.';
  }
  if (!python) return program;
  for (char** a = argv + 1; *a != nullptr; ++a) {
    const std::string arg = *a;
    if (arg == "-m" && a[1] != nullptr) {
      std::string module = a[1];
      const size_t dot = module.rfind('.');
      return dot == std::string::npos ? module : module.substr(dot + 1);
    }
    if (arg == "-c" || arg == "-") return program;
    if (arg.size() > 1 && arg[0] == '-') {
      // Options with a separate value: -W arg, -X opt.
      if ((arg == "-W" || arg == "-X") && a[1] != nullptr) ++a;
      continue;
    }
    std::string script = BaseName(arg);
    if (script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) {
      script.resize(script.size() - 3);
    }
    return script.empty() ? program : script;
  }
  return program;
}

// A pytest session: pytest or py.test, or a Python interpreter running `-m pytest`.
bool IsPytest(char** argv) {
  const std::string program = BaseName(argv[0]);
  if (program.rfind("pytest", 0) == 0 || program.rfind("py.test", 0) == 0) return true;
  if (program.rfind("python", 0) != 0) return false;
  for (char** a = argv + 1; *a != nullptr && a[1] != nullptr; ++a) {
    if (std::string(*a) == "-m") return std::string(a[1]) == "pytest";
  }
  return false;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  static const std::vector<option> kOptions = WithAnalysisOptions({
      {"output", required_argument, nullptr, 'o'},
      {"allocator", required_argument, nullptr, 'a'},
      {"no-kernels", no_argument, nullptr, 'k'},
      {"kernels", optional_argument, nullptr, 'K'},
      {"stacks", optional_argument, nullptr, 'S'},
      {"modules", no_argument, nullptr, 'M'},
      {"ops", no_argument, nullptr, 'O'},
      {"quiet", no_argument, nullptr, 'q'},
      {"wait-when-full", no_argument, nullptr, 'W'},
      {"phase", required_argument, nullptr, 'p'},
      {"no-categories", no_argument, nullptr, 'C'},
      {"budget", required_argument, nullptr, 'b'},
      {"live", no_argument, nullptr, 'L'},
      {"no-bridge-build", no_argument, nullptr, 'B'},
      {"help", no_argument, nullptr, 'h'},
  });
  AnalysisFlags flags;
  std::vector<std::string> python_phases;
  std::vector<Budget> budgets;
  std::string output_dir;
  // The program as it is: the bridge sees tensors without changing PyTorch's allocator.
  std::string allocator = "native";
  std::string kernels;  // CUMEMTRACE_KERNELS: "" (auto), "0", "launches" or "1" (records)
  std::string stacks;   // CUMEMTRACE_STACKS: "" (off), "python", "native" or "all"
  bool modules = false;  // CUMEMTRACE_MODULES=1
  bool ops = false;      // CUMEMTRACE_OPS=1
  bool quiet = false;
  bool wait_when_full = false;
  bool categories = true;
  bool live = false;
  bool bridge_build = true;
  opterr = 0;
  optind = 1;
  // '+': stop at the program name, so its own options are left alone.
  for (int opt; (opt = getopt_long(argc, argv, "+:o:h", kOptions.data(), nullptr)) != -1;) {
    switch (opt) {
      case 'o':
        if (*optarg == '\0') return EmptyValueError("run", "--output");
        output_dir = optarg;
        break;
      case 'a':
        allocator = optarg;
        if (allocator != "async" && allocator != "native") {
          return UsageError("run", "--allocator must be 'async' or 'native', not '" +
                                       allocator + "'");
        }
        break;
      case 'k': kernels = "0"; break;
      case 'K':
        kernels = KernelsEnvValue(optarg);
        if (kernels.empty()) {
          return UsageError("run", "--kernels must be 'records' or 'launches', not '" +
                                       std::string(optarg) + "'");
        }
        break;
      case 'S':
        stacks = optarg != nullptr ? optarg : "python";
        if (stacks != "python" && stacks != "native" && stacks != "all") {
          return UsageError("run", "--stacks must be 'python', 'native' or 'all', not '" +
                                       stacks + "'");
        }
        break;
      case 'M':
        modules = true;
        break;
      case 'O':
        ops = true;
        break;
      case 'q': quiet = true; break;
      case 'W': wait_when_full = true; break;
      case 'L': live = true; break;
      case 'p': python_phases.push_back(optarg); break;
      case 'C': categories = false; break;
      case 'b': {
        Budget budget;
        std::string budget_error;
        if (!ParseBudget(optarg, &budget, &budget_error)) return UsageError("run", budget_error);
        budgets.push_back(std::move(budget));
        break;
      }
      case 'B':
        bridge_build = false;
        break;
      case 'h': PrintHelpWithAnalysisOptions(kRunHelp); return 0;
      case ':': return UsageError("run", std::string("option '") + argv[optind - 1] +
                                             "' needs a value");
      default:
        if (TakeAnalysisOption(opt, optarg, &flags)) break;
        return UsageError("run", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind >= argc) return UsageError("run", "no program to run");
  for (const std::string& phase : python_phases) {
    const size_t eq = phase.find('=');
    if (eq == 0 || eq == std::string::npos || phase.find(':', eq) == std::string::npos ||
        phase.back() == ':') {
      return UsageError("run", "--phase wants PHASE=MODULE:QUALNAME, not '" + phase + "'");
    }
  }
  AnalysisOptions analysis_options;
  {
    std::string rules_error;
    if (!ToAnalysisOptions(flags, &analysis_options, &rules_error)) {
      return UsageError("run", rules_error);
    }
  }
  if (output_dir.empty() && !PathExists(".")) return UsageError("run", "no current directory");
  char** program_argv = argv + optind;
  const std::string program = program_argv[0];

  const std::string tracer = TracerLibraryPath();
  if (access(tracer.c_str(), R_OK) != 0) {
    LogLine("cannot find the tracer library " + tracer + ": " + ErrnoText() +
            " (set CUMEMTRACE_TRACER_LIB, or reinstall cumemtrace)");
    return kExitUsage;
  }
  std::string executable;
  if (const int error = ResolveProgram(program, &executable); error != 0) {
    LogLine("cannot run '" + program + "': " + strerror(error));
    return error == ENOENT ? 127 : 126;
  }

  // A Python program's torch without a bridge beside the tracer gets one from the cache,
  // built there now if needed: here, never inside the traced program.
  std::string bridge_dir;
  const char* bridge_dir_set = getenv("CUMEMTRACE_TORCH_BRIDGE_DIR");
  const char* bridge_env = getenv("CUMEMTRACE_TORCH_BRIDGE");  // "0": the bridge is off
  if (bridge_build && allocator == "native" && getenv("PYTORCH_CUDA_ALLOC_CONF") == nullptr &&
      (bridge_env == nullptr || std::string(bridge_env) != "0") &&
      (bridge_dir_set == nullptr || *bridge_dir_set == '\0')) {
    const std::string tracer_dir = tracer.substr(0, tracer.rfind('/'));
    auto log = [quiet](const std::string& line) {
      if (!quiet) LogLine(line);
    };
    bridge_dir = BridgeDirForProgram(executable, tracer_dir, InstalledBridgeSettings, log);
  }

  // The output folder: created only now that the program is known to exist.
  std::vector<std::string> created_dirs;
  std::string error;
  if (!output_dir.empty()) {
    while (output_dir.size() > 1 && output_dir.back() == '/') output_dir.pop_back();
    for (const char* name : {"trace.cmtrace", "summary.json", "report.html"}) {
      if (PathExists(output_dir + "/" + name)) {
        LogLine(output_dir + "/" + name +
                " already exists; choose another folder with -o (nothing was changed)");
        return kExitUsage;
      }
    }
    if (!MakeDirs(output_dir, &created_dirs, &error)) {
      // Not a usage error: the folder could not be created (a read-only or full file
      // system, no permission), which docs/cli.md gives status 1, as for the trace file.
      LogLine(error);
      RemoveCreated("", created_dirs);
      return 1;
    }
  } else {
    const std::string prefix = "cumemtrace-" + RunName(program_argv) + "-";
    for (int n = 1;; ++n) {
      const std::string candidate = prefix + std::to_string(n);
      if (mkdir(candidate.c_str(), 0700) == 0) {
        output_dir = candidate;
        created_dirs.push_back(candidate);
        break;
      }
      if (errno != EEXIST) {
        LogLine("cannot create " + candidate + ": " + ErrnoText());
        return 1;
      }
    }
  }
  const std::string trace_path = output_dir + "/trace.cmtrace";
  std::unique_ptr<TraceFileWriter> trace = TraceFileWriter::Create(trace_path, &error);
  if (trace == nullptr) {
    LogLine(error);
    RemoveCreated("", created_dirs);
    return 1;
  }

  // The private collector socket, in a fresh 0700 directory. Those of runs that were killed
  // (SIGKILL leaves them) go first.
  RemoveStaleRunSocketDirs(RuntimeBaseDir());
  std::string socket_dir = RuntimeBaseDir() + "/cumemtrace-run-XXXXXX";
  if (mkdtemp(socket_dir.data()) == nullptr) {
    LogLine("cannot create a private directory for the collector socket under " +
            RuntimeBaseDir() + ": " + ErrnoText());
    RemoveCreated(trace_path, created_dirs);
    return 1;
  }
  const std::string socket_path = socket_dir + "/collector.sock";
  auto remove_socket = [&]() {
    unlink(socket_path.c_str());
    rmdir(socket_dir.c_str());
  };
  const int listen_fd = ListenOnUnixSocket(socket_path, &error);
  if (listen_fd < 0) {
    LogLine(error);
    remove_socket();
    RemoveCreated(trace_path, created_dirs);
    return 1;
  }
  // The live view: off, with one line saying so, when stderr is not a terminal.
  std::unique_ptr<LiveTally> live_tally;
  std::unique_ptr<LiveTerminal> live_terminal;
  if (live) {
    live_terminal = std::make_unique<LiveTerminal>(STDERR_FILENO);
    if (live_terminal->Active()) {
      live_tally = std::make_unique<LiveTally>(
          analysis_options.phase_rules != nullptr
              ? analysis_options.phase_rules
              : std::make_shared<const PhaseRules>(PhaseRules::Defaults()));
    } else {
      live_terminal.reset();
      if (!quiet) LogLine("--live: stderr is not a terminal; no live view");
    }
  }
  SharedFilePolicy policy(trace.get(), live_tally.get());
  CollectorServer server(listen_fd, &policy, CollectorServerOptions());

  // Signals arrive through a signalfd. SIGINT/SIGQUIT are read and dropped while the
  // program runs (the terminal sends them to its whole process group, so the program gets
  // them itself, as with `time`); SIGTERM/SIGHUP are passed on to it.
  sigset_t original_mask;
  const int signal_fd =
      BlockSignalsIntoFd({SIGCHLD, SIGINT, SIGQUIT, SIGTERM, SIGHUP}, &original_mask);
  if (signal_fd < 0) {
    LogLine("cannot set up signal handling: " + ErrnoText());
    remove_socket();
    RemoveCreated(trace_path, created_dirs);
    return 1;
  }

  // The pytest plugin's budget file, by an absolute path: tests may change directory.
  std::string pytest_budget_file;
  if (IsPytest(program_argv)) {
    char* absolute = realpath(output_dir.c_str(), nullptr);
    if (absolute != nullptr) {
      pytest_budget_file = std::string(absolute) + "/" + kPytestBudgetFile;
      free(absolute);
    }
  }
  const std::vector<std::string> env_strings =
      ChildEnvironment(tracer, socket_path, allocator, kernels, stacks, modules, ops, quiet,
                       wait_when_full,
                       python_phases, categories, pytest_budget_file, bridge_dir);
  std::vector<char*> child_env;
  for (const std::string& entry : env_strings) child_env.push_back(const_cast<char*>(entry.c_str()));
  child_env.push_back(nullptr);

  // exec failures come back through a close-on-exec pipe: EOF means exec succeeded.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    LogLine("cannot create a pipe: " + ErrnoText());
    remove_socket();
    RemoveCreated(trace_path, created_dirs);
    return 1;
  }
  // A file without "#!" that the kernel cannot execute (ENOEXEC) is a shell script to a
  // shell and to execvp: run it with /bin/sh as they do. Built before fork (no allocation
  // in the child).
  std::vector<char*> shell_argv = {const_cast<char*>("/bin/sh"),
                                   const_cast<char*>(executable.c_str())};
  for (char** arg = program_argv + 1; *arg != nullptr; ++arg) shell_argv.push_back(*arg);
  shell_argv.push_back(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    LogLine("cannot fork: " + ErrnoText());
    remove_socket();
    RemoveCreated(trace_path, created_dirs);
    return 1;
  }
  if (child == 0) {
    // Only async-signal-safe calls from here on.
    close(exec_pipe[0]);
    sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    execve(executable.c_str(), program_argv, child_env.data());
    if (errno == ENOEXEC) execve(shell_argv[0], shell_argv.data(), child_env.data());
    const int exec_errno = errno;
    ssize_t ignored = write(exec_pipe[1], &exec_errno, sizeof(exec_errno));
    (void)ignored;
    _exit(exec_errno == ENOENT ? 127 : 126);
  }
  close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    waitpid(child, nullptr, 0);
    LogLine("cannot run '" + program + "': " + strerror(exec_errno));
    trace.reset();
    remove_socket();
    RemoveCreated(trace_path, created_dirs);
    return exec_errno == ENOENT ? 127 : 126;
  }

  // A value of NVTX_INJECTION64_PATH that run keeps (docs/cli.md) sends every NVTX range of
  // the program to that library (Nsight Systems sets it to its own), never to the tracer:
  // the trace then has no ranges and no phases, with nothing in it to say why. Said now,
  // and written into the trace with the program's exit.
  std::string nvtx_notice;
  if (const char* nvtx = getenv("NVTX_INJECTION64_PATH");
      nvtx != nullptr && *nvtx != '\0' && !SameFile(nvtx, tracer)) {
    nvtx_notice = std::string("NVTX_INJECTION64_PATH was already set (to ") + nvtx +
                  ", e.g. by Nsight Systems), so the program's NVTX ranges go to that library, "
                  "not to cumemtrace: this trace has no ranges and no phases (unset the "
                  "variable to record them)";
    if (!quiet) LogLine("warning: " + nvtx_notice);
  }

  // Serve until the program ends; with the live view, redraw it every second.
  ChildStatus status;
  bool child_done = false;
  const int64_t started_ms = MonotonicMs();
  int64_t next_draw_ms = started_ms + 1000;
  while (!child_done) {
    int timeout_ms = -1;
    if (live_terminal != nullptr) {
      const int64_t now = MonotonicMs();
      if (now >= next_draw_ms) {
        live_terminal->Draw(*live_tally, static_cast<double>(now - started_ms) / 1000.0);
        next_draw_ms = now + 1000;
      }
      timeout_ms = static_cast<int>(next_draw_ms - now);
    }
    if (!server.PollOnce(timeout_ms, signal_fd)) continue;
    signalfd_siginfo info;
    while (read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGTERM || sig == SIGHUP) kill(child, sig);
    }
    int wstatus = 0;
    const pid_t done = waitpid(child, &wstatus, WNOHANG);
    if (done == child) {
      child_done = true;
      if (WIFSIGNALED(wstatus)) {
        status.signal = WTERMSIG(wstatus);
        status.core_dumped = WCOREDUMP(wstatus);
      } else {
        status.exit_code = WEXITSTATUS(wstatus);
      }
    }
  }

  // Everything the program sent before it ended is in the socket buffers: take it in, so
  // its handshake (and so its stream id) is known, then record how it ended.
  server.CatchUp();
  v1::TraceChunk exit_chunk;
  exit_chunk.set_stream_id(server.StreamIdForHandshakePid(static_cast<uint32_t>(child)));
  v1::LauncherExit* launcher_exit = exit_chunk.mutable_collector()->mutable_launcher_exit();
  launcher_exit->set_pid(static_cast<uint32_t>(child));
  launcher_exit->set_exit_code(status.exit_code);
  launcher_exit->set_signal(status.signal);
  launcher_exit->set_core_dumped(status.core_dumped);
  if (!trace->AppendChunk(exit_chunk, &error)) LogLine(error);
  if (!nvtx_notice.empty()) {
    v1::TraceChunk notice_chunk;
    notice_chunk.set_stream_id(exit_chunk.stream_id());
    v1::TracerNotice* notice = notice_chunk.mutable_collector()->mutable_notice();
    notice->set_level(v1::NOTICE_LEVEL_WARNING);
    notice->set_code("nvtx_injection_taken");
    notice->set_text(nvtx_notice);
    if (!trace->AppendChunk(notice_chunk, &error)) LogLine(error);
  }

  // Children the program left behind may still be sending; give them a grace period.
  const int64_t deadline = MonotonicMs() + 2000;
  while (server.open_streams() > 0) {
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0) break;
    if (server.PollOnce(static_cast<int>(left), signal_fd)) {
      signalfd_siginfo info;
      bool stop = false;
      while (read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (info.ssi_signo != SIGCHLD) stop = true;  // the user wants out: stop waiting
      }
      if (stop) break;
    }
  }
  server.Shutdown();
  remove_socket();
  if (live_terminal != nullptr) live_terminal->Finish();  // before the summary is printed
  // What reached the disk, said exactly: a trace whose writes failed (a full disk) keeps every
  // whole chunk written before, and readers stop there.
  std::string trace_problem = trace->failure();
  if (!trace->Close(&error) && trace_problem.empty()) trace_problem = error;
  const uint64_t trace_bytes = trace->bytes_written();
  trace.reset();
  close(signal_fd);
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);

  // One analysis for the summary and the viewer. --quiet leaves stderr to the program alone,
  // progress included.
  if (quiet) analysis_options.progress = nullptr;
  std::vector<std::string> not_written;
  TraceSummary summary;
  std::unique_ptr<AnalyzedTrace> detailed;
  if (!SummarizeTraceFile(trace_path, analysis_options, &summary, &error, &detailed)) {
    LogLine("cannot analyze " + trace_path + ": " + error);
    not_written = {"summary.json", "report.html"};
  } else {
    if (!summary.warning.empty()) LogLine("warning: " + summary.warning);
    if (!WriteNewFile(output_dir + "/summary.json", summary.json, &error)) {
      LogLine(error);
      not_written.push_back("summary.json");
    }
    if (!WriteReportHtml(*detailed, output_dir + "/report.html", false, &error)) {
      LogLine(error);
      not_written.push_back("report.html");
    }
    if (!quiet) fputs(summary.text.c_str(), stderr);
  }

  if (trace_problem.empty() && not_written.empty()) {
    LogLine("trace written to " + output_dir +
            "/ \xe2\x80\x94 look again with: cumemtrace report " + trace_path);
    LogLine("open " + output_dir + "/report.html");
  } else {
    std::string line = "in " + output_dir + "/: ";
    line += trace_problem.empty()
                ? "trace.cmtrace written"
                : "trace.cmtrace is incomplete: it keeps the first " +
                      std::to_string(trace_bytes) + " bytes, then " + trace_problem;
    if (!not_written.empty()) {
      line += "; not written:";
      for (const std::string& name : not_written) line += " " + name;
    }
    LogLine(line);
    if (PathExists(output_dir + "/report.html")) LogLine("open " + output_dir + "/report.html");
  }
  // Budgets last, so that the verdict is the last line. The program's own failure comes first:
  // a budget's status replaces only a 0.
  if (!budgets.empty() || PathExists(output_dir + "/" + kPytestBudgetFile)) {
    if (!ReadBudgetFile(output_dir + "/" + kPytestBudgetFile, &budgets, &error)) {
      LogLine(error);
    }
    int budget_status = 1;
    if (detailed == nullptr) {
      LogLine("budgets not checked: the trace could not be analyzed");
    } else {
      budget_status = CheckBudgets("run", *detailed->report, budgets, stderr, quiet);
    }
    if (status.ShellStatus() == 0) return budget_status;
  }
  return status.ShellStatus();
}

}  // namespace cumemtrace

#include "collector/cli/torch_bridge_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collector/cli/cli_support.h"
#include CUMEMTRACE_BRIDGE_ABI_HEADER  // the bridge interface of this tracer

namespace cumemtrace {
namespace {

constexpr char kFailedMarker[] = "build.failed";
constexpr char kBuildLog[] = "build.log";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

bool MakeDirsPrivate(const std::string& dir, std::string* error) {
  for (size_t at = 1; at != std::string::npos;) {
    at = dir.find('/', at + 1);
    const std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = "cannot create " + part + ": " + strerror(errno);
      return false;
    }
  }
  return true;
}

// Runs `argv` with stdout and stderr into `log_path`; its exit status, or -1.
int RunLogged(const std::vector<std::string>& argv, const std::string& log_path) {
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) return -1;
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log);
  if (child < 0) return -1;
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The last line of `path` that says "error", else its last line.
std::string FirstErrorLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (error.empty() && line.find("error") != std::string::npos) error = line;
  }
  return error.empty() ? last : error;
}

}  // namespace

std::vector<std::string> BridgeCompileCommand(const BridgeBuildSettings& settings,
                                              const TorchInstall& torch,
                                              const std::string& output) {
  // As tracer/CMakeLists.txt's cumemtrace_add_torch_bridge builds it, for this torch's ABI.
  std::vector<std::string> argv = {
      settings.compiler,
      "-std=c++17",
      "-O2",
      "-shared",
      "-fPIC",
      "-fvisibility=hidden",
      "-fvisibility-inlines-hidden",
      "-D_GLIBCXX_USE_CXX11_ABI=" + std::string(torch.cxx11_abi ? "1" : "0"),
      "-DCUMEMTRACE_TORCH_VERSION=\"" + torch.version + "\"",
      "-I" + settings.source_root,
      "-isystem",
      torch.dir + "/include"};
  for (const std::string& dir : settings.include_dirs) {
    argv.push_back("-isystem");
    argv.push_back(dir);
  }
  argv.push_back(settings.source_root + "/" + settings.shim_source);
  argv.push_back("-o");
  argv.push_back(output);
  argv.push_back("-ldl");
  return argv;
}

BridgeResult EnsureCachedBridge(const TorchInstall& torch, const BridgeBuildSettings& settings,
                                const std::function<void(const std::string&)>& log) {
  BridgeResult result;
  const auto start = std::chrono::steady_clock::now();
  if (settings.cache_root.empty()) {
    result.reason = "no cache folder (neither XDG_CACHE_HOME nor HOME is set)";
    return result;
  }
  result.dir = settings.cache_root + "/" + TorchBridgeCacheKey(torch, settings.key_version);
  result.library = result.dir + "/" + TorchBridgeLibraryName(torch.version);
  if (PathExists(result.library)) {  // the common case: no lock needed to read it
    result.ready = true;
    return result;
  }
  const std::string failed = result.dir + "/" + kFailedMarker;
  const std::string build_log = result.dir + "/" + kBuildLog;
  auto failed_before = [&]() {
    std::ifstream in(failed);
    std::string why;
    std::getline(in, why);
    result.reason = "an earlier build failed: " + why + " (" + build_log + "; remove " +
                    result.dir + " to try again)";
    return result;
  };
  if (PathExists(failed)) return failed_before();
  if (settings.compiler.empty()) {
    result.reason = "no C++ compiler to build it (set CXX, or install g++)";
    return result;
  }
  if (!HasTorchHeaders(torch.dir)) {
    result.reason = torch.dir + " ships no C++ headers to build it from";
    return result;
  }
  std::string error;
  if (!MakeDirsPrivate(result.dir, &error)) {
    result.reason = error;
    return result;
  }
  const std::string lock_path = result.dir + "/.lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) {
    result.reason = "cannot open " + lock_path + ": " + strerror(errno);
    return result;
  }
  if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    log("waiting for another cumemtrace that builds the PyTorch bridge for torch " + torch.version +
        " in " + result.dir);
    while (flock(lock, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  // Whoever held the lock may have built it (or failed) meanwhile.
  if (PathExists(result.library)) {
    close(lock);
    result.ready = true;
    result.seconds = Seconds(start);
    return result;
  }
  if (PathExists(failed)) {
    close(lock);
    return failed_before();
  }
  log("building the PyTorch bridge for torch " + torch.version + " (once; into " + result.dir +
      ")");
  const std::string temporary = result.library + ".tmp";
  const int status = RunLogged(BridgeCompileCommand(settings, torch, temporary), build_log);
  result.seconds = Seconds(start);
  if (status == 0 && rename(temporary.c_str(), result.library.c_str()) == 0) {
    result.ready = true;
    result.built = true;
  } else {
    unlink(temporary.c_str());
    const std::string why =
        status < 0 ? std::string("cannot run ") + settings.compiler : FirstErrorLine(build_log);
    std::string ignored;
    WriteOutputFile(failed, Placement::kReplace, why + "\n", &ignored);
    result.reason = "the build failed: " + why + " (" + build_log + ")";
  }
  close(lock);
  return result;
}

BridgeBuildSettings InstalledBridgeSettings(const TorchInstall& torch) {
  BridgeBuildSettings settings;
  settings.cache_root = TorchBridgeCacheRoot();
  // A bridge of another interface is refused by the tracer: a cumemtrace whose interface
  // changed within one version must not find it.
  settings.key_version = std::string(CUMEMTRACE_VERSION) + "-bridge" +
                         std::to_string(CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION);
  settings.compiler = FindCxxCompiler();
  settings.source_root = ExecutableDir() + "/../share/cumemtrace/torch_bridge";
  settings.shim_source = CUMEMTRACE_BRIDGE_SHIM_SOURCE;
  std::istringstream dirs(CUMEMTRACE_CUDA_INCLUDE_DIRS);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (PathExists(dir + "/cuda_runtime_api.h")) settings.include_dirs.push_back(dir);
  }
  // A pip torch brings the CUDA runtime's headers in site-packages/nvidia/<part>/include.
  const std::string nvidia = torch.dir + "/../nvidia";
  if (DIR* dir = opendir(nvidia.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      const std::string include = nvidia + "/" + entry->d_name + "/include";
      if (entry->d_name[0] != '.' && PathExists(include + "/cuda_runtime_api.h")) {
        settings.include_dirs.push_back(include);
      }
    }
    closedir(dir);
  }
  return settings;
}

std::string BridgeDirForProgram(
    const std::string& program, const std::string& tracer_dir,
    const std::function<BridgeBuildSettings(const TorchInstall&)>& settings_for,
    const std::function<void(const std::string&)>& log) {
  const std::string python = PythonOf(program);
  if (python.empty()) return "";
  TorchInstall torch;
  std::string why;
  if (!ProbeTorch(python, &torch, &why, TorchProbe::kFind)) return "";
  if (PathExists(tracer_dir + "/" + TorchBridgeLibraryName(torch.version))) return "";
  const BridgeBuildSettings settings = settings_for(torch);
  if (!PathExists(settings.source_root + "/" + settings.shim_source)) {
    log("no PyTorch bridge for torch " + torch.version +
        ", and this cumemtrace has no bridge "
        "sources to build one (" +
        settings.source_root +
        "): the run sees PyTorch's "
        "segments, not its tensors");
    return "";
  }
  const BridgeResult result = EnsureCachedBridge(torch, settings, log);
  if (!result.ready) {
    log("no PyTorch bridge for torch " + torch.version + ": " + result.reason +
        "; the run sees PyTorch's segments, not its tensors (--allocator=async makes each "
        "tensor a CUDA allocation)");
    return "";
  }
  if (result.built || result.seconds >= 0.1) {
    char seconds[32];
    snprintf(seconds, sizeof(seconds), "%.1f", result.seconds);
    log(std::string("PyTorch bridge for torch ") + torch.version +
        (result.built ? " built in " : " ready after ") + seconds + " s: " + result.library);
  }
  return result.dir;
}

}  // namespace cumemtrace

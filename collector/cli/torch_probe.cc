#include "collector/cli/torch_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <sstream>

#include "collector/cli/cli_support.h"

namespace cumemtrace {
namespace {

// One line, tab-separated, that nothing else a Python start-up prints looks like.
constexpr char kProbeScript[] =
    "import os, sys\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print('cumemtrace-no-torch\\t%s: %s' % (type(e).__name__, e))\n"
    "    sys.exit(0)\n"
    "print('cumemtrace-torch\\t%s\\t%d\\t%s' % (torch.__version__,\n"
    "      int(getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', 1)),\n"
    "      os.path.dirname(os.path.abspath(torch.__file__))))\n";

std::string Field(const std::string& line, size_t index) {
  std::istringstream in(line);
  std::string field;
  for (size_t i = 0; i <= index; ++i) {
    if (!std::getline(in, field, '\t')) return "";
  }
  return field;
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path_env = getenv("PATH");
  std::istringstream dirs(path_env != nullptr ? path_env : "/bin:/usr/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

bool ProbeTorch(const std::string& python, TorchInstall* torch, std::string* why) {
  const std::string resolved = FindOnPath(python);
  if (resolved.empty()) {
    *why = "no " + python + " on PATH";
    return false;
  }
  const std::string command =
      ShellQuote(resolved) + " -c " + ShellQuote(kProbeScript) + " 2>/dev/null </dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *why = "cannot start " + resolved;
    return false;
  }
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (Field(line, 0) == "cumemtrace-no-torch") {
      *why = python + " has no torch (" + Field(line, 1) + ")";
      return false;
    }
    if (Field(line, 0) == "cumemtrace-torch" && !Field(line, 1).empty() &&
        !Field(line, 3).empty()) {
      torch->version = Field(line, 1);
      torch->cxx11_abi = Field(line, 2) != "0";
      torch->dir = Field(line, 3);
      return true;
    }
  }
  *why = python + " could not say which torch it has (exit status " +
         std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")";
  return false;
}

std::string TorchBridgeLibraryName(const std::string& torch_version) {
  return "libcumemtrace-torch-bridge-" + torch_version.substr(0, torch_version.find('+')) + ".so";
}

std::string TorchBridgeCacheKey(const TorchInstall& torch, const std::string& cumemtrace_version) {
  std::string key = "torch-" + torch.version + (torch.cxx11_abi ? "-cxx11abi" : "-oldabi") +
                    "-cumemtrace-" + cumemtrace_version;
  for (char& ch : key) {
    const bool plain =
        isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '+' || ch == '_';
    if (!plain) ch = '_';
  }
  return key;
}

std::string TorchBridgeCacheRoot() {
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/cumemtrace/bridges";
  const char* home = getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/cumemtrace/bridges";
  return "";
}

std::string FindCxxCompiler() {
  const char* cxx = getenv("CXX");
  if (cxx != nullptr && *cxx != '\0') return FindOnPath(cxx);
  for (const char* name : {"c++", "g++", "clang++"}) {
    std::string found = FindOnPath(name);
    if (!found.empty()) return found;
  }
  return "";
}

bool HasTorchHeaders(const std::string& dir) {
  return PathExists(dir + "/include/c10/cuda/CUDACachingAllocator.h");
}

}  // namespace cumemtrace

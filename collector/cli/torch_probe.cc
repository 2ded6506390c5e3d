#include "collector/cli/torch_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
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

// The same line without importing torch (which takes seconds).
constexpr char kFindScript[] =
    "import importlib.util, os, re, sys\n"
    "spec = importlib.util.find_spec('torch')\n"
    "if spec is None or not spec.origin:\n"
    "    print('cumemtrace-no-torch\\tNo module named torch')\n"
    "    sys.exit(0)\n"
    "d = os.path.dirname(os.path.abspath(spec.origin))\n"
    "def read(*p):\n"
    "    try:\n"
    "        with open(os.path.join(d, *p)) as f: return f.read()\n"
    "    except OSError: return ''\n"
    "v = re.search(r'^__version__\\s*=\\s*[\\'\"]([^\\'\"]+)', read('version.py'), re.M)\n"
    "a = re.search(r'_GLIBCXX_USE_CXX11_ABI=([01])',\n"
    "              read('share', 'cmake', 'Torch', 'TorchConfig.cmake'))\n"
    "if v: print('cumemtrace-torch\\t%s\\t%s\\t%s' % (v.group(1), a.group(1) if a else '1', d))\n";

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

bool ProbeTorch(const std::string& python, TorchInstall* torch, std::string* why, TorchProbe how) {
  const std::string resolved = FindOnPath(python);
  if (resolved.empty()) {
    *why = "no " + python + " on PATH";
    return false;
  }
  const std::string command = ShellQuote(resolved) + " -c " +
                              ShellQuote(how == TorchProbe::kImport ? kProbeScript : kFindScript) +
                              " 2>/dev/null </dev/null";
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

std::string PythonOf(const std::string& program) {
  auto is_python = [](const std::string& path) {
    const std::string name = BaseName(path);
    if (name.rfind("python", 0) != 0) return false;
    for (size_t k = 6; k < name.size(); ++k) {
      if (!isdigit(static_cast<unsigned char>(name[k])) && name[k] != '.') return false;
    }
    return true;
  };
  if (is_python(program)) return program;
  // The "#!" line only: a few hundred bytes, not a whole binary without a newline.
  std::ifstream in(program, std::ios::binary);
  char head[256] = {};
  in.read(head, sizeof(head) - 1);
  std::string line(head, static_cast<size_t>(in.gcount()));
  line = line.substr(0, line.find('\n'));
  if (line.rfind("#!", 0) != 0) return "";
  // "#!/usr/bin/python3 -u" or "#!/usr/bin/env python3".
  std::istringstream words(line.substr(2));
  std::string interpreter;
  words >> interpreter;
  if (BaseName(interpreter) == "env") {
    while (words >> interpreter && interpreter[0] == '-') {
    }
  }
  return is_python(interpreter) ? interpreter : "";
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

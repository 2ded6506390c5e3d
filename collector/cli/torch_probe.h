// The torch a Python interpreter imports, and what its PyTorch bridge needs: the file name
// the tracer looks for, the per-user cache a bridge is built into, a C++ compiler.
#pragma once

#include <string>

namespace cumemtrace {

struct TorchInstall {
  std::string version;    // torch.__version__, e.g. "2.11.0+cu130"
  bool cxx11_abi = true;  // torch._C._GLIBCXX_USE_CXX11_ABI
  std::string dir;        // the torch package directory (holds include/ and lib/)
};

// How ProbeTorch asks: kImport imports torch (seconds: what `doctor` reports is what the
// program will get); kFind only finds the package and reads its version.py and
// share/cmake/Torch/TorchConfig.cmake (tens of milliseconds, for every `run`).
enum class TorchProbe { kImport, kFind };

// Asks `python` (a command looked up in PATH, or a path) which torch it imports. False with
// *why when it cannot tell ("no python3 on PATH", "python3 has no torch: ...").
bool ProbeTorch(const std::string& python, TorchInstall* torch, std::string* why,
                TorchProbe how = TorchProbe::kImport);

// The Python interpreter that runs `program` (a resolved path): the program itself when its
// name is python*, the interpreter its "#!" line names when that is a python (torchrun,
// accelerate); "" otherwise.
std::string PythonOf(const std::string& program);

// "libcumemtrace-torch-bridge-<release>.so", the name the tracer dlopens for a torch version
// ("2.11.0+cu130" -> release 2.11.0).
std::string TorchBridgeLibraryName(const std::string& torch_version);

// The bridge cache's folder for one torch: its full version, its C++ ABI and cumemtrace's own
// version, e.g. "torch-2.11.0+cu130-cxx11abi-cumemtrace-0.1.0". Characters a path should not
// carry become '_'.
std::string TorchBridgeCacheKey(const TorchInstall& torch, const std::string& cumemtrace_version);

// $XDG_CACHE_HOME/cumemtrace/bridges, else $HOME/.cache/cumemtrace/bridges; "" when neither
// is set.
std::string TorchBridgeCacheRoot();

// The C++ compiler a bridge is built with: $CXX, else c++, g++ or clang++ from PATH; "" when
// there is none.
std::string FindCxxCompiler();

// True when `dir` (a torch package) ships the headers a bridge is built from.
bool HasTorchHeaders(const std::string& dir);

// `name` looked up in PATH (a name with '/' is taken as it is); "" when not executable.
std::string FindOnPath(const std::string& name);

}  // namespace cumemtrace

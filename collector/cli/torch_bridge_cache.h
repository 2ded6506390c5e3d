// The PyTorch bridge for a torch that has none beside the tracer: built once from the headers
// that ship in that torch, into a per-user cache (torch_probe.h names its folders), by the
// CLI before it starts the program, never inside a traced process.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collector/cli/torch_probe.h"

namespace cumemtrace {

struct BridgeBuildSettings {
  std::string cache_root;                 // TorchBridgeCacheRoot()
  std::string key_version;                // cumemtrace's version, part of the key
  std::string compiler;                   // FindCxxCompiler(); "" when there is none
  std::string source_root;                // holds `shim_source` and the headers it includes
  std::string shim_source;                // relative to source_root
  std::vector<std::string> include_dirs;  // more headers (the CUDA toolkit's)
};

struct BridgeResult {
  bool ready = false;   // dir holds a bridge for the torch
  bool built = false;   // this call built it
  std::string dir;      // the cache folder the tracer is pointed at
  std::string library;  // the bridge's path in it
  std::string reason;   // when not ready: why, in words
  double seconds = 0;   // building or waiting for another process's build
};

// The compiler's command line for a bridge of `torch` written to `output`.
std::vector<std::string> BridgeCompileCommand(const BridgeBuildSettings& settings,
                                              const TorchInstall& torch, const std::string& output);

// A bridge for `torch` in the cache, built when missing. Processes that ask at once build it
// once: the folder's lock file (flock) is held while building, and the others wait, then use
// it. A failed build leaves its compiler output (build.log) and a marker, so later runs say
// why at once instead of compiling again; removing the folder retries. `log` gets one line
// when a build starts or is waited for.
BridgeResult EnsureCachedBridge(const TorchInstall& torch, const BridgeBuildSettings& settings,
                                const std::function<void(const std::string&)>& log);

// For `run`: the folder of a bridge for the torch that `program` (a resolved path) imports,
// when none is in `tracer_dir`: found in the cache or built into it now. "" when the tracer's
// own lookup applies (a bridge beside it, a program that is not Python, no torch) or when
// none can be had; `log` then gets the reason and what the run does without it.
std::string BridgeDirForProgram(
    const std::string& program, const std::string& tracer_dir,
    const std::function<BridgeBuildSettings(const TorchInstall&)>& settings_for,
    const std::function<void(const std::string&)>& log);

// The settings of this installation: the bridge sources under
// <executable dir>/../share/cumemtrace/torch_bridge, the CUDA headers it was built with and
// those that ship beside a pip torch (nvidia/*/include).
BridgeBuildSettings InstalledBridgeSettings(const TorchInstall& torch);

}  // namespace cumemtrace

// `cumemtrace doctor`: what a run on this machine can record, piece by piece (tracer, CUDA
// driver, CUPTI, torch and its bridge, libdw, where the output goes), and what each missing
// piece means for a run. It loads the driver and CUPTI itself: it traces nothing, so a copy of
// CUPTI loaded here can clash with no program's.
#include <cuda.h>  // CUDA_VERSION: the toolkit this build is for
#include <dlfcn.h>
#include <getopt.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/torch_bridge_cache.h"
#include "collector/cli/torch_probe.h"
#include "collector/engine/native_symbolizer.h"

#ifndef CUMEMTRACE_VERSION
#define CUMEMTRACE_VERSION "unknown"
#endif

namespace cumemtrace {
namespace {

constexpr char kDoctorHelp[] = R"(Usage: cumemtrace doctor [--python=PYTHON]

Checks what `cumemtrace run` can record on this machine and says what each missing piece
means for a run: the tracer library, the CUDA driver and its GPUs, CUPTI, the torch that
PYTHON imports and its PyTorch bridge (built beside the tracer, in the per-user cache, or
buildable here), libdw (native stack frames by name), and where a run writes.

Options:
      --python=PYTHON     the interpreter whose torch is checked (default: python3)
  -h, --help              show this help

Exit status: 0 when a run works here, even one that can record only part (on a machine
without a GPU a run still records the program's NVTX phases and its exit); 1 when a run
cannot work at all (no tracer library, nowhere to put the collector's socket).
)";

enum class State { kOk, kMissing, kFail };

struct Check {
  State state;
  std::string name;
  std::string found;    // what is there, or why not
  std::string meaning;  // for a missing piece: what a run then does
};

std::string LoadedPath(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "";
  }
  return map->l_name;
}

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown reason";
}

std::string CudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The driver's version through NVML, "" when NVML is not there.
std::string NvidiaDriverVersion() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return "";
  using InitFn = int (*)();
  using VersionFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto version = reinterpret_cast<VersionFn>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  std::string text;
  char buffer[96] = {};
  if (init != nullptr && version != nullptr && init() == 0) {
    if (version(buffer, sizeof(buffer)) == 0) text = buffer;
    if (shutdown != nullptr) shutdown();
  }
  dlclose(nvml);
  return text;
}

// The driver: its version, the CUDA version it supports, its GPUs. *gpus gets their number.
Check DriverCheck(int* gpus) {
  *gpus = 0;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    return {State::kMissing, "GPU", "no GPU: no CUDA driver on this machine (" + DlError() + ")",
            "a run records the program's NVTX phases and its exit, and no GPU memory"};
  }
  using VersionFn = int (*)(int*);
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using NameFn = int (*)(char*, int, int);
  auto get_version = reinterpret_cast<VersionFn>(dlsym(cuda, "cuDriverGetVersion"));
  auto init = reinterpret_cast<InitFn>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(cuda, "cuDeviceGetCount"));
  auto name = reinterpret_cast<NameFn>(dlsym(cuda, "cuDeviceGetName"));
  int cuda_version = 0;
  std::string found = "driver";
  const std::string driver_version = NvidiaDriverVersion();
  if (!driver_version.empty()) found += " " + driver_version;
  if (get_version != nullptr && get_version(&cuda_version) == 0) {
    found += " (CUDA " + CudaVersionText(cuda_version) + ")";
  }
  found += ", " + LoadedPath(cuda);
  const int init_result = init != nullptr ? init(0) : -1;
  if (init_result == 0 && count != nullptr) count(gpus);
  if (*gpus == 0) {
    return {State::kMissing, "GPU",
            "no GPU: " + found + " sees none (cuInit: " + std::to_string(init_result) + ")",
            "a run records the program's NVTX phases and its exit, and no GPU memory"};
  }
  for (int device = 0; device < *gpus && name != nullptr; ++device) {
    char text[256] = {};
    if (name(text, sizeof(text), device) == 0) {
      found += "\nGPU " + std::to_string(device) + ": " + text;
    }
  }
  if (cuda_version != 0 && cuda_version / 1000 < CUDA_VERSION / 1000) {
    return {State::kMissing, "GPU", found,
            "the driver is older than CUDA " + CudaVersionText(CUDA_VERSION) +
                ", which the tracer was built for: its CUPTI cannot load, and a run "
                "records NVTX phases only"};
  }
  return {State::kOk, "GPU", found, ""};
}

Check CuptiCheck() {
  // By soname, as the tracer loads it when the program has not loaded one itself.
  const std::string soname = "libcupti.so." + std::to_string(CUDA_VERSION / 1000);
  void* cupti = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cupti == nullptr) {
    return {State::kMissing, "CUPTI", soname + " cannot be loaded (" + DlError() + ")",
            "a program that loads no CUPTI of its own (PyTorch's wheels ship one) is "
            "recorded without GPU memory; add CUPTI's folder to LD_LIBRARY_PATH"};
  }
  using VersionFn = int (*)(uint32_t*);
  auto get_version = reinterpret_cast<VersionFn>(dlsym(cupti, "cuptiGetVersion"));
  uint32_t version = 0;
  std::string found = soname;
  if (get_version != nullptr && get_version(&version) == 0) {
    found += " (API version " + std::to_string(version) + ")";
  }
  found += ", " + LoadedPath(cupti);
  return {State::kOk, "CUPTI", found, ""};
}

// torch and its bridge: beside the tracer, in the cache, or buildable here.
std::vector<Check> TorchChecks(const std::string& python, const std::string& tracer) {
  TorchInstall torch;
  std::string why;
  if (!ProbeTorch(python, &torch, &why)) {
    return {{State::kMissing, "torch", why,
             "nothing to do for CUDA and LibTorch programs; a PyTorch program run with "
             "another interpreter is checked with --python"}};
  }
  std::vector<Check> checks;
  checks.push_back(
      {State::kOk, "torch",
       torch.version + (torch.cxx11_abi ? " (C++11 ABI)" : " (pre-C++11 ABI)") + ", " + torch.dir,
       ""});
  const std::string file = TorchBridgeLibraryName(torch.version);
  const char* dir_override = getenv("CUMEMTRACE_TORCH_BRIDGE_DIR");
  const std::string beside = dir_override != nullptr && *dir_override != '\0'
                                 ? std::string(dir_override)
                                 : tracer.substr(0, tracer.rfind('/'));
  const BridgeBuildSettings settings = InstalledBridgeSettings(torch);
  const std::string cache_dir =
      settings.cache_root.empty()
          ? ""
          : settings.cache_root + "/" + TorchBridgeCacheKey(torch, settings.key_version);
  const std::string fallback =
      "a run sees PyTorch's segments, not its tensors (or run with --allocator=async)";
  if (PathExists(beside + "/" + file)) {
    checks.push_back({State::kOk, "bridge", "built: " + beside + "/" + file, ""});
  } else if (!cache_dir.empty() && PathExists(cache_dir + "/" + file)) {
    checks.push_back({State::kOk, "bridge", "in the cache: " + cache_dir + "/" + file, ""});
  } else if (!cache_dir.empty() && PathExists(cache_dir + "/build.failed")) {
    checks.push_back({State::kMissing, "bridge",
                      "an earlier build for torch " + torch.version + " failed: " + cache_dir +
                          "/build.log (remove the folder to try again)",
                      fallback});
  } else {
    std::string missing;
    if (settings.compiler.empty()) missing = "no C++ compiler";
    if (!HasTorchHeaders(torch.dir)) {
      missing = torch.dir + " ships no C++ headers";
    }
    if (!PathExists(settings.source_root + "/" + settings.shim_source)) {
      missing = "this cumemtrace has no bridge sources (" + settings.source_root + ")";
    }
    if (cache_dir.empty()) missing = "no cache folder (neither XDG_CACHE_HOME nor HOME is set)";
    if (!missing.empty()) {
      checks.push_back({State::kMissing, "bridge",
                        "none for torch " + torch.version + ", and none can be built: " + missing,
                        fallback});
    } else {
      checks.push_back({State::kOk, "bridge",
                        "none yet for torch " + torch.version + "; buildable with " +
                            settings.compiler + ": the first run builds it into " + cache_dir,
                        ""});
    }
  }
  return checks;
}

Check LibdwCheck() {
  const std::string library = internal::NativeSymbolizerLibrary();
  if (!library.empty()) return {State::kOk, "libdw", "native frames named with " + library, ""};
  return {State::kMissing, "libdw", "this cumemtrace was built without libdw",
          "--stacks=native frames are shown as module and address, not by function and line "
          "(build with libdw-dev installed)"};
}

std::vector<Check> OutputChecks() {
  std::vector<Check> checks;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    checks.push_back({State::kMissing, "output", "no current directory",
                      "run needs -o DIR to say where its trace goes"});
  } else if (access(cwd, W_OK | X_OK) != 0) {
    checks.push_back({State::kMissing, "output",
                      std::string(cwd) + " is not writable: " + ErrnoText(),
                      "run needs -o DIR to say where its trace goes"});
  } else {
    checks.push_back({State::kOk, "output", std::string(cwd) + " is writable", ""});
  }
  const std::string runtime = RuntimeBaseDir();
  if (access(runtime.c_str(), W_OK | X_OK) != 0) {
    checks.push_back({State::kFail, "sockets", runtime + " is not writable: " + ErrnoText(),
                      "run cannot create its collector socket; set TMPDIR to a writable "
                      "folder"});
  } else {
    checks.push_back({State::kOk, "sockets", runtime + " is writable", ""});
  }
  return checks;
}

void Print(const Check& check) {
  static const char* const kStates[] = {"ok", "missing", "FAIL"};
  std::string found = check.found;
  // Continuation lines line up under the first.
  for (size_t at = 0; (at = found.find('\n', at)) != std::string::npos; at += 19) {
    found.replace(at, 1, "\n                   ");
  }
  printf("  %-8s %-8s %s\n", kStates[static_cast<int>(check.state)], check.name.c_str(),
         found.c_str());
  if (!check.meaning.empty()) printf("                   -> %s\n", check.meaning.c_str());
}

}  // namespace

int DoctorCommand(int argc, char** argv) {
  static const option kOptions[] = {{"python", required_argument, nullptr, 'p'},
                                    {"help", no_argument, nullptr, 'h'},
                                    {nullptr, 0, nullptr, 0}};
  std::string python = "python3";
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":h", kOptions, nullptr)) != -1;) {
    switch (opt) {
      case 'p':
        if (*optarg == '\0') return EmptyValueError("doctor", "--python");
        python = optarg;
        break;
      case 'h':
        fputs(kDoctorHelp, stdout);
        return 0;
      case ':':
        return UsageError("doctor", std::string("option '") + argv[optind - 1] + "' needs a value");
      default:
        return UsageError("doctor", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) return UsageError("doctor", "no arguments are taken");

  std::vector<Check> checks;
  const std::string tracer = TracerLibraryPath();
  if (access(tracer.c_str(), R_OK) == 0) {
    checks.push_back({State::kOk, "tracer", tracer, ""});
  } else {
    checks.push_back({State::kFail, "tracer", tracer + ": " + ErrnoText(),
                      "run cannot inject anything; set CUMEMTRACE_TRACER_LIB or reinstall"});
  }
  int gpus = 0;
  checks.push_back(DriverCheck(&gpus));
  checks.push_back(CuptiCheck());
  for (Check& check : TorchChecks(python, tracer)) checks.push_back(std::move(check));
  checks.push_back(LibdwCheck());
  for (Check& check : OutputChecks()) checks.push_back(std::move(check));

  printf("cumemtrace %s, built for CUDA %s\n", CUMEMTRACE_VERSION,
         CudaVersionText(CUDA_VERSION).c_str());
  bool fails = false;
  bool missing = false;
  for (const Check& check : checks) {
    Print(check);
    fails = fails || check.state == State::kFail;
    missing = missing || check.state == State::kMissing;
  }
  if (fails) {
    printf("a run cannot work here (FAIL above)\n");
    return 1;
  }
  printf(missing ? "a run works here, and records less than it could (missing above)\n"
                 : "a run works here and records everything\n");
  return 0;
}

}  // namespace cumemtrace

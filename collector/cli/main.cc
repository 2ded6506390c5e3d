// The `cumemtrace` executable: dispatches to the subcommands.
#include <cstdio>
#include <cstring>
#include <string>

#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"

#ifndef CUMEMTRACE_VERSION
#define CUMEMTRACE_VERSION "unknown"
#endif

namespace {

constexpr char kHelp[] = R"(Usage: cumemtrace COMMAND [OPTIONS] [ARGS]

GPU memory tracer for CUDA programs (PyTorch included): where device memory goes, its peak,
and which NVTX phases allocate it.

Commands:
  run [OPTIONS] [--] PROGRAM [ARGS...]   trace one program (and its children) and
                                         summarize it
  report [OPTIONS] TRACE                 summarize a trace file or a run's output folder
  daemon [OPTIONS]                       collect traces from many processes at once
  top [--socket PATH]                    memory of the processes a daemon is recording,
                                         now and at their peak, redrawn every second
  export --format FORMAT TRACE           convert a trace for Perfetto, chrome://tracing,
                                         PyTorch's memory_viz, CSV or the HTML viewer
  compare RUN RUN...                     runs side by side: peaks, lifetime classes,
                                         activation memory, per-phase figures
  sweep --param NAME=V1,V2 -- CMD        run once per value and tabulate memory vs NAME
  check --budget KEY=SIZE TRACE          memory budgets over a recorded trace: exit
                                         status 86 when one is exceeded
  merge -o OUT TRACE TRACE...            one job from several hosts' traces (torchrun,
                                         SLURM): per-rank peaks on one time base
  doctor                                 what a run can record on this machine (GPU,
                                         CUPTI, torch and its bridge, libdw, output)

Options:
  -h, --help       show this help (`cumemtrace COMMAND --help` for a command's options)
      --version    print the version

Example:
  cumemtrace run -o out -- python train.py
  cumemtrace report out
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fputs(kHelp, stderr);
    return cumemtrace::kExitUsage;
  }
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    fputs(kHelp, stdout);
    return 0;
  }
  if (command == "--version" || command == "-V") {
    printf("cumemtrace %s\n", CUMEMTRACE_VERSION);
    return 0;
  }
  if (command == "run") return cumemtrace::RunCommand(argc - 1, argv + 1);
  if (command == "report") return cumemtrace::ReportCommand(argc - 1, argv + 1);
  if (command == "daemon") return cumemtrace::DaemonCommand(argc - 1, argv + 1);
  if (command == "export") return cumemtrace::ExportCommand(argc - 1, argv + 1);
  if (command == "compare") return cumemtrace::CompareCommand(argc - 1, argv + 1);
  if (command == "sweep") return cumemtrace::SweepCommand(argc - 1, argv + 1);
  if (command == "top") return cumemtrace::TopCommand(argc - 1, argv + 1);
  if (command == "check") return cumemtrace::CheckCommand(argc - 1, argv + 1);
  if (command == "merge") return cumemtrace::MergeCommand(argc - 1, argv + 1);
  if (command == "doctor") return cumemtrace::DoctorCommand(argc - 1, argv + 1);
  return cumemtrace::UsageError("", "unknown command '" + command + "'");
}

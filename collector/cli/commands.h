// The subcommands of the `cumemtrace` executable. Each takes its own argv (argv[0] is the
// subcommand name) and returns the process exit status.
#pragma once

namespace cumemtrace {

int RunCommand(int argc, char** argv);
int ReportCommand(int argc, char** argv);
int DaemonCommand(int argc, char** argv);
int ExportCommand(int argc, char** argv);
int CompareCommand(int argc, char** argv);
int SweepCommand(int argc, char** argv);
int MergeCommand(int argc, char** argv);
int CheckCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int DoctorCommand(int argc, char** argv);

}  // namespace cumemtrace

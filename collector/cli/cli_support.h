// Small helpers the subcommands share: usage errors, where the tracer library lives, where
// private sockets go, signal handling through a signalfd, shell quoting.
#pragma once

#include <signal.h>

#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <string_view>

namespace cumemtrace {

// Exit status of a command line that cannot be obeyed (like getopt-based tools).
constexpr int kExitUsage = 2;

// Logs "cumemtrace: <command>: <message> (see 'cumemtrace <command> --help')" and returns
// kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// UsageError for an option given an empty value: "-o ''" once meant the default folder.
int EmptyValueError(const std::string& command, const std::string& option);

// `--kernels[=WHAT]` of run and sweep: the CUMEMTRACE_KERNELS value for WHAT ("records",
// the default of a bare --kernels, or "launches"), "" for anything else.
std::string KernelsEnvValue(const char* what);

// Directory of the running executable (/proc/self/exe), "" when unknown.
std::string ExecutableDir();

// $CUMEMTRACE_TRACER_LIB, else <executable dir>/../lib/cumemtrace/libcumemtrace-tracer.so
// (the same relative layout in the build tree and after `cmake --install`), canonicalized
// when it exists.
std::string TracerLibraryPath();

// <executable dir>/../share/cumemtrace/python: the Python start-up hooks of `run --phase`.
std::string PythonHookDir();
// <executable dir>/../share/cumemtrace/pytest: the pytest plugin (cumemtrace_pytest.py).
std::string PytestPluginDir();

// Where private runtime files go: $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp.
std::string RuntimeBaseDir();

// Blocks `signals` for the calling thread and returns a signalfd (non-blocking,
// close-on-exec) that reports them; *previous gets the old mask, to be restored in
// children before exec. -1 on failure.
int BlockSignalsIntoFd(std::initializer_list<int> signals, sigset_t* previous);

// 'value' quoted for a POSIX shell.
std::string ShellQuote(const std::string& value);

// Last path component of `path` ("python3" for "/usr/bin/python3").
std::string BaseName(const std::string& path);

// True when `path` exists (any type, symlinks not followed).
bool PathExists(const std::string& path);

// True when both paths name one existing file (same device and inode, links followed).
bool SameFile(const std::string& a, const std::string& b);

// Every file cumemtrace writes is private to its owner (mode 0600; folders 0700) and appears
// whole or not at all: it is written to a temporary beside `path`, synced, then renamed into
// place. kNew fails rather than replace an existing file; kReplace replaces it atomically.
// On failure (*error says why, e.g. "No space left on device") nothing is left behind.
enum class Placement { kNew, kReplace };
bool WriteOutputFile(const std::string& path, Placement placement,
                     const std::function<void(std::ostream&)>& write_content, std::string* error);
bool WriteOutputFile(const std::string& path, Placement placement, std::string_view content,
                     std::string* error);
// WriteOutputFile(path, Placement::kNew, content, error).
bool WriteNewFile(const std::string& path, const std::string& content, std::string* error);
// Creates folder `path` (mode 0700), or accepts an existing folder.
bool MakeOutputDir(const std::string& path, std::string* error);

}  // namespace cumemtrace

// Small helpers the subcommands share: usage errors, where the tracer library lives, where
// private sockets go, signal handling through a signalfd, shell quoting.
#pragma once

#include <signal.h>

#include <initializer_list>
#include <string>

namespace cumemtrace {

// Exit status of a command line that cannot be obeyed (like getopt-based tools).
constexpr int kExitUsage = 2;

// Logs "cumemtrace: <command>: <message> (see 'cumemtrace <command> --help')" and returns
// kExitUsage.
int UsageError(const std::string& command, const std::string& message);

// Directory of the running executable (/proc/self/exe), "" when unknown.
std::string ExecutableDir();

// $CUMEMTRACE_TRACER_LIB, else <executable dir>/../lib/cumemtrace/libcumemtrace-tracer.so
// (the same relative layout in the build tree and after `cmake --install`), canonicalized
// when it exists.
std::string TracerLibraryPath();

// <executable dir>/../share/cumemtrace/python: the Python start-up hooks of `run --phase`.
std::string PythonHookDir();

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

// Writes `content` to a new file (O_EXCL, mode 0600): never replaces an existing one.
bool WriteNewFile(const std::string& path, const std::string& content, std::string* error);

}  // namespace cumemtrace

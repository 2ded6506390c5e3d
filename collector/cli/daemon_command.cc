// `cumemtrace daemon`: a long-running per-user collector. Any process started with the
// tracer injected (see --print-env) connects to its socket; each connection is written to
// its own trace file.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "collector/cli/cli_support.h"
#include "collector/cli/collector_server.h"
#include "collector/cli/commands.h"
#include "collector/cli/live_view.h"
#include "collector/cli/log.h"
#include "collector/cli/trace_writer.h"

namespace cumemtrace {
namespace {

constexpr char kDaemonHelp[] = R"(Usage: cumemtrace daemon [OPTIONS]

Runs a collector for many traced processes at once, until SIGINT or SIGTERM. Start
programs with the tracer injected (see --print-env); each one that connects is recorded
into its own file DIR/<hostname>-<pid>-<YYYYmmdd-HHMMSS>-<stream>.cmtrace (mode 0600),
which `cumemtrace report` reads. Only processes of your own user are accepted; nothing
listens on a network port.

Options:
      --socket=PATH       the Unix socket to listen on. Default:
                          $XDG_RUNTIME_DIR/cumemtrace/collector.sock, or
                          /tmp/cumemtrace-<uid>/collector.sock without XDG_RUNTIME_DIR.
                          Its directory is created with mode 0700 when missing and must be
                          owned by you and closed to group and others.
      --output-dir=DIR    where trace files go (default ./cumemtrace-traces, created if
                          missing)
      --print-env         print the shell `export` lines that send a program's trace to
                          this daemon, then exit
  -h, --help              show this help

While it runs, `cumemtrace top` shows the memory of the processes it is recording (it
answers on PATH.live, beside the socket).

Exit status: 0 after a clean stop, 1 when the socket or output folder cannot be used,
2 for bad usage.
)";

constexpr char kTopHelp[] = R"(Usage: cumemtrace top [OPTIONS]

Shows, for every process a running `cumemtrace daemon` is recording, its device memory now
and its peak so far, per GPU, by the phase that allocated it, with the iteration count and
the last iteration's rise, redrawn every second on a terminal until Ctrl-C. When stdout is
not a terminal (or with --once), prints one snapshot and exits.

Options:
      --socket=PATH       the daemon's socket (default: the daemon's default); the
                          snapshot is read from PATH.live
      --once              print one snapshot and exit
  -h, --help              show this help

Exit status: 0, 1 when no daemon answers, 2 for bad usage.
)";

// Where a daemon listening on `socket_path` serves its live snapshots.
std::string LiveSocketPath(const std::string& socket_path) { return socket_path + ".live"; }

std::string DefaultSocketPath() {
  const char* runtime = getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime == '/') {
    return std::string(runtime) + "/cumemtrace/collector.sock";
  }
  return "/tmp/cumemtrace-" + std::to_string(geteuid()) + "/collector.sock";
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The socket's directory is what keeps other users out: create it private, or accept an
// existing one only when it is ours and closed to everyone else.
bool PrepareSocketDirectory(const std::string& dir, std::string* error) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create the socket directory " + dir + ": " + strerror(errno);
    return false;
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    *error = "cannot inspect the socket directory " + dir + ": " + strerror(errno);
    return false;
  }
  char mode[8];
  snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (!S_ISDIR(st.st_mode)) {
    *error = "refusing the socket directory " + dir + ": it is not a directory";
    return false;
  }
  if (st.st_uid != geteuid()) {
    *error = "refusing the socket directory " + dir + ": it is owned by uid " +
             std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(geteuid()) + ")";
    return false;
  }
  if ((st.st_mode & 077) != 0) {
    *error = "refusing the socket directory " + dir + ": its mode is " + mode +
             ", so other users can reach the socket; it must be 0700 (chmod 700 " + dir + ")";
    return false;
  }
  return true;
}

// Removes a socket file left by a collector that is gone; refuses when one still answers.
bool ClearStaleSocket(const std::string& path, std::string* error) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    *error = path + " exists and is not a socket; refusing to replace it";
    return false;
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "cannot create a Unix socket: " + ErrnoText();
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool answered = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (answered) {
    *error = "another collector is already listening on " + path;
    return false;
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    *error = "cannot remove the stale socket " + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

// Keeps file names to characters that need no quoting.
std::string FileNamePart(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const bool plain = isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' ||
                       ch == '_';
    out += plain ? ch : '_';
  }
  return out.empty() ? "unknown" : out;
}

// One file per stream, named after the process's handshake.
class FilePerStreamPolicy : public StreamPolicy {
 public:
  explicit FilePerStreamPolicy(std::string dir)
      : dir_(std::move(dir)), live_(std::make_shared<const PhaseRules>(PhaseRules::Defaults())) {}

  TraceFileWriter* FileAtAccept(uint32_t, const PeerInfo&) override { return nullptr; }

  TraceFileWriter* FileAtHandshake(uint32_t stream_id, const PeerInfo&,
                                   const v1::Handshake& handshake, std::string* error) override {
    const time_t now = time(nullptr);
    tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
    const std::string host = handshake.hostname().empty() ? HostName() : handshake.hostname();
    const std::string path = dir_ + "/" + FileNamePart(host) + "-" +
                             std::to_string(handshake.pid()) + "-" + stamp + "-" +
                             std::to_string(stream_id) + ".cmtrace";
    std::unique_ptr<TraceFileWriter> file = TraceFileWriter::Create(path, error);
    if (file == nullptr) return nullptr;
    TraceFileWriter* raw = file.get();
    files_[stream_id] = std::move(file);
    ++recorded_;
    return raw;
  }

  void MessageRecorded(uint32_t stream_id, const v1::StreamMessage& message) override {
    live_.Add(stream_id, message);
  }

  void StreamFinished(uint32_t stream_id, TraceFileWriter*) override {
    live_.Forget(stream_id);  // `top` shows the processes still running
    auto it = files_.find(stream_id);
    if (it == files_.end()) return;
    std::string error;
    if (!it->second->Close(&error)) LogLine(error);
    files_.erase(it);
  }

  size_t recorded() const { return recorded_; }
  const LiveTally& live() const { return live_; }

 private:
  std::string dir_;
  LiveTally live_;
  std::map<uint32_t, std::unique_ptr<TraceFileWriter>> files_;
  size_t recorded_ = 0;
};

// Answers each waiting `top` of our own user with one snapshot, then closes.
void ServeLive(int listen_fd, const LiveTally& live, double elapsed_s) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left (the listening socket is non-blocking)
    ucred cred{};
    socklen_t size = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0 && cred.uid == geteuid()) {
      // A reader that does not read cannot hold the daemon: at most 200 ms per snapshot.
      const timeval timeout = {0, 200000};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      const std::string json = LiveJson(live.Snapshot(), elapsed_s);
      size_t done = 0;
      while (done < json.size()) {
        const ssize_t n = send(fd, json.data() + done, json.size() - done, MSG_NOSIGNAL);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
    }
    close(fd);
  }
}

// One snapshot from the daemon's live socket; false with *error when none answers.
bool ReadLiveSnapshot(const std::string& path, std::string* text, std::string* error) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = "no daemon answers on " + path + ": " + ErrnoText() +
             " (start one with `cumemtrace daemon`)";
    if (fd >= 0) close(fd);
    return false;
  }
  text->clear();
  char chunk[65536];
  for (;;) {
    pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 2000) <= 0) break;
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    text->append(chunk, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

}  // namespace

int TopCommand(int argc, char** argv) {
  static const option kOptions[] = {
      {"socket", required_argument, nullptr, 's'},
      {"once", no_argument, nullptr, '1'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  std::string socket_path;
  bool once = false;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":h", kOptions, nullptr)) != -1;) {
    switch (opt) {
      case 's':
        if (*optarg == '\0') return EmptyValueError("top", "--socket");
        socket_path = optarg;
        break;
      case '1': once = true; break;
      case 'h': fputs(kTopHelp, stdout); return 0;
      case ':':
        return UsageError("top", std::string("option '") + argv[optind - 1] + "' needs a value");
      default: return UsageError("top", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) {
    return UsageError("top", std::string("unexpected argument '") + argv[optind] + "'");
  }
  if (socket_path.empty()) socket_path = DefaultSocketPath();
  const std::string path = LiveSocketPath(socket_path);
  const bool terminal = !once && isatty(STDOUT_FILENO) != 0;
  for (;;) {
    std::string text, error;
    std::vector<LiveTally::Process> processes;
    double elapsed_s = 0;
    if (!ReadLiveSnapshot(path, &text, &error) ||
        !ParseLiveJson(text, &processes, &elapsed_s, &error)) {
      LogLine(error);
      return 1;
    }
    size_t width = 200, rows = 1000;
    winsize size{};
    if (terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_row > 1) {
      width = size.ws_col > 1 ? size.ws_col - 1u : 1u;
      rows = size.ws_row - 1u;
    }
    std::string out = terminal ? "\x1b[H\x1b[2J" : "";
    for (const std::string& line : LiveText(processes, elapsed_s, width, rows, "cumemtrace top")) {
      out += line + "\n";
    }
    fwrite(out.data(), 1, out.size(), stdout);
    fflush(stdout);
    if (!terminal) return 0;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int DaemonCommand(int argc, char** argv) {
  static const option kOptions[] = {
      {"socket", required_argument, nullptr, 's'},
      {"output-dir", required_argument, nullptr, 'd'},
      {"print-env", no_argument, nullptr, 'e'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  std::string socket_path;
  std::string output_dir = "cumemtrace-traces";
  bool print_env = false;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":h", kOptions, nullptr)) != -1;) {
    switch (opt) {
      case 's':
        if (*optarg == '\0') return EmptyValueError("daemon", "--socket");
        socket_path = optarg;
        break;
      case 'd':
        if (*optarg == '\0') return EmptyValueError("daemon", "--output-dir");
        output_dir = optarg;
        break;
      case 'e': print_env = true; break;
      case 'h': fputs(kDaemonHelp, stdout); return 0;
      case ':': return UsageError("daemon", std::string("option '") + argv[optind - 1] +
                                                "' needs a value");
      default:
        return UsageError("daemon", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) {
    return UsageError("daemon", std::string("unexpected argument '") + argv[optind] + "'");
  }
  if (socket_path.empty()) socket_path = DefaultSocketPath();
  if (socket_path[0] != '/') {
    // The socket path goes into other processes' environment: make it absolute.
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      LogLine("cannot resolve " + socket_path + ": " + ErrnoText());
      return 1;
    }
    socket_path = std::string(cwd) + "/" + socket_path;
  }
  if (output_dir.empty()) return UsageError("daemon", "--output-dir needs a folder");

  if (print_env) {
    const std::string tracer = TracerLibraryPath();
    if (access(tracer.c_str(), R_OK) != 0) {
      LogLine("cannot find the tracer library " + tracer + ": " + ErrnoText() +
              " (set CUMEMTRACE_TRACER_LIB, or reinstall cumemtrace)");
      return kExitUsage;
    }
    const std::string quoted = ShellQuote(tracer);
    printf("export LD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD}\n", quoted.c_str());
    printf("export CUDA_INJECTION64_PATH=%s\n", quoted.c_str());
    printf("export NVTX_INJECTION64_PATH=%s\n", quoted.c_str());
    printf("export CUMEMTRACE_SOCKET=%s\n", ShellQuote(socket_path).c_str());
    // The Python side (categories of tensors; sitecustomize runs any it shadows).
    printf("export PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\n",
           ShellQuote(PythonHookDir()).c_str());
    return fflush(stdout) == 0 ? 0 : 1;
  }

  std::string error;
  if (!PrepareSocketDirectory(DirName(socket_path), &error) ||
      !ClearStaleSocket(socket_path, &error)) {
    LogLine(error);
    return 1;
  }
  if (mkdir(output_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    LogLine("cannot create " + output_dir + ": " + ErrnoText());
    return 1;
  }
  struct stat out_st {};
  if (stat(output_dir.c_str(), &out_st) != 0 || !S_ISDIR(out_st.st_mode)) {
    LogLine(output_dir + " is not a folder");
    return 1;
  }

  sigset_t original_mask;
  const int signal_fd = BlockSignalsIntoFd({SIGINT, SIGTERM}, &original_mask);
  if (signal_fd < 0) {
    LogLine("cannot set up signal handling: " + ErrnoText());
    return 1;
  }
  const int listen_fd = ListenOnUnixSocket(socket_path, &error);
  if (listen_fd < 0) {
    LogLine(error);
    return 1;
  }
  // The live snapshots for `cumemtrace top`, beside the socket (so in its private folder).
  // The wake descriptor handed to the server is an epoll set of the signals and this socket
  // (level-triggered: it is readable while either is, until they are read below).
  const std::string live_path = LiveSocketPath(socket_path);
  int live_fd = -1;
  if (ClearStaleSocket(live_path, &error)) live_fd = ListenOnUnixSocket(live_path, &error);
  if (live_fd < 0) LogLine(error + "; `cumemtrace top` will not see this daemon");
  const int wake_fd = epoll_create1(EPOLL_CLOEXEC);
  for (const int fd : {signal_fd, live_fd}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (fd >= 0 && wake_fd >= 0) epoll_ctl(wake_fd, EPOLL_CTL_ADD, fd, &event);
  }
  const auto started = std::chrono::steady_clock::now();
  FilePerStreamPolicy policy(output_dir);
  CollectorServerOptions options;
  options.log_streams = true;
  {
    CollectorServer server(listen_fd, &policy, options);
    LogLine("daemon listening on " + socket_path + ", writing traces to " + output_dir +
            "/ (stop with Ctrl-C)");
    for (bool stop = false; !stop;) {
      if (!server.PollOnce(-1, wake_fd >= 0 ? wake_fd : signal_fd)) continue;
      if (live_fd >= 0) {
        ServeLive(live_fd, policy.live(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                      .count());
      }
      signalfd_siginfo info;
      while (read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        stop = true;
      }
    }
    server.Shutdown();
  }
  unlink(socket_path.c_str());
  if (live_fd >= 0) {
    close(live_fd);
    unlink(live_path.c_str());
  }
  if (wake_fd >= 0) close(wake_fd);
  close(signal_fd);
  LogLine("daemon stopped; " + std::to_string(policy.recorded()) + " stream(s) recorded in " +
          output_dir + "/");
  return 0;
}

}  // namespace cumemtrace

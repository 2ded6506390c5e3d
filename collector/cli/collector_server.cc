#include "collector/cli/collector_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "collector/cli/log.h"
#include "collector/cli/shared_ring_reader.h"
#include "collector/cli/thread_buffer_reader.h"
#include "proto/cumemtrace/v1/thread_buffers.h"
#include "collector/format/framing.h"
#include "collector/format/trace_file.h"
#include "collector/format/wire_validator.h"

namespace cumemtrace {
namespace {

constexpr size_t kReadBlock = 256 * 1024;
constexpr size_t kKeptWriteBytes = 4 * 1024 * 1024;

// Out of descriptors (or kernel memory), accept() fails while the listening socket stays
// readable: polling it again at once is a busy loop that once wrote a million log lines in
// 3 s. The backlog keeps the waiting connections; try again after a pause that doubles up
// to a second.
constexpr int kAcceptPauseFirstMs = 50;
constexpr int kAcceptPauseMaxMs = 1000;

// A stream's shared ring is read after the stream ends, in slices of this long between two
// polls, so that one process's ring (up to 64 MiB, written by that process) never keeps the
// collector from the others' streams.
constexpr int64_t kRecoverySliceNs = 10'000'000;

bool IsResourceShortage(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Whether `pid` is running and not on its way out: /proc/PID/stat's state is not a zombie's
// and its flags lack PF_EXITING, which the kernel sets before it closes a dying process's
// descriptors (so a process killed by a signal, or leaving with _exit, never counts).
bool ProcessRunning(pid_t pid) {
  if (pid <= 0) return false;
  FILE* file = fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "re");
  if (file == nullptr) return false;
  char text[1024];
  const size_t n = fread(text, 1, sizeof(text) - 1, file);
  fclose(file);
  text[n] = '\0';
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold anything,
  // so fields are counted after its last ')'.
  const char* p = strrchr(text, ')');
  if (p == nullptr) return false;
  char state = 0;
  unsigned long flags = 0;
  if (sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) return false;
  constexpr unsigned long kPfExiting = 0x4;
  return state != 'Z' && state != 'X' && state != 'x' && (flags & kPfExiting) == 0;
}

int64_t MonotonicMs() { return MonotonicNs() / 1000000; }

const char* CloseReasonName(v1::CloseReason reason) {
  switch (reason) {
    case v1::CLOSE_REASON_EOF: return "end of stream";
    case v1::CLOSE_REASON_PROTOCOL_ERROR: return "protocol error";
    case v1::CLOSE_REASON_COLLECTOR_SHUTDOWN: return "collector shutdown";
    case v1::CLOSE_REASON_IO_ERROR: return "I/O error";
    default: return "unknown";
  }
}

}  // namespace

struct CollectorServer::Connection {
  // Until its handshake, a connection may send one frame of at most
  // MAX_HANDSHAKE_FRAME_BYTES; the full frame size is allowed after it.
  explicit Connection(int socket_fd) : fd(socket_fd), decoder(v1::MAX_HANDSHAKE_FRAME_BYTES) {}
  ~Connection() {
    if (ring_fd >= 0) close(ring_fd);
  }

  int fd;
  uint32_t stream_id = 0;
  PeerInfo peer;
  FrameDecoder decoder;
  bool handshake_done = false;
  uint32_t handshake_pid = 0;
  std::string program;          // argv[0] from the handshake, for log lines
  TraceFileWriter* file = nullptr;  // null until the policy has decided
  std::string held;             // chunks produced before the file was known
  bool file_failed = false;     // the policy could not give the stream a file
  uint64_t bytes_received = 0;
  int64_t accepted_ms = 0;  // CLOCK_MONOTONIC
  WireStreamValidator validator;
  // The tracer's shared ring: its descriptor as it arrived (before the handshake), then the
  // reader; and how far the received batches reach into it.
  int ring_fd = -1;
  SharedRingReader ring;
  uint64_t ring_position = 0;
  uint64_t ring_dropped = 0;
  uint64_t next_sequence = 0;
  // How far the received batches reach into each per-thread buffer (slot -> position).
  std::unordered_map<uint32_t, uint64_t> thread_buffer_positions;
  // Once closed: why, for the StreamClosed record written after the ring has been read.
  v1::CloseReason close_reason = v1::CLOSE_REASON_UNSPECIFIED;
  std::string close_error;
  // The connection ended while its process still ran (StreamClosed.peer_running).
  bool peer_running = false;
  bool ring_read = false;
  int64_t ring_read_from_ns = 0;  // when reading the ring began
  uint64_t ring_frames = 0;  // frames recovered from the ring, the buffers' numbered after
  // Then the per-thread buffers' (thread_buffer_reader.h), and the events read from them.
  std::unique_ptr<ThreadBufferRecovery> buffers;
  uint64_t thread_buffer_records = 0;
};

namespace {

// One read that also takes descriptors passed with the bytes (SCM_RIGHTS): the first one,
// before the handshake is complete, is the tracer's ring; any other is closed at once.
ssize_t ReadWithDescriptors(int fd, char* buffer, size_t size, int* ring_fd, bool accept_fd) {
  iovec data{buffer, size};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed = -1;
      memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (accept_fd && *ring_fd < 0) {
        *ring_fd = passed;
      } else {
        close(passed);
      }
    }
  }
  return n;
}

}  // namespace

int HandshakeTimeoutMsFromEnvironment() {
  constexpr int kDefaultMs = 10000;
  const char* value = getenv("CUMEMTRACE_HANDSHAKE_TIMEOUT_MS");
  if (value == nullptr || *value == '\0') return kDefaultMs;
  char* end = nullptr;
  errno = 0;
  const long ms = strtol(value, &end, 10);
  if (errno != 0 || *end != '\0' || ms <= 0 || ms > 3600 * 1000) return kDefaultMs;
  return static_cast<int>(ms);
}

int ListenOnUnixSocket(const std::string& path, std::string* error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *error = "socket path is too long (" + std::to_string(path.size()) + " bytes, at most " +
             std::to_string(sizeof(addr.sun_path) - 1) + "): " + path;
    return -1;
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "cannot create a Unix socket: " + ErrnoText();
    return -1;
  }
  // The directory is private already; 0600 on the socket itself is a second lock.
  const mode_t old_umask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  umask(old_umask);
  if (bound != 0) {
    *error = "cannot bind " + path + ": " + strerror(bind_errno);
    close(fd);
    return -1;
  }
  if (listen(fd, SOMAXCONN) != 0) {
    *error = "cannot listen on " + path + ": " + ErrnoText();
    close(fd);
    unlink(path.c_str());
    return -1;
  }
  return fd;
}

CollectorServer::CollectorServer(int listen_fd, StreamPolicy* policy,
                                 const CollectorServerOptions& options)
    : listen_fd_(listen_fd), policy_(policy), options_(options), uid_(geteuid()) {}

CollectorServer::~CollectorServer() {
  for (auto& entry : connections_) close(entry.first);
  if (listen_fd_ >= 0) close(listen_fd_);
}

uint32_t CollectorServer::StreamIdForHandshakePid(uint32_t pid) const {
  auto it = stream_by_handshake_pid_.find(pid);
  return it == stream_by_handshake_pid_.end() ? 0 : it->second;
}

std::string CollectorServer::Describe(const Connection& c) const {
  std::string text = "stream " + std::to_string(c.stream_id) + " (pid " +
                     std::to_string(c.handshake_done ? c.handshake_pid
                                                     : static_cast<uint32_t>(c.peer.pid));
  if (!c.program.empty()) text += " " + c.program;
  return text + ")";
}

bool CollectorServer::PollOnce(int timeout_ms, int wake_fd) {
  std::vector<pollfd> fds;
  fds.reserve(connections_.size() + 2);
  fds.push_back({wake_fd, POLLIN, 0});
  // While accepting is paused, the listening socket is left out (-1: poll ignores it) and
  // the wait ends when the pause does.
  const int64_t pause_left = accept_paused_until_ms_ - MonotonicMs();
  const bool paused = accept_pause_ms_ > 0 && pause_left > 0;
  fds.push_back({paused ? -1 : listen_fd_, POLLIN, 0});
  if (paused && (timeout_ms < 0 || timeout_ms > pause_left)) timeout_ms = static_cast<int>(pause_left);
  const int next_overdue = CloseOverdueHandshakes();
  if (next_overdue >= 0 && (timeout_ms < 0 || timeout_ms > next_overdue)) timeout_ms = next_overdue;
  for (const auto& entry : connections_) fds.push_back({entry.first, POLLIN, 0});
  // Rings still to read: look, serve what is ready, and read on.
  if (!recovering_.empty()) timeout_ms = 0;
  const int ready = poll(fds.data(), fds.size(), timeout_ms);
  if (ready < 0) {
    if (errno != EINTR) LogLine("poll failed: " + ErrnoText());
    return false;
  }
  for (size_t i = 2; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto it = connections_.find(fds[i].fd);
    if (it != connections_.end()) ReadFrom(it->second.get(), /*drain=*/false);
  }
  if (fds[1].revents != 0 || (accept_pause_ms_ > 0 && !paused)) Accept();
  CloseOverdueHandshakes();
  ContinueRecoveries(kRecoverySliceNs);
  return wake_fd >= 0 && (fds[0].revents & POLLIN) != 0;
}

void CollectorServer::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (IsResourceShortage(errno)) {
        // One line per episode, however long it lasts; streams already open are served.
        if (accept_pause_ms_ == 0) {
          LogLine("cannot accept connections: " + ErrnoText() + " (" +
                  std::to_string(connections_.size()) +
                  " open); new connections wait in the backlog, retrying");
          accept_pause_ms_ = kAcceptPauseFirstMs;
        } else {
          accept_pause_ms_ = std::min(2 * accept_pause_ms_, kAcceptPauseMaxMs);
        }
        ++accept_failures_;
        accept_paused_until_ms_ = MonotonicMs() + accept_pause_ms_;
        return;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) LogLine("accept failed: " + ErrnoText());
      EndAcceptPause();
      return;
    }
    EndAcceptPause();
    ucred cred{};
    socklen_t cred_size = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_size) != 0) {
      LogLine("refused a connection: cannot read its credentials: " + ErrnoText());
      close(fd);
      continue;
    }
    if (cred.uid != uid_) {
      LogLine("refused a connection from pid " + std::to_string(cred.pid) + ": it runs as uid " +
              std::to_string(cred.uid) + ", this collector only records uid " +
              std::to_string(uid_));
      close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>(fd);
    Connection* c = connection.get();
    c->stream_id = next_stream_id_++;
    c->peer.pid = cred.pid;
    c->peer.uid = cred.uid;
    c->accepted_ms = MonotonicMs();
    connections_[fd] = std::move(connection);

    c->file = policy_->FileAtAccept(c->stream_id, c->peer);
    v1::TraceChunk opened;
    opened.set_stream_id(c->stream_id);
    v1::StreamOpened* record = opened.mutable_collector()->mutable_opened();
    record->set_peer_pid(static_cast<uint32_t>(cred.pid));
    record->set_peer_uid(static_cast<uint32_t>(cred.uid));
    record->set_accepted_realtime_ns(RealtimeNs());
    std::string bytes;
    AppendChunk(opened, &bytes);
    Write(c, bytes);
  }
}

void CollectorServer::EndAcceptPause() {
  if (accept_pause_ms_ == 0) return;
  LogLine("accepting connections again (" + std::to_string(accept_failures_) +
          " tries failed while out of resources)");
  accept_pause_ms_ = 0;
  accept_failures_ = 0;
}

int CollectorServer::CloseOverdueHandshakes() {
  const int64_t now = MonotonicMs();
  const int64_t limit = options_.handshake_timeout_ms;
  std::vector<int> overdue;
  int64_t next = -1;
  for (const auto& entry : connections_) {
    const Connection& c = *entry.second;
    if (c.handshake_done) continue;
    const int64_t left = c.accepted_ms + limit - now;
    if (left <= 0) {
      overdue.push_back(entry.first);
    } else if (next < 0 || left < next) {
      next = left;
    }
  }
  if (!overdue.empty()) {
    char seconds[32];
    snprintf(seconds, sizeof(seconds), "%g", static_cast<double>(limit) / 1000.0);
    for (int fd : overdue) {
      Close(fd, v1::CLOSE_REASON_PROTOCOL_ERROR,
            std::string("no handshake within ") + seconds + " s of connecting");
    }
  }
  return static_cast<int>(next);
}

bool CollectorServer::ShedBytesBeforeHandshakes(const Connection* reading) {
  for (;;) {
    size_t total = 0;
    Connection* biggest = nullptr;
    for (const auto& entry : connections_) {
      Connection* other = entry.second.get();
      if (other->handshake_done) continue;
      total += other->decoder.pending_bytes();
      if (biggest == nullptr || other->decoder.pending_bytes() > biggest->decoder.pending_bytes()) {
        biggest = other;
      }
    }
    if (total <= kMaxBytesBeforeHandshakes || biggest == nullptr) return true;
    const bool self = biggest == reading;
    Close(biggest->fd, v1::CLOSE_REASON_PROTOCOL_ERROR,
          "no handshake after " + std::to_string(biggest->decoder.pending_bytes()) +
              " bytes, while connections without one held more than " +
              std::to_string(kMaxBytesBeforeHandshakes) + " bytes in all");
    if (self) return false;
  }
}

bool CollectorServer::Write(Connection* c, std::string_view bytes) {
  if (c->file == nullptr) {
    c->held.append(bytes.data(), bytes.size());
    return true;
  }
  std::string error;
  if (c->file->Append(bytes, &error)) return true;
  LogLine(Describe(*c) + ": " + error);
  return false;
}

bool CollectorServer::ReadFrom(Connection* c, bool drain) {
  read_buffer_.resize(kReadBlock);
  do {
    const ssize_t n = ReadWithDescriptors(c->fd, read_buffer_.data(), read_buffer_.size(),
                                          &c->ring_fd, !c->handshake_done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      Close(c->fd, v1::CLOSE_REASON_IO_ERROR, "read failed: " + ErrnoText());
      return false;
    }
    if (n == 0) {
      const size_t partial = c->decoder.pending_bytes();
      Close(c->fd, v1::CLOSE_REASON_EOF,
            partial == 0 ? std::string()
                         : "connection ended inside a frame (" + std::to_string(partial) +
                               " bytes discarded)");
      return false;
    }
    c->bytes_received += static_cast<uint64_t>(n);
    c->decoder.Append(read_buffer_.data(), static_cast<size_t>(n));
    // Connections that have not identified themselves share one small budget, so that many
    // of them sending partial frames cannot take the collector's memory (40 took 692 MB).
    // Over it, the one holding the most goes first: a real tracer's handshake is small and
    // arrives at once, so it is never the one closed.
    if (!c->handshake_done && !ShedBytesBeforeHandshakes(c)) return false;

    // Everything decoded from this read goes to the file in one write(2), before the next
    // read: nothing received is ever held back in memory. The buffer is kept from one read
    // to the next (a fresh one per read made malloc trim and regrow the heap each time),
    // unless a large frame grew it past what a read usually needs.
    std::string& out = write_buffer_;
    if (out.capacity() > kKeptWriteBytes) std::string().swap(out);
    out.clear();
    std::string error;
    bool broken = false;
    for (;;) {
      std::string_view frame;
      const FrameDecoder::Status status = c->decoder.Next(&frame);
      if (status == FrameDecoder::Status::kNeedMore) break;
      if (status == FrameDecoder::Status::kError) {
        error = c->decoder.error();
        broken = true;
        break;
      }
      if (!HandleFrame(c, frame, &out, &error)) {
        broken = true;
        break;
      }
    }
    if (!out.empty() && !Write(c, out)) {
      Close(c->fd, v1::CLOSE_REASON_IO_ERROR, "cannot write the trace file");
      return false;
    }
    if (broken) {
      Close(c->fd, c->file_failed ? v1::CLOSE_REASON_IO_ERROR : v1::CLOSE_REASON_PROTOCOL_ERROR,
            error);
      return false;
    }
  } while (drain);
  return true;
}

bool CollectorServer::HandleFrame(Connection* c, std::string_view frame, std::string* out,
                                  std::string* error) {
  const WireStreamValidator::Verdict verdict = c->validator.Check(frame, error);
  if (verdict == WireStreamValidator::Verdict::kRefused) return false;
  if (verdict == WireStreamValidator::Verdict::kBatch) {
    const v1::EventBatch& batch = c->validator.message().batch();
    c->ring_position = std::max(c->ring_position, batch.ring_position());
    c->ring_dropped = std::max(c->ring_dropped, batch.ring_dropped());
    c->next_sequence = batch.sequence() + 1;
    for (const v1::ThreadBufferPosition& p : batch.thread_buffer_positions()) {
      // Bounded by the slots a collector reads (thread_buffers.h): a peer cannot grow it.
      if (p.slot() >= v1::thread_buffers::kMaxSlots) continue;
      uint64_t& position = c->thread_buffer_positions[p.slot()];
      position = std::max(position, p.position());
    }
  }
  if (verdict == WireStreamValidator::Verdict::kHandshake) {
    const v1::Handshake& handshake = c->validator.message().handshake();
    if (c->ring_fd >= 0 && handshake.has_shared_ring()) {
      std::string ring_error;
      if (!c->ring.Adopt(c->ring_fd, handshake.shared_ring(), &ring_error)) {
        LogLine(Describe(*c) + ": " + ring_error);
      }
      c->ring_fd = -1;  // the reader's now (or closed)
    }
    c->handshake_done = true;
    c->decoder.set_max_frame_bytes(v1::MAX_WIRE_FRAME_BYTES);
    c->handshake_pid = handshake.pid();
    if (handshake.command_line_size() > 0) c->program = handshake.command_line(0);
    stream_by_handshake_pid_.emplace(handshake.pid(), c->stream_id);
    if (c->file == nullptr) {
      c->file = policy_->FileAtHandshake(c->stream_id, c->peer, handshake, error);
      if (c->file == nullptr) {
        c->file_failed = true;
        return false;
      }
      std::string held;
      held.swap(c->held);
      out->insert(0, held);
    }
    if (options_.log_streams) {
      LogLine(Describe(*c) + " opened -> " + c->file->path());
    }
  }
  AppendWireFrameChunk(c->stream_id, frame, out);
  policy_->MessageRecorded(c->stream_id, c->validator.message());
  return true;
}

void CollectorServer::Close(int fd, v1::CloseReason reason, const std::string& error) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  std::unique_ptr<Connection> c = std::move(it->second);
  connections_.erase(it);
  close(fd);
  c->close_reason = reason;
  c->close_error = error;
  // Looked at before anything else: the process may be on its way out.
  c->peer_running =
      reason == v1::CLOSE_REASON_EOF && c->handshake_done && ProcessRunning(c->peer.pid);
  if (c->file != nullptr && c->ring.adopted() && reason != v1::CLOSE_REASON_PROTOCOL_ERROR) {
    // The stream is over: whatever the process wrote into its ring and no frame carried
    // (it died, or left with _exit, before its sender sent it) is read from the ring now,
    // a slice at a time (PollOnce reads on).
    c->ring.StartRecovery(c->ring_position, c->ring_dropped, c->next_sequence);
    c->ring_read = true;
    c->ring_read_from_ns = MonotonicNs();
    recovering_.push_back(std::move(c));
    return;
  }
  FinishClose(std::move(c));
}

void CollectorServer::ContinueRecoveries(int64_t budget_ns) {
  const int64_t deadline = budget_ns < 0 ? -1 : MonotonicNs() + budget_ns;
  for (size_t i = 0; i < recovering_.size();) {
    Connection* c = recovering_[i].get();
    int64_t left = -1;
    if (deadline >= 0) left = std::max<int64_t>(0, deadline - MonotonicNs());
    std::vector<std::string> frames;
    bool done = c->ring.ContinueRecovery(left, &frames);
    c->ring_frames += frames.size();
    if (done) {
      // Then the per-thread buffers' events past what the batches carried, numbered on.
      if (c->buffers == nullptr) {
        c->buffers = std::make_unique<ThreadBufferRecovery>(
            c->ring.fd(), c->ring.thread_buffer_offset(), c->ring.thread_buffer_bytes(),
            c->thread_buffer_positions, c->next_sequence + c->ring_frames);
      }
      if (deadline >= 0) left = std::max<int64_t>(0, deadline - MonotonicNs());
      done = c->buffers->Continue(left, &frames);
      c->thread_buffer_records = c->buffers->events();
    }
    std::string bytes;
    for (const std::string& frame : frames) AppendWireFrameChunk(c->stream_id, frame, &bytes);
    if (!bytes.empty()) Write(c, bytes);
    if (!done) {
      ++i;
      continue;
    }
    std::unique_ptr<Connection> finished = std::move(recovering_[i]);
    recovering_.erase(recovering_.begin() + static_cast<std::ptrdiff_t>(i));
    FinishClose(std::move(finished));
  }
}

void CollectorServer::FinishClose(std::unique_ptr<Connection> c) {
  SharedRingReader::Recovered recovered;
  if (c->ring_read) {
    recovered = c->ring.recovered();
    recovered.records += c->thread_buffer_records;
    const std::string read =
        std::to_string(recovered.records) + " records recovered from its shared ring in " +
        std::to_string((MonotonicNs() - c->ring_read_from_ns) / 1000000) + " ms";
    if (!recovered.damage.empty()) {
      // Always said: the process damaged its ring (or something did), and what it cost.
      LogLine(Describe(*c) + ": its shared ring is damaged: " + recovered.damage + "; " + read);
    } else if ((recovered.records > 0 || recovered.drops > 0) && options_.log_streams) {
      LogLine(Describe(*c) + ": " + read);
    }
  }
  const v1::CloseReason reason = c->close_reason;
  const std::string& error = c->close_error;
  if (c->file != nullptr) {
    v1::TraceChunk closed;
    closed.set_stream_id(c->stream_id);
    v1::StreamClosed* record = closed.mutable_collector()->mutable_closed();
    record->set_ring_records_recovered(recovered.records);
    record->set_ring_drops_recovered(recovered.drops);
    record->set_peer_running(c->peer_running);
    record->set_reason(reason);
    record->set_error(error);
    record->set_bytes_received(c->bytes_received);
    record->set_closed_realtime_ns(RealtimeNs());
    std::string bytes;
    AppendChunk(closed, &bytes);
    Write(c.get(), bytes);
  }
  const bool failure =
      reason == v1::CLOSE_REASON_PROTOCOL_ERROR || reason == v1::CLOSE_REASON_IO_ERROR;
  if (failure || options_.log_streams) {
    std::string line = Describe(*c) + " closed: " + CloseReasonName(reason);
    if (!error.empty()) line += ": " + error;
    line += " (" + std::to_string(c->bytes_received) + " bytes received)";
    if (failure && c->file == nullptr) line += "; nothing recorded";
    LogLine(line);
  }
  policy_->StreamFinished(c->stream_id, c->file);
}

void CollectorServer::CatchUp() {
  Accept();
  std::vector<int> fds;
  for (const auto& entry : connections_) fds.push_back(entry.first);
  for (int fd : fds) {
    auto it = connections_.find(fd);
    if (it != connections_.end()) ReadFrom(it->second.get(), /*drain=*/true);
  }
}

void CollectorServer::Shutdown() {
  CatchUp();
  std::vector<int> fds;
  for (const auto& entry : connections_) fds.push_back(entry.first);
  for (int fd : fds) Close(fd, v1::CLOSE_REASON_COLLECTOR_SHUTDOWN, "");
  // Every ring to its end: each is bounded by its size, whatever it holds.
  ContinueRecoveries(-1);
}

}  // namespace cumemtrace

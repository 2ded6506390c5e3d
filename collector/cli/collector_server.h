// The collector's connection handling, shared by `cumemtrace run` (one private socket, one
// shared trace file) and `cumemtrace daemon` (one per-user socket, one file per stream).
//
// Single-threaded: the owner calls PollOnce() in its own loop, passing a descriptor (a
// signalfd) that wakes it. Each accepted connection is a stream with an id (1, 2, ...); its
// peer credentials are checked, its frames are decoded with FrameDecoder, validated, and
// appended to the stream's trace file as they arrive.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/cli/trace_writer.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

// Who is on the other end of a connection (SO_PEERCRED).
struct PeerInfo {
  pid_t pid = 0;
  uid_t uid = 0;
};

// Where the chunks of stream N go: the pluggable part of CollectorServer.
class StreamPolicy {
 public:
  virtual ~StreamPolicy() = default;
  // Asked once per accepted connection. Return the file the stream goes to, or null to
  // decide after a valid handshake (when the file name depends on it). Chunks produced in
  // the meantime (the StreamOpened record) are held and written first.
  virtual TraceFileWriter* FileAtAccept(uint32_t stream_id, const PeerInfo& peer) = 0;
  // Asked after a valid handshake when FileAtAccept returned null. Null with *error set:
  // the stream cannot be recorded and is closed.
  virtual TraceFileWriter* FileAtHandshake(uint32_t stream_id, const PeerInfo& peer,
                                           const v1::Handshake& handshake,
                                           std::string* error) = 0;
  // The stream has ended and its StreamClosed record was written (when it had a file).
  virtual void StreamFinished(uint32_t stream_id, TraceFileWriter* file) = 0;
  // Each valid message of a stream once it is recorded, as the validator parsed it (so a
  // reader of the live stream, `run --live`, parses nothing again). By default ignored.
  virtual void MessageRecorded(uint32_t /*stream_id*/, const v1::StreamMessage& /*message*/) {}
};

// CUMEMTRACE_HANDSHAKE_TIMEOUT_MS when it is a positive number, else 10 s.
int HandshakeTimeoutMsFromEnvironment();

struct CollectorServerOptions {
  // Log one line per stream opened and closed (the daemon). Errors are always logged.
  bool log_streams = false;
  // A connection whose handshake has not arrived this long after it was accepted is closed
  // (and logged): a tracer sends it at once, and a stranger that never does would otherwise
  // hold a descriptor and a stream for as long as it likes.
  int handshake_timeout_ms = HandshakeTimeoutMsFromEnvironment();
};

// Creates a listening Unix stream socket at `path` (non-blocking, close-on-exec, file mode
// 0600). -1 with *error set on failure.
int ListenOnUnixSocket(const std::string& path, std::string* error);

class CollectorServer {
 public:
  // Takes ownership of listen_fd. `policy` must outlive the server.
  CollectorServer(int listen_fd, StreamPolicy* policy, const CollectorServerOptions& options);
  ~CollectorServer();
  CollectorServer(const CollectorServer&) = delete;
  CollectorServer& operator=(const CollectorServer&) = delete;

  // Waits up to timeout_ms (-1: no limit) for a new connection, data, or wake_fd (ignored
  // when negative) becoming readable, and serves what is ready. True when wake_fd is
  // readable (the caller reads it).
  bool PollOnce(int timeout_ms, int wake_fd);

  // Accepts connections waiting in the backlog and reads whatever has already arrived on
  // every connection, without waiting: afterwards the file holds everything sent so far.
  void CatchUp();
  // CatchUp(), then closes each connection still open with COLLECTOR_SHUTDOWN. The
  // listening socket stays open (the owner removes its path).
  void Shutdown();

  // Streams not yet closed, counting those whose shared ring is still being read.
  size_t open_streams() const { return connections_.size() + recovering_.size(); }

  // Bytes that connections without a handshake may hold, all together.
  static constexpr size_t kMaxBytesBeforeHandshakes = 16u << 20;
  // The stream whose handshake named `pid` (the first one), or 0 when none did.
  uint32_t StreamIdForHandshakePid(uint32_t pid) const;

 private:
  struct Connection;

  void Accept();
  // Logs the end of an episode of failed accepts, if one was going on.
  void EndAcceptPause();
  // Closes the connections whose handshake is overdue; returns the milliseconds until the
  // next one is (-1: none is waiting for its handshake).
  int CloseOverdueHandshakes();
  // Closes connections without a handshake, the largest holder first, until together they
  // hold at most kMaxBytesBeforeHandshakes. False when `reading` itself was closed.
  bool ShedBytesBeforeHandshakes(const Connection* reading);
  // Reads once (or, when drain is set, until nothing is left). False when the connection
  // was closed.
  bool ReadFrom(Connection* c, bool drain);
  // Validates and records one frame; false (with *error) on a protocol error.
  bool HandleFrame(Connection* c, std::string_view frame, std::string* out, std::string* error);
  // Ends the connection: its shared ring, if it has one to read, is read by
  // ContinueRecoveries; then FinishClose.
  void Close(int fd, v1::CloseReason reason, const std::string& error);
  // Reads the rings of closed streams for about budget_ns in all (< 0: to their ends), and
  // finishes the streams whose ring is read.
  void ContinueRecoveries(int64_t budget_ns);
  // Writes the StreamClosed record, logs, tells the policy, and forgets the connection.
  void FinishClose(std::unique_ptr<Connection> c);
  // Sends bytes to the stream's file, or holds them until the file is known.
  bool Write(Connection* c, std::string_view bytes);
  std::string Describe(const Connection& c) const;

  int listen_fd_;
  StreamPolicy* policy_;
  CollectorServerOptions options_;
  uid_t uid_;
  uint32_t next_stream_id_ = 1;
  std::map<int, std::unique_ptr<Connection>> connections_;  // by socket descriptor
  // Closed connections whose shared ring is being read, oldest first.
  std::vector<std::unique_ptr<Connection>> recovering_;
  std::map<uint32_t, uint32_t> stream_by_handshake_pid_;
  std::string read_buffer_;
  std::string write_buffer_;  // what one read decoded, for the file; reused across reads
  int accept_pause_ms_ = 0;  // > 0 while accept() fails for want of descriptors or memory
  int64_t accept_paused_until_ms_ = 0;
  uint64_t accept_failures_ = 0;
};

}  // namespace cumemtrace

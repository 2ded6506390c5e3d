// The tracer's end of the Unix socket. Only the sender thread uses it. Never raises SIGPIPE
// (MSG_NOSIGNAL) and never blocks longer than the caller allows.
//
// The descriptor lives in the program's table, where the program may close it (daemons,
// shells, close_range, subprocess helpers) and get the same number for its own file or
// socket. So it sits at a high number (MoveToHighDescriptor), close-on-exec, and its identity
// (st_dev, st_ino) is checked before each send: once the number is no longer our socket the
// connection is given up without touching that number again (kTaken).
#pragma once

#include <sys/types.h>

#include <string>

#include "tracer/recording/descriptors.h"

namespace cumemtrace::tracer {

class CollectorConnection {
 public:
  enum class SendResult {
    kAllSent,
    kPending,
    kClosed,  // the collector went away
    kTaken,   // the program closed or replaced our descriptor: never touched again
  };

  // Connects, then switches the socket to non-blocking. False with *error on failure. With
  // `wait` false the connect itself does not block either: a collector whose backlog is full
  // (stopped, or flooded) fails it, so a program thread never waits on it.
  bool Connect(const std::string& path, std::string* error, bool wait = true);
  // Sends the front of *outbox with `passed_fd` attached (SCM_RIGHTS), without blocking, and
  // erases what was sent. True once the descriptor went with some bytes.
  bool SendWithDescriptor(std::string* outbox, int passed_fd);
  // Sends from the front of *outbox for at most timeout_ms, erasing what was sent.
  SendResult Send(std::string* outbox, int timeout_ms);
  // In a forked child: forget the parent's socket without touching the parent's stream.
  void AbandonAfterFork();
  // In a forked child, after AbandonAfterFork: makes the child's own socket (unconnected,
  // high, close-on-exec) on the number the parent's left free, for the child's first
  // Connect. A child that takes every free descriptor before its first event (a process at
  // its limit) was untraced, its socket() failing with EMFILE. Async-signal-safe calls only.
  static void PrepareSocketAfterFork();
  // Closes the socket, unless the number no longer is ours.
  void Close();
  bool connected() const { return fd_ >= 0; }
  // True while fd_ still is the socket we connected (same st_dev and st_ino).
  bool StillOurs() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace cumemtrace::tracer

// The tracer's end of the Unix socket. Only the sender thread uses it. Never raises SIGPIPE
// (MSG_NOSIGNAL) and never blocks longer than the caller allows.
#pragma once

#include <string>

namespace cumemtrace::tracer {

class CollectorConnection {
 public:
  enum class SendResult { kAllSent, kPending, kClosed };

  // Connects (blocking; a local socket answers at once or not at all), then switches the
  // socket to non-blocking. False with *error on failure.
  bool Connect(const std::string& path, std::string* error);
  // Sends from the front of *outbox for at most timeout_ms, erasing what was sent.
  SendResult Send(std::string* outbox, int timeout_ms);
  // In a forked child: forget the parent's socket without touching the parent's stream.
  void AbandonAfterFork();
  void Close();
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace cumemtrace::tracer

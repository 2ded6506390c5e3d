#include "tracer/collector_connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cumemtrace::tracer {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

bool CollectorConnection::Connect(const std::string& path, std::string* error) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    *error = "socket path too long: " + path;
    return false;
  }
  memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // CLOEXEC: an exec'ed image loads the tracer again and opens its own stream.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return false;
  }
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *error = "cannot connect to " + path + ": " + strerror(errno);
    close(fd);
    return false;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fd_ = fd;
  return true;
}

CollectorConnection::SendResult CollectorConnection::Send(std::string* outbox, int timeout_ms) {
  if (fd_ < 0) return SendResult::kClosed;
  const int64_t deadline = NowMs() + timeout_ms;
  size_t sent = 0;
  SendResult result = SendResult::kAllSent;
  while (sent < outbox->size()) {
    const ssize_t n = send(fd_, outbox->data() + sent, outbox->size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int64_t left = deadline - NowMs();
      if (left <= 0) {
        result = SendResult::kPending;
        break;
      }
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, static_cast<int>(left));
      continue;
    }
    // EPIPE, ECONNRESET, ...: the collector is gone.
    Close();
    result = SendResult::kClosed;
    break;
  }
  outbox->erase(0, sent);
  return result;
}

void CollectorConnection::AbandonAfterFork() {
  // The child shares the parent's socket; closing our copy does not end the parent's stream.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void CollectorConnection::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace cumemtrace::tracer

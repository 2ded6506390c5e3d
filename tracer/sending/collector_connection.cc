#include "tracer/sending/collector_connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cumemtrace::tracer {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The socket a forked child made for its first Connect (PrepareSocketAfterFork).
struct SpareSocket {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};
SpareSocket g_spare;

}  // namespace

void CollectorConnection::PrepareSocketAfterFork() {
  // A spare inherited from a parent that never used it is that parent's: two processes
  // must never connect one socket.
  if (SameDescriptor(g_spare.fd, g_spare.dev, g_spare.ino)) close(g_spare.fd);
  g_spare = SpareSocket{};
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const int moved = MoveToHighDescriptor(fd);
  struct stat st {};
  if (fstat(moved, &st) != 0) {
    close(moved);
    return;
  }
  g_spare = SpareSocket{moved, st.st_dev, st.st_ino};
}

bool CollectorConnection::StillOurs() const { return SameDescriptor(fd_, dev_, ino_); }

bool CollectorConnection::Connect(const std::string& path, std::string* error, bool wait) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    *error = "socket path too long: " + path;
    return false;
  }
  memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // CLOEXEC: an exec'ed image loads the tracer again and opens its own stream. A forked
  // child first uses the socket made for it at the fork, once, if the number still is it.
  int fd = -1;
  if (g_spare.fd >= 0) {
    if (SameDescriptor(g_spare.fd, g_spare.dev, g_spare.ino)) {
      fd = g_spare.fd;
      const int flags = fcntl(fd, F_GETFL);
      fcntl(fd, F_SETFL, wait ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
    }
    g_spare = SpareSocket{};
  }
  if (fd < 0) fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (wait ? 0 : SOCK_NONBLOCK), 0);
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
  const int moved = MoveToHighDescriptor(fd);
  fcntl(moved, F_SETFL, fcntl(moved, F_GETFL) | O_NONBLOCK);
  // Bytes in flight while the collector is not scheduled: the default (net.core.wmem_default,
  // about 200 KiB) holds 15,000 NVTX records, and a collector descheduled for a few ms on a
  // busy machine stopped the stream. 1 MiB, which the kernel doubles, within
  // net.core.wmem_max (it clamps to that).
  const int send_buffer = 1 << 20;
  setsockopt(moved, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(send_buffer));
  struct stat st {};
  if (fstat(moved, &st) != 0) {
    *error = std::string("fstat of the collector socket: ") + strerror(errno);
    close(moved);
    return false;
  }
  fd_ = moved;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  return true;
}

CollectorConnection::SendResult CollectorConnection::Send(std::string* outbox, int timeout_ms) {
  if (fd_ < 0) return SendResult::kClosed;
  // Checked before every send: between two sends the program may have closed the number
  // and opened its own file or socket there. A close and reopen inside this very call
  // would still escape the check; no portable call sends to "this socket only".
  if (!StillOurs()) {
    fd_ = -1;  // not ours: neither written nor closed
    return SendResult::kTaken;
  }
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
    // EPIPE, ECONNRESET, ...: the collector is gone. EBADF, ENOTSOCK: the number was
    // taken since the check.
    if (!StillOurs()) {
      fd_ = -1;
      result = SendResult::kTaken;
    } else {
      Close();
      result = SendResult::kClosed;
    }
    break;
  }
  outbox->erase(0, sent);
  return result;
}

bool CollectorConnection::SendWithDescriptor(std::string* outbox, int passed_fd) {
  if (fd_ < 0 || outbox->empty() || !StillOurs()) return false;
  iovec data{outbox->data(), outbox->size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(header), &passed_fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;  // the caller sends the bytes without it
  outbox->erase(0, static_cast<size_t>(n));
  return true;
}

void CollectorConnection::AbandonAfterFork() {
  // The child shares the parent's socket; closing our copy does not end the parent's stream.
  Close();
}

void CollectorConnection::Close() {
  if (StillOurs()) close(fd_);
  fd_ = -1;
}

}  // namespace cumemtrace::tracer

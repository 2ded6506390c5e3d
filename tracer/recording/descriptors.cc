#include "tracer/recording/descriptors.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace cumemtrace::tracer {

int MoveToHighDescriptor(int fd) {
  // Three quarters of the way to the soft limit (768 under the usual 1024): far above what
  // programs open, and still below the limit a program may lower it to later.
  rlimit limit{};
  rlim_t floor = 768;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    floor = std::min<rlim_t>(floor, limit.rlim_cur / 4 * 3);
  }
  if (floor <= static_cast<rlim_t>(fd)) return fd;
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(floor));
  if (high < 0) return fd;  // nothing free up there: keep the low number, still checked
  close(fd);
  return high;
}

bool SameDescriptor(int fd, dev_t dev, ino_t ino) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

}  // namespace cumemtrace::tracer

// The tracer's own descriptors in the program's table (the ring's memfd, the collector's
// socket): kept out of the range the program's own open() calls reach, and recognised again
// by identity, since the program may close a number and reuse it.
#pragma once

#include <sys/types.h>

namespace cumemtrace::tracer {

// Moves `fd` to a high descriptor number, close-on-exec, out of the range a program's own
// open() calls reach, and returns it (or `fd` itself when no high number is free). Programs
// open their files at the lowest free number; the tracer's must not be the one they get.
int MoveToHighDescriptor(int fd);
// True when `fd` is open and is the file (st_dev, st_ino).
bool SameDescriptor(int fd, dev_t dev, ino_t ino);

}  // namespace cumemtrace::tracer

// A trace file being written: created exclusively (never overwrites), mode 0600, and every
// append goes straight to write(2) so a crash of anyone loses nothing already received.
// On a full disk it keeps whole chunks only, and a file it could not even start is removed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

class TraceFileWriter {
 public:
  // Creates `path` with O_CREAT|O_EXCL (mode 0600) and writes the preamble and a
  // FileHeader chunk. Null with *error set when the file exists or cannot be written; a file
  // it created but could not write (a full disk) is removed, so a retry can create it.
  static std::unique_ptr<TraceFileWriter> Create(const std::string& path, std::string* error);
  ~TraceFileWriter();
  TraceFileWriter(const TraceFileWriter&) = delete;
  TraceFileWriter& operator=(const TraceFileWriter&) = delete;

  // Appends already-framed whole chunks. After a failed write the file is cut back to its
  // last whole chunk and the writer refuses every later append: a reader reads every chunk
  // before and says the file was cut short.
  bool Append(std::string_view bytes, std::string* error);
  bool AppendChunk(const v1::TraceChunk& chunk, std::string* error);
  // Writes the FileEnd chunk (unless a write failed before) and closes the file; false when
  // either fails, close(2) reporting a deferred write error included.
  bool Close(std::string* error);

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // The first write error ("cannot write PATH: No space left on device"), "" when none.
  const std::string& failure() const { return failure_; }

 private:
  TraceFileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_;
  std::string path_;
  uint64_t bytes_written_ = 0;
  std::string failure_;  // first write error; non-empty means the writer is dead
};

// CLOCK_REALTIME in nanoseconds.
uint64_t RealtimeNs();
// gethostname(), "" when unavailable.
std::string HostName();

}  // namespace cumemtrace

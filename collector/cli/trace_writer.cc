#include "collector/cli/trace_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "collector/format/trace_file.h"
#include "collector/format/varint.h"

#ifndef CUMEMTRACE_VERSION
#define CUMEMTRACE_VERSION "unknown"
#endif

namespace cumemtrace {
namespace {

// The length of the whole chunks at the start of `bytes` (framed chunks, the last maybe cut).
uint64_t WholeChunksIn(std::string_view bytes) {
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* end = begin + bytes.size();
  const uint8_t* p = begin;
  uint64_t whole = 0;
  uint64_t length = 0;
  while (ReadVarint(&p, end, &length) && length <= static_cast<uint64_t>(end - p)) {
    p += length;
    whole = static_cast<uint64_t>(p - begin);
  }
  return whole;
}

}  // namespace

uint64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

std::unique_ptr<TraceFileWriter> TraceFileWriter::Create(const std::string& path,
                                                         std::string* error) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create " + path + ": " + strerror(errno);
    return nullptr;
  }
  std::unique_ptr<TraceFileWriter> writer(new TraceFileWriter(fd, path));
  std::string start(TraceFilePreamble());
  v1::TraceChunk header;
  header.set_stream_id(0);
  v1::FileHeader* file_header = header.mutable_file_header();
  file_header->set_writer_version(CUMEMTRACE_VERSION);
  file_header->set_created_realtime_ns(RealtimeNs());
  file_header->set_hostname(HostName());
  cumemtrace::AppendChunk(header, &start);
  if (!writer->Append(start, error)) {
    // Nothing of it is worth keeping, and a file left behind would refuse the retry.
    writer.reset();
    unlink(path.c_str());
    return nullptr;
  }
  return writer;
}

TraceFileWriter::~TraceFileWriter() {
  if (fd_ >= 0) close(fd_);
}

bool TraceFileWriter::Append(std::string_view bytes, std::string* error) {
  if (!failure_.empty() || fd_ < 0) {
    *error = failure_.empty() ? path_ + " is closed" : failure_;
    return false;
  }
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failure_ = "cannot write " + path_ + ": " + strerror(errno);
      // The chunk that did not fit whole goes, so the file ends after its last whole chunk.
      // Cutting a file back needs no free space.
      const uint64_t whole = bytes_written_ - (bytes.size() - left) +
                             WholeChunksIn(bytes.substr(0, bytes.size() - left));
      if (ftruncate(fd_, static_cast<off_t>(whole)) == 0) {
        bytes_written_ = whole;
      } else {
        failure_ += std::string(" (and cannot cut it back to its last whole chunk: ") +
                    strerror(errno) + ")";
      }
      *error = failure_;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return true;
}

bool TraceFileWriter::AppendChunk(const v1::TraceChunk& chunk, std::string* error) {
  std::string bytes;
  cumemtrace::AppendChunk(chunk, &bytes);
  return Append(bytes, error);
}

bool TraceFileWriter::Close(std::string* error) {
  if (fd_ < 0) return true;
  bool ok = true;
  if (failure_.empty()) {
    // Without it a reader takes the file for one cut short.
    std::string end;
    AppendFileEnd(bytes_written_, &end);
    ok = Append(end, error);
  }
  const int rc = close(fd_);
  fd_ = -1;
  if (rc != 0 && errno != EINTR && ok) {
    *error = "cannot write " + path_ + ": " + strerror(errno);
    return false;
  }
  return ok;
}

}  // namespace cumemtrace

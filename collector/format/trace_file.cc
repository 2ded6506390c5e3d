#include "collector/format/trace_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "collector/format/varint.h"

namespace cumemtrace {
namespace {

constexpr char kPreamble[8] = {'C', 'M', 'T', 'R', 'A', 'C', 'E',
                               static_cast<char>(v1::FILE_FORMAT_VERSION)};
// Version 1: the same chunks without checksums, and no FileEnd.
constexpr int kOldestVersion = 1;
// TraceChunk.checksum: field 15, fixed32 (wire type 5), then 4 bytes little-endian.
constexpr char kChecksumTag = static_cast<char>((15 << 3) | 5);
constexpr size_t kChecksumField = 5;

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// Appends the checksum field over out[start, end): the chunk's prefix and bytes so far.
void AppendChecksum(size_t start, std::string* out) {
  const uint32_t crc = Crc32(std::string_view(*out).substr(start));
  out->push_back(kChecksumTag);
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(crc >> (8 * i)));
}

// Reads a chunk's bytes as { stream_id = 1; wire_frame = 2 } and nothing else (the layout
// AppendWireFrameChunk writes); false for anything else, which protobuf then parses.
bool ParseWireFrameChunk(std::string_view chunk, uint32_t* stream_id,
                         std::string_view* wire_frame) {
  const auto* p = reinterpret_cast<const uint8_t*>(chunk.data());
  const uint8_t* end = p + chunk.size();
  *stream_id = 0;
  if (p != end && *p == 0x08) {
    ++p;
    uint64_t id = 0;
    if (!ReadVarint(&p, end, &id) || id > 0xffffffffu) return false;
    *stream_id = static_cast<uint32_t>(id);
  }
  if (p == end || *p != 0x12) return false;
  ++p;
  uint64_t size = 0;
  if (!ReadVarint(&p, end, &size) || size != static_cast<uint64_t>(end - p)) return false;
  *wire_frame = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(size));
  return true;
}

}  // namespace

std::string_view TraceFilePreamble() { return std::string_view(kPreamble, sizeof(kPreamble)); }

void AppendChunk(const v1::TraceChunk& chunk, std::string* out) {
  std::string body;
  if (chunk.checksum() == 0) {
    body = chunk.SerializeAsString();
  } else {  // one parsed with its checksum (by a FrameDecoder, not this file's reader)
    v1::TraceChunk copy = chunk;
    copy.clear_checksum();
    body = copy.SerializeAsString();
  }
  const size_t start = out->size();
  AppendVarint(body.size() + kChecksumField, out);
  out->append(body);
  AppendChecksum(start, out);
}

void AppendWireFrameChunk(uint32_t stream_id, std::string_view wire_frame, std::string* out) {
  // TraceChunk { stream_id = 1 (varint); wire_frame = 2 (bytes); checksum = 15 }, encoded by
  // hand so the frame is copied once; the layout is pinned by a test against the generated
  // parser.
  const size_t body = 1 + VarintSize(stream_id) + 1 + VarintSize(wire_frame.size()) +
                      wire_frame.size() + kChecksumField;
  const size_t start = out->size();
  out->reserve(start + VarintSize(body) + body);  // grown once, not at each append
  AppendVarint(body, out);
  out->push_back(static_cast<char>(0x08));  // field 1, varint
  AppendVarint(stream_id, out);
  out->push_back(static_cast<char>(0x12));  // field 2, length-delimited
  AppendVarint(wire_frame.size(), out);
  out->append(wire_frame.data(), wire_frame.size());
  AppendChecksum(start, out);
}

void AppendFileEnd(uint64_t bytes_before, std::string* out) {
  v1::TraceChunk end;
  end.set_stream_id(0);
  end.mutable_file_end()->set_bytes_before(bytes_before);
  AppendChunk(end, out);
}

TraceFileReader::~TraceFileReader() {
  if (file_ != nullptr) fclose(file_);
}

bool TraceFileReader::Open(const std::string& path) {
  file_ = fopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    error_ = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fileno(file_), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      error_ = path + " is a directory, not a trace file";
      return false;
    }
    file_bytes_ = static_cast<uint64_t>(st.st_size);
  }
  char preamble[sizeof(kPreamble)];
  return CheckPreamble(std::string_view(preamble, fread(preamble, 1, sizeof(kPreamble), file_)),
                       path);
}

bool TraceFileReader::OpenBytes(std::string_view bytes, const std::string& name) {
  file_bytes_ = bytes.size();
  if (!CheckPreamble(bytes.substr(0, sizeof(kPreamble)), name)) return false;
  decoder_.UseBytes(bytes.substr(sizeof(kPreamble)));
  eof_ = true;
  return true;
}

bool TraceFileReader::CheckPreamble(std::string_view preamble, const std::string& path) {
  const size_t got = preamble.size();
  if (got < 7 || memcmp(preamble.data(), kPreamble, 7) != 0) {
    error_ = path + " is not a cumemtrace trace file (no CMTRACE preamble)";
    return false;
  }
  const int version = got < sizeof(kPreamble) ? -1 : static_cast<unsigned char>(preamble[7]);
  if (version < kOldestVersion || version > v1::FILE_FORMAT_VERSION) {
    error_ = path + ": unsupported trace file format version " +
             (version < 0 ? std::string("(missing)") : std::to_string(version)) +
             " (this cumemtrace reads versions " + std::to_string(kOldestVersion) + " to " +
             std::to_string(v1::FILE_FORMAT_VERSION) + ")";
    return false;
  }
  version_ = version;
  return true;
}

uint64_t TraceFileReader::consumed_bytes() const {
  return sizeof(kPreamble) + decoder_.consumed_bytes();
}

TraceFileReader::Result TraceFileReader::Fail(Result result, std::string error) {
  finished_ = true;
  result_ = result;
  error_ = std::move(error);
  return result;
}

bool TraceFileReader::VerifyChunk(std::string_view frame, std::string_view* payload) {
  const size_t prefix = decoder_.last_prefix_bytes();
  const auto damaged = [&](const char* what) {
    const uint64_t at = consumed_bytes() - prefix - frame.size();
    Fail(Result::kError,
         "damaged chunk at byte " + std::to_string(at) + " of " + std::to_string(file_bytes_) +
             " (chunk " + std::to_string(chunks_ + 1) + ", " +
             std::to_string(prefix + frame.size()) + " bytes): " + what + "; read up to there");
    return false;
  };
  const size_t size = frame.size();
  if (size < kChecksumField || frame[size - kChecksumField] != kChecksumTag) {
    return damaged("it has no checksum");
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= uint32_t{static_cast<unsigned char>(frame[size - 4 + i])} << (8 * i);
  }
  // The prefix's bytes lie just before the frame in the decoder's buffer.
  const std::string_view covered(frame.data() - prefix, prefix + size - kChecksumField);
  if (Crc32(covered) != stored) return damaged("its checksum does not match its bytes");
  *payload = frame.substr(0, size - kChecksumField);
  return true;
}

TraceFileReader::Result TraceFileReader::NextView(v1::TraceChunk* chunk, bool* is_wire,
                                                  uint32_t* stream_id,
                                                  std::string_view* wire_frame) {
  if (finished_) return result_;
  if (!error_.empty()) return Result::kError;
  if (is_wire != nullptr) *is_wire = false;
  for (;;) {
    std::string_view frame;
    switch (decoder_.Next(&frame)) {
      case FrameDecoder::Status::kFrame: {
        const uint64_t at = consumed_bytes() - decoder_.last_prefix_bytes() - frame.size();
        if (ended_) {
          return Fail(Result::kError, "damaged file: bytes follow its end record, from byte " +
                                          std::to_string(at) + " of " +
                                          std::to_string(file_bytes_));
        }
        if (frame.empty()) {
          // No writer makes an empty chunk; zeros are what a crash or a copy pads files with.
          return Fail(Result::kError,
                      "damaged file at byte " + std::to_string(at) + " of " +
                          std::to_string(file_bytes_) +
                          ": zero bytes where a chunk should begin (padded or overwritten "
                          "from there); read up to there");
        }
        std::string_view payload = frame;
        if (version_ >= 2 && !VerifyChunk(frame, &payload)) return result_;
        ++chunks_;
        if (is_wire != nullptr && ParseWireFrameChunk(payload, stream_id, wire_frame)) {
          *is_wire = true;
          return Result::kChunk;
        }
        if (!chunk->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
          return Fail(Result::kError, "damaged chunk at byte " + std::to_string(at) + " of " +
                                          std::to_string(file_bytes_) +
                                          ": not a TraceChunk; read up to there");
        }
        if (!chunk->has_file_end()) return Result::kChunk;
        if (chunk->file_end().bytes_before() != at) {
          return Fail(Result::kError,
                      "damaged file: its end record at byte " + std::to_string(at) + " says " +
                          std::to_string(chunk->file_end().bytes_before()) +
                          " bytes came before it: whole chunks are missing or repeated");
        }
        ended_ = true;
        continue;  // the FileEnd is the reader's business, not its callers'
      }
      case FrameDecoder::Status::kError:
        return Fail(Result::kError, "damaged file at byte " + std::to_string(consumed_bytes()) +
                                        " of " + std::to_string(file_bytes_) + ": " +
                                        decoder_.error() + "; read up to there");
      case FrameDecoder::Status::kNeedMore:
        break;
    }
    if (eof_) {
      if (decoder_.pending_bytes() != 0) {
        return Fail(Result::kTruncated, "the file ends inside a chunk after " +
                                            std::to_string(consumed_bytes()) + " of " +
                                            std::to_string(file_bytes_) + " bytes");
      }
      if (version_ >= 2 && !ended_) {
        return Fail(Result::kTruncated,
                    "the file ends after " + std::to_string(consumed_bytes()) +
                        " bytes, at a chunk boundary, without its end record (its writer "
                        "stopped before closing it, or the copy is incomplete)");
      }
      finished_ = true;
      result_ = Result::kEnd;
      return result_;
    }
    char block[1 << 16];
    const size_t got = fread(block, 1, sizeof(block), file_);
    if (got == 0) {
      if (ferror(file_)) return Fail(Result::kError, std::string("read error: ") + strerror(errno));
      eof_ = true;
    }
    decoder_.Append(block, got);
  }
}

}  // namespace cumemtrace

// libFuzzer target for what the collector reads from a traced process's shared ring when its
// stream ends: SharedRingReader over a sealed memfd whose every byte the process wrote, read
// at once or in the slices CollectorServer reads it in.
//
// Beyond "no crash, no hang": every frame made must parse back (one bad record never spoils
// the batch it would have joined), the frames are numbered on from the sequence given, each
// record counted is an event in them, and no more records are counted than the ring can hold.
//
// Input: the position of the last frame (8 bytes), the drops it reported (8), how to read
// (1: even = at once, odd = in slices of no time at all), then the ring's first bytes: its
// header and two API table entries (384 bytes), then its 4096-byte data area.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collector/cli/shared_ring_reader.h"
#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"

namespace {

using namespace cumemtrace;
namespace ring = v1::ring;

constexpr uint64_t kCapacity = 4096;
constexpr size_t kHeadBytes = ring::kApiTableOffset + 2 * sizeof(ring::ApiEntry);
constexpr uint64_t kSequence = 7;

uint64_t U64(const uint8_t* p) {
  uint64_t v = 0;
  memcpy(&v, p, sizeof(v));
  return v;
}

// A sealed memory file holding the ring as the input gives it, or -1.
int MakeRing(const uint8_t* head, size_t head_size, const uint8_t* data, size_t data_size) {
  const int fd = memfd_create("ring-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(ring::kHeaderBytes + kCapacity)) != 0 ||
      pwrite(fd, head, head_size, 0) != static_cast<ssize_t>(head_size) ||
      pwrite(fd, data, data_size, ring::kHeaderBytes) != static_cast<ssize_t>(data_size) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  if (size < 17) return 0;
  const uint64_t position = U64(input);
  const uint64_t reported_drops = U64(input + 8);
  const bool slices = (input[16] & 1) != 0;
  const uint8_t* rest = input + 17;
  const size_t rest_size = size - 17;
  const size_t head_size = std::min(rest_size, kHeadBytes);
  const size_t data_size = std::min<size_t>(rest_size - head_size, kCapacity);
  const int fd = MakeRing(rest, head_size, rest + head_size, data_size);
  if (fd < 0) abort();  // the machine, not the input

  SharedRingReader reader;
  v1::SharedRing announced;
  announced.set_layout_version(ring::kLayoutVersion);
  announced.set_capacity(kCapacity);
  std::string error;
  if (!reader.Adopt(fd, announced, &error)) abort();  // a well-made memfd is always adopted

  std::vector<std::string> frames;
  SharedRingReader::Recovered recovered;
  if (slices) {
    reader.StartRecovery(position, reported_drops, kSequence);
    // Every slice reads something: never more slices than 8-byte steps in the ring.
    uint64_t calls = 0;
    while (!reader.ContinueRecovery(0, &frames)) {
      if (++calls > kCapacity / 8) abort();
    }
    recovered = reader.recovered();
  } else {
    recovered = reader.Recover(position, reported_drops, kSequence, &frames);
  }
  if (reader.recovering()) abort();

  // The smallest record that makes an event is a TorchRecord.
  if (recovered.records > kCapacity / sizeof(ring::TorchRecord)) abort();
  uint64_t events = 0;
  uint64_t drops = 0;
  uint64_t sequence = kSequence;
  for (const std::string& frame : frames) {
    v1::StreamMessage message;
    if (!message.ParseFromString(frame) || !message.has_batch()) abort();
    if (message.batch().sequence() != sequence++) abort();
    for (const v1::Event& event : message.batch().events()) {
      if (event.has_dropped()) {
        drops += event.dropped().count();
      } else if (!event.has_interned_string()) {
        ++events;
      }
    }
  }
  if (events != recovered.records || drops != recovered.drops) abort();
  return 0;
}

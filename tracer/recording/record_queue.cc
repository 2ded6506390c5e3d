#include "tracer/recording/record_queue.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/descriptors.h"
#include "tracer/recording/nvtx_domain.h"

namespace cumemtrace::tracer {
namespace {

namespace ring = v1::ring;

// Every field of a HostRecord crosses the ring (WriteLocked, TakeAll) and is named in
// shared_ring.h, which the collector reads: a new field must be added to all three.
static_assert(sizeof(HostRecord) == 280, "HostRecord changed: carry the field through the ring");
static_assert(
    static_cast<uint8_t>(HostRecord::Type::kCorrelation) == ring::kCorrelation &&
        static_cast<uint8_t>(HostRecord::Type::kMemory) == ring::kMemory &&
        static_cast<uint8_t>(HostRecord::Type::kNvtx) == ring::kNvtx &&
        static_cast<uint8_t>(HostRecord::Type::kFailedAllocation) == ring::kFailedAllocation &&
        static_cast<uint8_t>(HostRecord::Type::kThreadName) == ring::kThreadName &&
        static_cast<uint8_t>(HostRecord::Type::kDeviceSeen) == ring::kDeviceSeen &&
        static_cast<uint8_t>(HostRecord::Type::kProcessExit) == ring::kProcessExit &&
        static_cast<uint8_t>(HostRecord::Type::kTorchAllocator) == ring::kTorchAllocator &&
        static_cast<uint8_t>(HostRecord::Type::kTorchBridgeState) == ring::kTorchBridgeState &&
        static_cast<uint8_t>(HostRecord::Type::kLaunch) == ring::kLaunch &&
        static_cast<uint8_t>(HostRecord::Type::kTensorCategory) == ring::kTensorCategory &&
        static_cast<uint8_t>(HostRecord::Type::kAttributionName) == ring::kAttributionName,
    "HostRecord types and ring record types differ");
static_assert(static_cast<uint8_t>(HostRecord::Type::kAttributionName) < ring::kTorchEvent,
              "HostRecord types reach the numbers of the ring's own records");

constexpr uint64_t kAlign = 8;
// Kept free for PushPastCapacity (the exit record) and the padding before it.
constexpr uint64_t kExitReserve = 2 * sizeof(ring::Record) + 4096;

uint64_t Padded(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

uint64_t Load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void Store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// The lines the next record will take, asked for now. The ring is far larger than the
// caches, so each record's lines are cold, and the next push's lock waits until this
// record's stores have their lines: measured in PyTorch programs, a push took 170-310 ns
// against 30 in the benchmark, where the ring stays cached. Asking ahead hides that behind
// the program's own work between two records.
void PrefetchForWrite(unsigned char* data, uint64_t ring_bytes, uint64_t next) {
  constexpr uint64_t kAhead = 256;  // a tensor's record (96 bytes) and the next one or two
  for (uint64_t line = 0; line < kAhead; line += 64) {
    const unsigned char* at = data + (next + line) % ring_bytes;
#if defined(__x86_64__)
    asm volatile("prefetchw %0" : : "m"(*at));  // a no-op where the CPU lacks it
#else
    __builtin_prefetch(at, 1, 3);
#endif
  }
}

}  // namespace

void RecordQueue::PopulateAhead() {
  // Far enough ahead for the busiest programs measured between two drains (10 ms).
  constexpr uint64_t kPopulateAhead = 8u << 20;
  if (header_ == nullptr || populated_ >= ring_bytes_) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t want = std::min(ring_bytes_, Load(&header_->write_position) + kPopulateAhead);
  want = std::min(ring_bytes_, (want + page - 1) / page * page);
  if (want <= populated_) return;
  // Only the page tables change, never a byte (Linux 5.14 and later); where the kernel
  // refuses it, pages are made at their first use, as before.
  if (madvise(data_ + populated_, want - populated_, MADV_POPULATE_WRITE) != 0) {
    populated_ = ring_bytes_;
    return;
  }
  populated_ = want;
}

uint64_t RecordQueue::RingBytesFor(size_t capacity_events) {
  const uint64_t wanted = std::clamp<uint64_t>(uint64_t{capacity_events} * 128, 64u << 10,
                                               32u << 20);
  uint64_t bytes = 64u << 10;
  while (bytes < wanted) bytes <<= 1;
  return bytes;
}

RecordQueue::RecordQueue(size_t capacity_events)
    : capacity_events_(capacity_events),
      ring_bytes_(RingBytesFor(capacity_events)),
      // A record never takes more than an eighth of the ring (a 40,000-character NVTX
      // message still fits whole in the default 32 MiB ring).
      max_text_bytes_(ring_bytes_ / 8 - sizeof(ring::Record)) {}

int RecordQueue::Create(bool shared, uint64_t extra_bytes) {
  std::lock_guard<RingLock> lock(lock_);
  if (header_ != nullptr) return -1;
  extra_bytes_ = extra_bytes;
  mapping_bytes_ = ring::kHeaderBytes + ring_bytes_ + extra_bytes;
  void* memory = MAP_FAILED;
  int fd = shared ? memfd_create("cumemtrace-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
  if (fd >= 0) {
    fd = MoveToHighDescriptor(fd);
    // Sealed against shrinking: a collector that maps it can never be handed a SIGBUS.
    if (ftruncate(fd, static_cast<off_t>(mapping_bytes_)) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
      memory = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (memory == MAP_FAILED) {
      close(fd);
      fd = -1;
    }
  }
  if (memory == MAP_FAILED) {
    memory = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
    if (memory == MAP_FAILED) return -1;  // nothing is recorded then (Push refuses)
  }
  shared_ = fd >= 0;
  header_ = new (memory) ring::Header{};
  header_->magic = ring::kMagic;
  header_->layout_version = ring::kLayoutVersion;
  header_->capacity = ring_bytes_;
  data_ = static_cast<unsigned char*>(memory) + ring::kHeaderBytes;
  read_position_ = 0;
  drops_taken_ = 0;
  populated_ = 0;
  return fd;
}

void RecordQueue::CountDropLocked(uint64_t timestamp_ns) {
  // Producers take their time before the lock, so drops arrive out of time order when one
  // is preempted in between: the window is the earliest and the latest of them.
  if (header_->dropped_first_ns == 0 || timestamp_ns < header_->dropped_first_ns) {
    header_->dropped_first_ns = timestamp_ns;
  }
  header_->dropped_last_ns = std::max(header_->dropped_last_ns, timestamp_ns);
  Store(&header_->dropped_total, header_->dropped_total + 1);
}

unsigned char* RecordQueue::ReserveLocked(uint64_t size, uint64_t reserve, uint64_t* end) {
  const uint64_t write = header_->write_position;
  const uint64_t offset = write % ring_bytes_;
  // A record never wraps: the end of the area is padded and it starts again at 0.
  const uint64_t padding = offset + size > ring_bytes_ ? ring_bytes_ - offset : 0;
  const uint64_t used = write - Load(&header_->freed_position);
  if (used + padding + size + reserve > ring_bytes_) return nullptr;
  if (padding > 0) {
    auto* pad = reinterpret_cast<ring::Record*>(data_ + offset);
    pad->size = static_cast<uint32_t>(padding);
    pad->type = ring::kPadding;
  }
  *end = write + padding + size;
  return data_ + (write + padding) % ring_bytes_;
}

void RecordQueue::PublishLocked(uint64_t end) {
  // Published last: the collector never reads a record that is not whole.
  Store(&header_->write_position, end);
  PrefetchForWrite(data_, ring_bytes_, end);
}

bool RecordQueue::WriteLocked(const HostRecord& record, uint64_t reserve) {
  const uint64_t text = std::min<uint64_t>(record.text.size(), max_text_bytes_);
  const uint64_t caller = std::min<uint64_t>(record.caller.size(), 1024);
  const uint64_t domain =
      record.domain != nullptr ? std::min<uint64_t>(record.domain->name.size(), 1024) : 0;
  // The bridge's state is sent once per process: serialized here, under the lock, is fine.
  std::string bridge_state;
  if (record.type == HostRecord::Type::kTorchBridgeState && record.torch_bridge_state != nullptr) {
    bridge_state = record.torch_bridge_state->SerializeAsString();
  }
  const uint64_t payload = record.type == HostRecord::Type::kLaunch
                               ? sizeof(uint64_t)
                               : std::min<uint64_t>(bridge_state.size(), max_text_bytes_);
  // A stack follows the type's payload (shared_ring.h kFlagStack).
  const uint64_t stack = record.stack != nullptr ? uint64_t{record.stack_words} * 8 : 0;
  const uint64_t size = Padded(sizeof(ring::Record) + text + caller + domain + payload + stack);
  uint64_t end = 0;
  unsigned char* at = ReserveLocked(size, reserve, &end);
  if (at == nullptr) return false;
  // Written in place (8-aligned, never wrapping): one pass over the record's bytes.
  auto& r = *reinterpret_cast<ring::Record*>(at);
  r.size = static_cast<uint32_t>(size);
  r.type = static_cast<uint8_t>(record.type);
  r.nvtx_operation = record.nvtx_operation;
  r.api = record.api;
  r.thread_id = record.thread_id;
  r.correlation_id = record.correlation_id;
  r.timestamp_ns = record.timestamp_ns;
  r.device = record.device;
  r.category = record.category;
  r.color = record.color;
  r.stream_id = record.stream_id;
  r.range_id = record.range_id;
  r.address = record.address;
  r.bytes = record.bytes;
  r.device_free_bytes = record.device_free_bytes;
  r.device_total_bytes = record.device_total_bytes;
  r.domain_handle = reinterpret_cast<uintptr_t>(record.domain);
  r.error_code = record.error_code;
  r.release = record.release ? 1 : 0;
  r.is_async = record.is_async ? 1 : 0;
  r.memory_kind = record.memory_kind;
  r.flags = stack > 0 ? ring::kFlagStack : 0;
  r.text_bytes = static_cast<uint32_t>(text);
  r.caller_bytes = static_cast<uint32_t>(caller);
  r.domain_bytes = static_cast<uint32_t>(domain);
  r.payload_bytes = static_cast<uint32_t>(payload + stack);
  unsigned char* strings = at + sizeof(ring::Record);
  memcpy(strings, record.text.data(), text);
  memcpy(strings + text, record.caller.data(), caller);
  if (domain > 0) memcpy(strings + text + caller, record.domain->name.data(), domain);
  unsigned char* payload_at = strings + text + caller + domain;
  if (record.type == HostRecord::Type::kLaunch) {
    const uint64_t key = reinterpret_cast<uintptr_t>(record.symbol);
    memcpy(payload_at, &key, sizeof(key));
  } else if (payload > 0) {
    memcpy(payload_at, bridge_state.data(), payload);
  }
  if (stack > 0) memcpy(payload_at + payload, record.stack, stack);
  PublishLocked(end);
  return true;
}

bool RecordQueue::PushTorchRecord(ring::TorchRecord& r, const ring::TorchAttribution* attribution,
                                  const uint64_t* stack, uint32_t stack_words) {
  const uint64_t stack_bytes = stack != nullptr ? uint64_t{stack_words} * 8 : 0;
  const uint64_t attribution_bytes = attribution != nullptr ? sizeof(*attribution) : 0;
  r.size = static_cast<uint32_t>(Padded(sizeof(r) + attribution_bytes + stack_bytes));
  r.type = ring::kTorchEvent;
  r.flags = static_cast<uint8_t>((stack_bytes > 0 ? ring::kFlagStack : 0) |
                                 (attribution != nullptr ? ring::kFlagAttribution : 0));
  std::lock_guard<RingLock> lock(lock_);
  if (header_ == nullptr) return false;
  uint64_t end = 0;
  unsigned char* at = ReserveLocked(r.size, kExitReserve, &end);
  if (at == nullptr) {
    CountDropLocked(r.timestamp_ns);
    return false;
  }
  memcpy(at, &r, sizeof(r));
  if (attribution_bytes > 0) memcpy(at + sizeof(r), attribution, attribution_bytes);
  if (stack_bytes > 0) memcpy(at + sizeof(r) + attribution_bytes, stack, stack_bytes);
  PublishLocked(end);
  return true;
}

namespace {
thread_local bool t_sender_thread = false;

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is 32 bits");
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}
}  // namespace

void RecordQueue::MarkSenderThread() { t_sender_thread = true; }

void RecordQueue::set_wait_when_full(bool on) {
  wait_when_full_.store(on);
  if (!on) WakeRoomWaiters();  // they drop now
}

void RecordQueue::WakeRoomWaiters() {
  room_seq_.fetch_add(1);
  if (room_waiters_.load() > 0) Futex(&room_seq_, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr);
}

bool RecordQueue::ShouldWaitLocked(uint64_t* since_ns, uint64_t* beats) {
  if (!wait_when_full_.load(std::memory_order_relaxed) || t_sender_thread) return false;
  const uint64_t now = MonotonicNs();
  const uint64_t seen = sender_beats_.load(std::memory_order_relaxed);
  if (*since_ns == 0 || seen != *beats) {
    *since_ns = now;
    *beats = seen;
    return true;
  }
  if (now - *since_ns < sender_stall_ns_) return true;
  waits_given_up_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void RecordQueue::WaitForRoom(uint32_t seq) {
  room_waiters_.fetch_add(1);
  // The sender frees a frame's records as soon as the kernel has its bytes: often within
  // microseconds of a full ring.
  for (int spins = 0; spins < 200 && room_seq_.load() == seq; ++spins) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  // Bounded, so that a change the wake missed (the option turned off, a stalled sender) is
  // seen within 1 ms.
  const timespec timeout{0, 1'000'000};
  if (room_seq_.load() == seq) Futex(&room_seq_, FUTEX_WAIT_PRIVATE, seq, &timeout);
  room_waiters_.fetch_sub(1);
}

bool RecordQueue::Push(const HostRecord& record) {
  // Refused rather than written without its payload: PushTorchRecord is its writer.
  if (record.type == HostRecord::Type::kTorchAllocator) return false;
  uint64_t since_ns = 0;
  uint64_t beats = 0;
  for (bool waited = false;; waited = true) {
    // Read before the attempt: a Free after it moves it, and the wait below ends at once.
    const uint32_t seq = room_seq_.load();
    {
      std::lock_guard<RingLock> lock(lock_);
      if (header_ == nullptr) return false;
      if (WriteLocked(record, kExitReserve)) {
        if (waited) waited_pushes_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (!ShouldWaitLocked(&since_ns, &beats)) {
        CountDropLocked(record.timestamp_ns);
        return false;
      }
    }
    WaitForRoom(seq);
  }
}

void RecordQueue::PushPastCapacity(const HostRecord& record) {
  std::lock_guard<RingLock> lock(lock_);
  if (header_ == nullptr) return;
  if (!WriteLocked(record, 0)) CountDropLocked(record.timestamp_ns);
}

void RecordQueue::TakeStack(const unsigned char* words, size_t count, std::vector<HostRecord>* out,
                            std::vector<TakenStack>* stacks) {
  stacks->push_back({out->size() - 1, taken_stack_words_.size()});
  taken_stack_words_.resize(taken_stack_words_.size() + count);
  memcpy(&taken_stack_words_[stacks->back().offset], words, count * 8);
  out->back().stack_words = static_cast<uint32_t>(count);
}

void RecordQueue::ReadTorchRecord(const unsigned char* at, uint32_t size,
                                  std::vector<HostRecord>* out, std::vector<TakenStack>* stacks) {
  ring::TorchRecord r;
  memcpy(&r, at, sizeof(r));
  HostRecord& record = out->emplace_back();
  record.type = HostRecord::Type::kTorchAllocator;
  record.thread_id = r.thread_id;
  record.timestamp_ns = r.timestamp_ns;
  record.device = r.device;
  record.address = r.address;
  record.bytes = r.requested_bytes;
  record.torch.action = r.action;
  record.torch.stream = r.stream;
  record.torch.sequence = r.sequence;
  record.torch.allocated_total = r.allocated_total;
  record.torch.allocated_current = r.allocated_current;
  record.torch.reserved_current = r.reserved_current;
  record.torch.pool_first = r.pool_first;
  record.torch.pool_second = r.pool_second;
  uint64_t offset = sizeof(r);
  if ((r.flags & ring::kFlagAttribution) != 0 && size >= offset + sizeof(ring::TorchAttribution)) {
    ring::TorchAttribution a;
    memcpy(&a, at + offset, sizeof(a));
    record.torch.module = a.module;
    record.torch.op = a.op;
    record.torch.inner_op = a.inner_op;
    record.torch.autograd_thread = a.autograd_thread;
    record.torch.autograd_sequence = a.autograd_sequence;
    offset += sizeof(a);
  }
  if ((r.flags & ring::kFlagStack) != 0 && size > offset) {
    TakeStack(at + offset, (size - offset) / 8, out, stacks);
  }
}

bool RecordQueue::HasUntaken() const {
  return header_ != nullptr && Load(&header_->write_position) != read_position_;
}

DropWindow RecordQueue::TakeAll(std::vector<HostRecord>* out, std::vector<uint64_t>* ends,
                                uint64_t* dropped_total, size_t max_records) {
  out->clear();
  if (ends != nullptr) ends->clear();
  DropWindow drops;
  uint64_t write = 0;
  {
    std::lock_guard<RingLock> lock(lock_);
    if (header_ == nullptr) return drops;
    write = Load(&header_->write_position);
    const uint64_t total = header_->dropped_total;
    drops.count = total - drops_taken_;
    drops.first_ns = header_->dropped_first_ns;
    drops.last_ns = header_->dropped_last_ns;
    header_->dropped_first_ns = 0;
    header_->dropped_last_ns = 0;
    drops_taken_ = total;
  }
  if (dropped_total != nullptr) *dropped_total = drops_taken_;
  // Stacks are copied out of the ring here and the records point into this buffer once it
  // has stopped growing.
  taken_stack_words_.clear();
  std::vector<TakenStack> stacks;
  // Only this thread reads, and writers never touch [read_position_, write): no lock. The
  // ring is memory the program can write (a stray pointer, a hostile library), so a size is
  // believed only where a record can be, as the collector's recovery does: a size of 0 kept
  // this loop at one place forever, and a size past the write position or the data's end
  // read beyond them. Where no record can start, reading resumes at the next lap (a record
  // never wraps, so every lap begins with one) or at the write position.
  while (read_position_ < write && out->size() < max_records) {
    const uint64_t offset = read_position_ % ring_bytes_;
    const uint64_t room = ring_bytes_ - offset;
    const uint64_t left = write - read_position_;
    const unsigned char* at = data_ + offset;
    uint32_t size = 0;
    if (read_position_ % kAlign == 0 && room >= kAlign) memcpy(&size, at, sizeof(size));
    if (size < kAlign || size % kAlign != 0 || size > room || size > left) {
      const uint64_t skip = std::min(room, left);
      read_position_ += skip;
      damaged_bytes_.fetch_add(skip, std::memory_order_relaxed);
      continue;
    }
    const uint8_t type = at[offsetof(ring::Record, type)];
    if (type == ring::kPadding) {  // may be all that is left
      read_position_ += size;
      continue;
    }
    if (type == ring::kTorchEvent) {
      read_position_ += size;
      if (size < sizeof(ring::TorchRecord)) {
        damaged_records_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ReadTorchRecord(at, size, out, &stacks);
      if (ends != nullptr) ends->push_back(read_position_);
      continue;
    }
    read_position_ += size;
    ring::Record r;
    if (size < sizeof(r)) {
      damaged_records_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    memcpy(&r, at, sizeof(r));
    if (uint64_t{r.text_bytes} + r.caller_bytes + r.domain_bytes + r.payload_bytes >
        size - sizeof(r)) {
      damaged_records_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    HostRecord& record = out->emplace_back();
    record.type = static_cast<HostRecord::Type>(r.type);
    record.nvtx_operation = r.nvtx_operation;
    record.api = r.api;
    record.thread_id = r.thread_id;
    record.correlation_id = r.correlation_id;
    record.timestamp_ns = r.timestamp_ns;
    record.device = r.device;
    record.category = r.category;
    record.color = r.color;
    record.stream_id = r.stream_id;
    record.range_id = r.range_id;
    record.address = r.address;
    record.bytes = r.bytes;
    record.device_free_bytes = r.device_free_bytes;
    record.device_total_bytes = r.device_total_bytes;
    // The program could have written any value here: only a domain the tracer made is used.
    const auto* domain =
        reinterpret_cast<const NvtxDomain*>(static_cast<uintptr_t>(r.domain_handle));
    record.domain = IsKnownNvtxDomain(domain) ? domain : nullptr;
    record.error_code = r.error_code;
    record.release = r.release != 0;
    record.is_async = r.is_async != 0;
    record.memory_kind = r.memory_kind;
    const char* strings = reinterpret_cast<const char*>(at + sizeof(r));
    record.text.assign(strings, r.text_bytes);
    record.caller.assign(strings + r.text_bytes, r.caller_bytes);
    const char* payload = strings + r.text_bytes + r.caller_bytes + r.domain_bytes;
    if (record.type == HostRecord::Type::kLaunch && r.payload_bytes >= sizeof(uint64_t)) {
      uint64_t key = 0;
      memcpy(&key, payload, sizeof(key));
      record.symbol = reinterpret_cast<const char*>(static_cast<uintptr_t>(key));
    } else if (record.type == HostRecord::Type::kTorchBridgeState) {
      // A copy the translator owns and deletes, as it did the hook's.
      record.torch_bridge_state = new v1::TorchBridgeState();
      record.torch_bridge_state->ParseFromArray(payload, static_cast<int>(r.payload_bytes));
    }
    if ((r.flags & ring::kFlagStack) != 0 && r.payload_bytes > 0 && r.payload_bytes % 8 == 0) {
      TakeStack(reinterpret_cast<const unsigned char*>(payload), r.payload_bytes / 8, out, &stacks);
    }
    if (ends != nullptr) ends->push_back(read_position_);
  }
  for (const TakenStack& taken : stacks) {
    (*out)[taken.record].stack = &taken_stack_words_[taken.offset];
  }
  return drops;
}

void RecordQueue::Free(uint64_t position) {
  if (header_ == nullptr) return;
  if (position > Load(&header_->freed_position) && position <= read_position_) {
    Store(&header_->freed_position, position);
    WakeRoomWaiters();
  }
}

void RecordQueue::ResetInChildAfterFork() {
  // Held by the forking thread (LockBeforeFork), which is the child's only thread.
  lock_.Reset();
  // Unmapped without a write: the parent's ring and its positions stay the parent's.
  if (header_ != nullptr) munmap(header_, mapping_bytes_);
  header_ = nullptr;
  data_ = nullptr;
  shared_ = false;
  read_position_ = 0;
  drops_taken_ = 0;
  // The parent's waiting threads are not in the child: their count is not the child's.
  room_waiters_.store(0);
  t_sender_thread = false;
}

}  // namespace cumemtrace::tracer

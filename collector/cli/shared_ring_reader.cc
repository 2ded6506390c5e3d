#include "collector/cli/shared_ring_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include <google/protobuf/stubs/logging.h>

#include "proto/cumemtrace/v1/shared_ring.h"

namespace cumemtrace {
namespace {

namespace ring = v1::ring;

constexpr uint32_t kFirstRecoveredStringId = 1u << 31;
constexpr int kEventsPerBatch = 4096;

uint64_t Load(const void* p) {
  return __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Records read between two looks at the clock.
constexpr int kRecordsPerClockCheck = 64;

// Builds the recovered batches.
class BatchBuilder {
 public:
  explicit BatchBuilder(uint64_t sequence) : sequence_(sequence) {}

  uint32_t Intern(std::string_view value) {
    if (value.empty()) return 0;
    auto [it, inserted] = ids_.try_emplace(std::string(value), next_id_);
    if (inserted) {
      ++next_id_;
      v1::InternedString* s = Batch()->add_events()->mutable_interned_string();
      s->set_id(it->second);
      s->set_value(it->first);
    }
    return it->second;
  }
  v1::Event* Add(uint64_t timestamp_ns) {
    v1::Event* event = Batch()->add_events();
    event->set_timestamp_ns(timestamp_ns);
    return event;
  }
  // Ends a batch when it is full (only between records: a string defined in a batch is
  // used by the same record's event, which follows it in that batch or the next).
  void MaybeFinish(uint64_t position, uint64_t dropped) {
    if (message_.batch().events_size() >= kEventsPerBatch) Finish(position, dropped);
  }
  void Finish(uint64_t position, uint64_t dropped) {
    if (message_.batch().events_size() == 0) return;
    v1::EventBatch* batch = message_.mutable_batch();
    batch->set_sequence(sequence_++);
    batch->set_ring_position(position);
    batch->set_ring_dropped(dropped);
    frames_.push_back(message_.SerializeAsString());
    message_.Clear();
  }
  // The frames finished so far, handed over.
  void TakeFrames(std::vector<std::string>* frames) {
    for (std::string& frame : frames_) frames->push_back(std::move(frame));
    frames_.clear();
  }

 private:
  v1::EventBatch* Batch() { return message_.mutable_batch(); }

  v1::StreamMessage message_;
  uint64_t sequence_;
  std::vector<std::string> frames_;
  std::unordered_map<std::string, uint32_t> ids_;
  uint32_t next_id_ = kFirstRecoveredStringId;
};


std::string DriverErrorName(int code) {
  if (code == 2) return "CUDA_ERROR_OUT_OF_MEMORY";
  return "CUresult " + std::to_string(code);
}

}  // namespace

// A ring's PyTorch allocator event as the wire's (layout 1's form is made a TorchRecord first).
void SetTorchEvent(const v1::ring::TorchRecord& r, v1::TorchAllocatorEvent* torch) {
  torch->set_action(static_cast<v1::TorchAllocatorAction>(r.action));
  torch->set_device(r.device);
  torch->set_address(r.address);
  torch->set_requested_bytes(r.requested_bytes);
  torch->set_stream(r.stream);
  torch->set_thread_id(r.thread_id);
  torch->set_sequence(r.sequence);
  torch->set_allocated_bytes_total(r.allocated_total);
  torch->set_allocated_bytes_current(r.allocated_current);
  torch->set_reserved_bytes_current(r.reserved_current);
  torch->set_pool_id_first(r.pool_first);
  torch->set_pool_id_second(r.pool_second);
}

void SetTorchAttribution(const v1::ring::TorchAttribution& a, v1::TorchAllocatorEvent* torch) {
  torch->set_module_id(a.module);
  torch->set_operator_id(a.op);
  torch->set_inner_operator_id(a.inner_op);
  torch->set_autograd_thread(a.autograd_thread);
  torch->set_autograd_sequence(a.autograd_sequence & ~v1::ring::kBackwardBit);
  torch->set_backward((a.autograd_sequence & v1::ring::kBackwardBit) != 0);
}

void SetTorchAutogradNode(const v1::ring::TorchRecord& r, const v1::ring::TorchAttribution& a,
                          v1::TorchAutogradNode* node) {
  node->set_thread_id(r.thread_id);
  node->set_module_id(a.module);
  node->set_operator_id(a.op);
  node->set_inner_operator_id(a.inner_op);
  node->set_autograd_sequence(a.autograd_sequence & ~v1::ring::kBackwardBit);
  node->set_autograd_thread(a.autograd_thread);
}

// One recovery in progress: the ring mapped, the span to read, and what was made so far.
class SharedRingReader::Walk {
 public:
  Walk(int fd, uint64_t capacity, uint64_t position, uint64_t reported_drops, uint64_t sequence,
       Recovered* recovered)
      : capacity_(capacity), out_(sequence), recovered_(recovered) {
    bytes_ = ring::kHeaderBytes + capacity;
    void* view = mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (view == MAP_FAILED) {
      recovered_->damage = "cannot map it: " + std::string(strerror(errno));
      return;
    }
    view_ = static_cast<const unsigned char*>(view);
    data_ = view_ + ring::kHeaderBytes;
    memcpy(&header_, view_, sizeof(header_));
    if (header_.magic != ring::kMagic || header_.layout_version < ring::kOldestLayoutVersion ||
        header_.layout_version > ring::kLayoutVersion || header_.capacity != capacity) {
      // Not a ring we understand: neither its records nor its counters mean anything.
      Damage("its header is not a ring's of layout " + std::to_string(ring::kOldestLayoutVersion) +
             " to " + std::to_string(ring::kLayoutVersion) + " and " + std::to_string(capacity) +
             " bytes; nothing read from it");
      return;
    }
    const uint32_t count = std::min(header_.api_count, ring::kMaxApis);
    apis_.resize(count);
    if (count > 0) {  // an empty vector's data() may be null, which memcpy must not get
      memcpy(apis_.data(), view_ + ring::kApiTableOffset, count * sizeof(ring::ApiEntry));
    }
    for (ring::ApiEntry& api : apis_) api.name[sizeof(api.name) - 1] = '\0';
    // Each read once: the process may still be changing them.
    end_ = Load(view_ + offsetof(ring::Header, write_position));
    const uint64_t dropped_total = Load(view_ + offsetof(ring::Header, dropped_total));
    dropped_ = reported_drops;
    position_ = end_;
    if (end_ > position) {
      // A frame never reaches past the write position, and the writer never overwrites what
      // the last frame did not carry: more than a ring's worth behind means the ring lies.
      // Whatever it says, at most one ring's worth is read.
      position_ = end_ - position > capacity ? end_ - capacity : position;
      if (end_ - position > capacity) {
        Damage("its write position is more than the ring's size past the last frame's");
      }
    } else if (end_ < position) {
      Damage("its write position is behind the last frame's");
    }
    if (dropped_total > reported_drops) {
      // Each drop is counted under the tracer's lock, which takes far longer than a
      // nanosecond: more drops than nanoseconds since the machine booted is a lie.
      const uint64_t drops = dropped_total - reported_drops;
      if (drops > static_cast<uint64_t>(ClockNs(CLOCK_BOOTTIME))) {
        Damage("its count of dropped records (" + std::to_string(dropped_total) +
               ") is more than the records a process could have dropped; not believed");
      } else {
        drops_ = drops;
        dropped_ = dropped_total;
      }
    }
  }
  ~Walk() {
    if (view_ != nullptr) munmap(const_cast<unsigned char*>(view_), bytes_);
  }
  Walk(const Walk&) = delete;
  Walk& operator=(const Walk&) = delete;

  // Reads until the end or `deadline_ns` (CLOCK_MONOTONIC; < 0: none). True at the end.
  bool Step(int64_t deadline_ns) {
    for (int n = 1; position_ < end_; ++n) {
      if (deadline_ns >= 0 && n % kRecordsPerClockCheck == 0 &&
          ClockNs(CLOCK_MONOTONIC) >= deadline_ns) {
        return false;
      }
      const uint64_t offset = position_ % capacity_;
      const uint64_t room = capacity_ - offset;  // to the end of the data area, >= 1
      const uint64_t left = end_ - position_;
      uint32_t size = 0;
      bool whole = position_ % 8 == 0 && room >= 8;
      if (whole) {
        memcpy(&size, data_ + offset, sizeof(size));
        whole = size >= 8 && size % 8 == 0 && size <= room && size <= left;
      }
      if (!whole) {
        // No record can be read here, nor is it known where the next one starts, except at
        // the start of the data area: a record never wraps (a padding record fills the end
        // instead), so every lap begins with one.
        ++damaged_spots_;
        const uint64_t skip = std::min(room, left);
        recovered_->skipped_bytes += skip;
        position_ += skip;  // no overflow: skip <= end_ - position_
        continue;
      }
      position_ += size;
      if (data_[offset + offsetof(ring::Record, type)] == ring::kPadding) continue;
      // Decoded from a copy: the fields checked are the fields used.
      record_.resize(size);
      memcpy(record_.data(), data_ + offset, size);
      Decode();
      out_.MaybeFinish(position_, dropped_);
    }
    if (drops_ > 0) {
      recovered_->drops = drops_;
      uint64_t first = header_.dropped_first_ns;
      uint64_t last = header_.dropped_last_ns;
      if (first > last) first = last = 0;  // not a window: unknown
      v1::DroppedRecords* dropped = out_.Add(last)->mutable_dropped();
      dropped->set_source(v1::DROP_SOURCE_TRACER_QUEUE);
      dropped->set_count(drops_);
      dropped->set_first_ns(first);
      dropped->set_last_ns(last);
      drops_ = 0;
    }
    out_.Finish(position_, dropped_);
    if (damaged_spots_ > 0) {
      Damage(std::to_string(damaged_spots_) + " place(s) where no record could start (" +
             std::to_string(recovered_->skipped_bytes) + " bytes skipped)");
    }
    if (recovered_->skipped_records > 0) {
      Damage(std::to_string(recovered_->skipped_records) +
             " record(s) that could not be decoded, left out");
    }
    return true;
  }

  void TakeFrames(std::vector<std::string>* frames) { out_.TakeFrames(frames); }

 private:
  void Damage(const std::string& what) {
    if (!recovered_->damage.empty()) recovered_->damage += "; ";
    recovered_->damage += what;
  }

  std::string_view ApiName(uint16_t index) const {
    return index < apis_.size() ? std::string_view(apis_[index].name) : std::string_view("unknown");
  }

  // The record in record_: an event, none (a record only the live tracer uses), or left out
  // as damaged. Nothing is added to the batch before the record is known to be whole.
  void Decode() {
    const unsigned char* at = record_.data();
    const uint64_t size = record_.size();
    const uint8_t type = at[offsetof(ring::Record, type)];
    if (type == ring::kTorchEvent) {
      if (size < sizeof(ring::TorchRecord)) return Skip();
      ring::TorchRecord r;
      memcpy(&r, at, sizeof(r));
      // Layout 3 on: an attribution follows (a flag bit of an older layout means nothing).
      const bool attributed =
          header_.layout_version >= 3 && (r.flags & ring::kFlagAttribution) != 0;
      ring::TorchAttribution attribution{};
      if (attributed) {
        if (size < sizeof(ring::TorchRecord) + sizeof(attribution)) return Skip();
        memcpy(&attribution, at + sizeof(r), sizeof(attribution));
      }
      if (r.action == v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE) {
        // Layout 4 on, and only with its attribution: a forward op that allocated nothing.
        if (header_.layout_version < 4 || !attributed) return Skip();
        SetTorchAutogradNode(r, attribution,
                             out_.Add(r.timestamp_ns)->mutable_torch_autograd_node());
        ++recovered_->records;
        return;
      }
      v1::TorchAllocatorEvent* torch = out_.Add(r.timestamp_ns)->mutable_torch_allocator();
      SetTorchEvent(r, torch);
      if (attributed) SetTorchAttribution(attribution, torch);
      ++recovered_->records;
      return;
    }
    if (size < sizeof(ring::Record)) return Skip();
    ring::Record r;
    memcpy(&r, at, sizeof(r));
    const uint64_t strings =
        uint64_t{r.text_bytes} + r.caller_bytes + r.domain_bytes + r.payload_bytes;
    if (strings > size - sizeof(ring::Record)) return Skip();
    const char* text_at = reinterpret_cast<const char*>(at + sizeof(r));
    const std::string_view text(text_at, r.text_bytes);
    const std::string_view caller(text_at + r.text_bytes, r.caller_bytes);
    const std::string_view domain(text_at + r.text_bytes + r.caller_bytes, r.domain_bytes);
    const char* payload = text_at + r.text_bytes + r.caller_bytes + r.domain_bytes;
    switch (r.type) {
      case ring::kNvtx: {
        const uint32_t domain_id = out_.Intern(domain);
        const uint32_t message_id = out_.Intern(text);
        v1::Nvtx* nvtx = out_.Add(r.timestamp_ns)->mutable_nvtx();
        nvtx->set_operation(static_cast<v1::NvtxOperation>(r.nvtx_operation));
        nvtx->set_thread_id(r.thread_id);
        nvtx->set_domain_id(domain_id);
        nvtx->set_message_id(message_id);
        nvtx->set_range_id(r.range_id);
        nvtx->set_category(r.category);
        nvtx->set_color(r.color);
        break;
      }
      case ring::kMemory: {
        // A release names its address; the collector's sweep finds the size, kind and device
        // of the allocation it ends. A cuMemUnmap ends the mapping at its own address only.
        const uint32_t api_id = out_.Intern(ApiName(r.api));
        const uint32_t caller_id = out_.Intern(caller);
        v1::MemoryOp* op = out_.Add(r.timestamp_ns)->mutable_memory();
        op->set_operation(r.release ? v1::MEMORY_OPERATION_RELEASE
                                    : v1::MEMORY_OPERATION_ALLOCATE);
        op->set_address(r.address);
        op->set_bytes(r.release ? 0 : r.bytes);
        op->set_kind(r.release ? v1::MEMORY_KIND_UNKNOWN
                               : static_cast<v1::MemoryKind>(r.memory_kind));
        op->set_device(r.device);
        op->set_stream(r.stream_id);
        op->set_is_async(r.is_async != 0);
        op->set_correlation_id(r.correlation_id);
        op->set_thread_id(r.thread_id);
        op->set_api_name_id(api_id);
        op->set_caller_module_id(caller_id);
        break;
      }
      case ring::kFailedAllocation: {
        const uint32_t api_id = out_.Intern(ApiName(r.api));
        const uint32_t error_id = out_.Intern(DriverErrorName(r.error_code));
        const uint32_t caller_id = out_.Intern(caller);
        v1::FailedAllocation* failed = out_.Add(r.timestamp_ns)->mutable_failed_allocation();
        failed->set_api_name_id(api_id);
        failed->set_requested_bytes(r.bytes);
        failed->set_error_code(r.error_code);
        failed->set_error_name_id(error_id);
        failed->set_device(r.device);
        failed->set_device_free_bytes(r.device_free_bytes);
        failed->set_device_total_bytes(r.device_total_bytes);
        failed->set_thread_id(r.thread_id);
        failed->set_correlation_id(r.correlation_id);
        failed->set_kind(r.api < apis_.size() ? static_cast<v1::MemoryKind>(apis_[r.api].kind)
                                              : v1::MEMORY_KIND_UNKNOWN);
        failed->set_caller_module_id(caller_id);
        break;
      }
      case ring::kThreadName: {
        v1::ThreadName* name = out_.Add(r.timestamp_ns)->mutable_thread_name();
        name->set_thread_id(r.thread_id);
        name->set_name(std::string(text));
        break;
      }
      case ring::kProcessExit:
        out_.Add(r.timestamp_ns)->mutable_process_exit()->set_exit_code(r.error_code);
        break;
      case ring::kTorchAllocator: {  // layout 1's form
        if (r.payload_bytes < sizeof(ring::TorchPayload)) return Skip();
        ring::TorchPayload p;
        memcpy(&p, payload, sizeof(p));
        ring::TorchRecord t{};
        t.action = p.action;
        t.thread_id = r.thread_id;
        t.device = r.device;
        t.address = r.address;
        t.requested_bytes = r.bytes;
        t.stream = p.stream;
        t.sequence = p.sequence;
        t.allocated_total = p.allocated_total;
        t.allocated_current = p.allocated_current;
        t.reserved_current = p.reserved_current;
        t.pool_first = p.pool_first;
        t.pool_second = p.pool_second;
        SetTorchEvent(t, out_.Add(r.timestamp_ns)->mutable_torch_allocator());
        break;
      }
      case ring::kTorchBridgeState: {
        // Parsed before it joins the batch: a state that is not a message (or has a string
        // that is not UTF-8) would make the whole batch unreadable. Quietly: protobuf logs
        // each such string, and a ring can hold 300,000 of them.
        v1::TorchBridgeState state;
        bool parsed = false;
        {
          google::protobuf::LogSilencer quiet;
          parsed = state.ParseFromArray(payload, static_cast<int>(r.payload_bytes));
        }
        if (!parsed) return Skip();
        *out_.Add(r.timestamp_ns)->mutable_torch_bridge() = std::move(state);
        break;
      }
      case ring::kTensorCategory: {
        if (r.category == v1::CATEGORY_UNSPECIFIED ||
            !v1::Category_IsValid(static_cast<int>(r.category))) {
          return Skip();
        }
        v1::TensorCategory* tag = out_.Add(r.timestamp_ns)->mutable_tensor_category();
        tag->set_device(r.device);
        tag->set_address(r.address);
        tag->set_bytes(r.bytes);
        tag->set_category(static_cast<v1::Category>(r.category));
        break;
      }
      case ring::kLaunch: {
        // The name comes with a thread's first launch of it; later ones carry only its key.
        uint64_t key = 0;
        if (r.payload_bytes >= sizeof(key)) memcpy(&key, payload, sizeof(key));
        uint32_t name_id = 0;
        if (!text.empty()) {
          name_id = out_.Intern(text);
          if (key != 0) launch_names_[key] = name_id;
        } else {
          const auto it = launch_names_.find(key);
          name_id = it != launch_names_.end() ? it->second : out_.Intern("?");
        }
        v1::Kernel* kernel = out_.Add(r.timestamp_ns)->mutable_kernel();
        kernel->set_name_id(name_id);
        kernel->set_device(r.device);
        kernel->set_correlation_id(r.correlation_id);
        kernel->set_thread_id(r.thread_id);
        kernel->set_launch_only(true);
        break;
      }
      case ring::kAttributionName: {
        // An id of a kind this reader knows, as the wire's (uint32, from 1); the name is
        // bytes, as the wire's.
        if (header_.layout_version < 3 || r.range_id == 0 || r.range_id > UINT32_MAX ||
            (r.category != v1::ATTRIBUTION_KIND_MODULE &&
             r.category != v1::ATTRIBUTION_KIND_OPERATOR)) {
          return Skip();
        }
        v1::AttributionName* name = out_.Add(r.timestamp_ns)->mutable_attribution_name();
        name->set_kind(static_cast<v1::AttributionKind>(r.category));
        name->set_id(static_cast<uint32_t>(r.range_id));
        name->set_name(std::string(text));
        break;
      }
      case ring::kCorrelation:
      case ring::kDeviceSeen:  // only the live tracer can use them
        return;
      default:  // no record of this layout
        return Skip();
    }
    ++recovered_->records;
  }

  void Skip() { ++recovered_->skipped_records; }

  const uint64_t capacity_;
  size_t bytes_ = 0;
  const unsigned char* view_ = nullptr;
  const unsigned char* data_ = nullptr;
  ring::Header header_{};
  std::vector<ring::ApiEntry> apis_;
  uint64_t position_ = 0;
  uint64_t end_ = 0;
  uint64_t dropped_ = 0;  // the running total of drops believed
  uint64_t drops_ = 0;    // drops to report, once the records are read
  uint64_t damaged_spots_ = 0;
  BatchBuilder out_;
  std::unordered_map<uint64_t, uint32_t> launch_names_;  // kernel name key -> interned id
  std::vector<unsigned char> record_;
  Recovered* recovered_;
};

SharedRingReader::SharedRingReader() = default;

SharedRingReader::~SharedRingReader() {
  walk_.reset();
  if (fd_ >= 0) close(fd_);
}

bool SharedRingReader::Adopt(int fd, const v1::SharedRing& announced, std::string* error) {
  auto refuse = [&](const std::string& why) {
    *error = "shared ring ignored: " + why;
    close(fd);
    return false;
  };
  if (announced.layout_version() < ring::kOldestLayoutVersion ||
      announced.layout_version() > ring::kLayoutVersion) {
    return refuse("layout version " + std::to_string(announced.layout_version()) +
                  " is not one of " + std::to_string(ring::kOldestLayoutVersion) + " to " +
                  std::to_string(ring::kLayoutVersion));
  }
  const uint64_t capacity = announced.capacity();
  if (capacity < 4096 || capacity > ring::kMaxCapacity || (capacity & (capacity - 1)) != 0) {
    return refuse("capacity " + std::to_string(capacity) + " is not a power of two in range");
  }
  // The per-thread buffers after the data area (thread_buffers.h), bounded as the ring is.
  const uint64_t thread_buffer_bytes = announced.thread_buffer_bytes();
  if (thread_buffer_bytes > ring::kMaxCapacity) {
    return refuse("thread buffers of " + std::to_string(thread_buffer_bytes) + " bytes");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse("not a memory file");
  if (static_cast<uint64_t>(st.st_size) != ring::kHeaderBytes + capacity + thread_buffer_bytes) {
    return refuse("its size " + std::to_string(st.st_size) + " does not match the handshake");
  }
  // A file that may shrink under the mapping would raise SIGBUS in the collector.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return refuse("not sealed against shrinking");
  walk_.reset();
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  capacity_ = capacity;
  thread_buffer_bytes_ = thread_buffer_bytes;
  return true;
}

void SharedRingReader::StartRecovery(uint64_t position, uint64_t reported_drops,
                                     uint64_t sequence) {
  recovered_ = Recovered();
  walk_.reset();
  if (fd_ < 0) return;
  walk_ = std::make_unique<Walk>(fd_, capacity_, position, reported_drops, sequence, &recovered_);
}

bool SharedRingReader::ContinueRecovery(int64_t budget_ns, std::vector<std::string>* frames) {
  if (walk_ == nullptr) return true;
  const bool done = walk_->Step(budget_ns < 0 ? -1 : ClockNs(CLOCK_MONOTONIC) + budget_ns);
  walk_->TakeFrames(frames);
  if (done) walk_.reset();
  return done;
}

uint64_t SharedRingReader::thread_buffer_offset() const { return ring::kHeaderBytes + capacity_; }

SharedRingReader::Recovered SharedRingReader::Recover(uint64_t position, uint64_t reported_drops,
                                                      uint64_t sequence,
                                                      std::vector<std::string>* frames) {
  StartRecovery(position, reported_drops, sequence);
  ContinueRecovery(-1, frames);
  return recovered_;
}

}  // namespace cumemtrace

#include "tracer/sources/cupti/cupti_mux.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "tracer/sources/cupti/cupti_session.h"

namespace cumemtrace::tracer {

std::atomic<bool> CuptiMux::client_callbacks_on_{false};
std::atomic<bool> CuptiMux::client_records_on_{false};

namespace {

// Client callbacks running on this thread: an unsubscribe from inside one must not wait for
// itself.
thread_local uint32_t t_client_depth = 0;

struct Extent {
  const uint8_t* data;
  size_t bytes;
};

}  // namespace

// One cuptiSubscribe of the program's. Leaked, never reused: a handle the client keeps after
// unsubscribing (or passes twice) is compared by address and answered with an error.
struct CuptiMux::Client {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::atomic<bool> live{true};
  std::atomic<uint32_t> in_flight{0};  // its callbacks running now, on any thread
};

// ---------------------------------------------------------------------------------------
// Bits

uint32_t CallbackBits::DomainSize(CUpti_CallbackDomain domain) {
  switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API:
      return CUPTI_DRIVER_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      return CUPTI_RUNTIME_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RESOURCE:
      return CUPTI_CBID_RESOURCE_SIZE;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE:
      return CUPTI_CBID_SYNCHRONIZE_SIZE;
    case CUPTI_CB_DOMAIN_NVTX:
      return CUPTI_CBID_NVTX_SIZE;
    case CUPTI_CB_DOMAIN_STATE:
      return CUPTI_CBID_STATE_SIZE;
    default:
      return 0;
  }
}

static_assert(CUPTI_DRIVER_TRACE_CBID_SIZE <= CallbackBits::kMaxCbid, "driver ids outgrew the bits");
static_assert(CUPTI_RUNTIME_TRACE_CBID_SIZE <= CallbackBits::kMaxCbid, "runtime ids outgrew the bits");
static_assert(CUPTI_ACTIVITY_KIND_COUNT <= KindBits::kMaxKind, "activity kinds outgrew the bits");
static_assert(sizeof(CuptiApi::Switches) / sizeof(CuptiApi::Switches[0]) == CuptiMux::kSwitches,
              "one CUPTI entry point per switch");

bool CallbackBits::Valid(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  return domain > CUPTI_CB_DOMAIN_INVALID && domain < CUPTI_CB_DOMAIN_SIZE &&
         cbid < DomainSize(domain);
}

void CallbackBits::Set(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool on) {
  const uint64_t bit = uint64_t{1} << (cbid & 63);
  if (on) {
    words_[domain][cbid >> 6].fetch_or(bit, std::memory_order_relaxed);
  } else {
    words_[domain][cbid >> 6].fetch_and(~bit, std::memory_order_relaxed);
  }
}

void CallbackBits::SetDomain(CUpti_CallbackDomain domain, bool on) {
  const uint32_t size = DomainSize(domain);
  for (uint32_t id = 0; id < size; ++id) Set(domain, id, on);
}

void CallbackBits::ClearAll() {
  for (auto& domain : words_) {
    for (auto& word : domain) word.store(0, std::memory_order_relaxed);
  }
}

bool CallbackBits::Any() const {
  for (const auto& domain : words_) {
    for (const auto& word : domain) {
      if (word.load(std::memory_order_relaxed) != 0) return true;
    }
  }
  return false;
}

void KindBits::Set(uint32_t kind, bool on) {
  if (kind >= kMaxKind) return;
  const uint64_t bit = uint64_t{1} << (kind & 63);
  if (on) {
    words_[kind >> 6].fetch_or(bit, std::memory_order_relaxed);
  } else {
    words_[kind >> 6].fetch_and(~bit, std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------------------
// cumemtrace's side

CuptiMux& CuptiMux::Get() {
  // Leaked on purpose, like the session: CUPTI may call back during exit.
  static CuptiMux* mux = new CuptiMux();
  return *mux;
}

bool CuptiMux::Decide() {
  std::lock_guard<std::mutex> lock(route_mutex_);
  int route = route_.load();
  if (route == kUndecided) {
    const auto share = CuptiSession::Get().hooks().share_with_client;
    route = share != nullptr && share() && installed() ? kShared : kForward;
    route_.store(route, std::memory_order_release);
  }
  return route == kShared;
}

void CuptiMux::Install(const CuptiApi* api, CUpti_SubscriberHandle own) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  api_ = api;
  own_ = own;
}

CUptiResult CuptiMux::EnableOwnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (!CallbackBits::Valid(domain, cbid)) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(control_mutex_);
  own_bits_.Set(domain, cbid, true);
  return Reconcile(domain);
}

CUptiResult CuptiMux::EnableOwnKind(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  CUptiResult result = CUPTI_SUCCESS;
  if (!client_kinds_.Test(kind)) result = api_->ActivityEnable(kind);
  if (result == CUPTI_SUCCESS) own_kinds_.Set(kind, true);
  return result;
}

bool CuptiMux::Dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE ||
      cbid >= CallbackBits::kMaxCbid) {
    return false;
  }
  if (client_bits_.Test(domain, cbid)) {
    Client* client = client_.load(std::memory_order_acquire);
    if (client != nullptr) {
      client->in_flight.fetch_add(1, std::memory_order_acq_rel);
      if (client->live.load(std::memory_order_acquire) && client->callback != nullptr) {
        ++t_client_depth;
        client->callback(client->userdata, domain, cbid, data);
        --t_client_depth;
      }
      client->in_flight.fetch_sub(1, std::memory_order_release);
    }
  }
  return own_bits_.Test(domain, cbid);
}

void CuptiMux::AddCuptiDropped(size_t count) {
  if (count == 0 || !client_kinds_.Any()) return;
  std::lock_guard<std::mutex> lock(pack_mutex_);
  client_dropped_ += count;
}

void CuptiMux::CopyClientRecords(const uint8_t* buffer, size_t valid_size) {
  if (buffer == nullptr || valid_size == 0 || api_ == nullptr) return;
  // The records to copy, with their extent in CUPTI's layout (up to the next record), and
  // what comes before the first record (no header today; copied if CUPTI ever adds one).
  thread_local std::vector<Extent> extents;
  extents.clear();
  uint8_t* data = const_cast<uint8_t*>(buffer);
  CUpti_Activity* record = nullptr;
  const uint8_t* previous = nullptr;
  bool previous_wanted = false;
  size_t header = 0;
  while (api_->ActivityGetNextRecord(data, valid_size, &record) == CUPTI_SUCCESS) {
    const auto* at = reinterpret_cast<const uint8_t*>(record);
    if (previous == nullptr) {
      header = static_cast<size_t>(at - buffer);
    } else if (previous_wanted) {
      extents.push_back(Extent{previous, static_cast<size_t>(at - previous)});
    }
    previous = at;
    previous_wanted = client_wants_.Test(record->kind);
  }
  if (previous != nullptr && previous_wanted) {
    extents.push_back(Extent{previous, static_cast<size_t>(buffer + valid_size - previous)});
  }
  if (extents.empty()) return;

  const auto requested = client_requested_.load(std::memory_order_acquire);
  size_t next = 0;
  while (next < extents.size()) {
    OpenBuffer full;
    bool need_buffer = false;
    {
      std::lock_guard<std::mutex> lock(pack_mutex_);
      if (open_.data == nullptr && !spares_.empty()) {
        open_ = spares_.back();
        spares_.pop_back();
      }
      if (open_.data == nullptr) {
        need_buffer = true;
      } else if (open_.used == 0 && header > open_.size) {
        // Too small even for what precedes CUPTI's records: handed back empty.
        full = open_;
        open_ = OpenBuffer{};
      } else {
        if (open_.used == 0 && header > 0) {
          memcpy(open_.data, buffer, header);
          open_.used = header;
        }
        while (next < extents.size()) {
          const Extent& e = extents[next];
          const bool room = open_.used + e.bytes <= open_.size &&
                            (open_.max_records == 0 || open_.records < open_.max_records);
          if (!room) break;
          memcpy(open_.data + open_.used, e.data, e.bytes);
          open_.used += e.bytes;
          ++open_.records;
          ++next;
        }
        if (next < extents.size()) {
          if (open_.records == 0) {
            ++client_dropped_;  // larger than a whole buffer of the client's: CUPTI drops it too
            ++next;
          } else {
            full = open_;
            open_ = OpenBuffer{};
          }
        }
      }
    }
    if (full.data != nullptr) Complete(full);
    if (!need_buffer) continue;
    OpenBuffer fresh;
    if (requested != nullptr) requested(&fresh.data, &fresh.size, &fresh.max_records);
    std::lock_guard<std::mutex> lock(pack_mutex_);
    if (fresh.data == nullptr || fresh.size <= header) {
      // The client declined (or gave a buffer of size 0): as with CUPTI, these records are
      // dropped and counted for cuptiActivityGetNumDroppedRecords.
      client_dropped_ += extents.size() - next;
      return;
    }
    KeepLocked(fresh);
  }
}

void CuptiMux::Complete(const OpenBuffer& buffer) {
  const auto completed = client_completed_.load(std::memory_order_acquire);
  if (completed != nullptr) completed(nullptr, 0, buffer.data, buffer.size, buffer.used);
}

void CuptiMux::DeliverOpenBuffers(bool spares_too) {
  std::vector<OpenBuffer> ready;
  {
    std::lock_guard<std::mutex> lock(pack_mutex_);
    if (open_.data != nullptr && (open_.records > 0 || spares_too)) {
      ready.push_back(open_);
      open_ = OpenBuffer{};
    }
    if (spares_too) {
      for (const OpenBuffer& spare : spares_) ready.push_back(spare);
      spares_.clear();
    }
  }
  for (const OpenBuffer& buffer : ready) Complete(buffer);
}

void CuptiMux::UpdateFlags() {
  client_callbacks_on_.store(client_.load() != nullptr && client_bits_.Any(),
                             std::memory_order_relaxed);
  client_records_on_.store(client_wants_.Any(), std::memory_order_relaxed);
  bool enabled = client_kinds_.Any();
  for (uint32_t kind = 0; kind < KindBits::kMaxKind && !enabled; ++kind) {
    enabled = context_enables_[kind] > 0;
  }
  client_enabled_.store(enabled, std::memory_order_release);
}

void CuptiMux::EnsureOpenBuffer() {
  const auto requested = client_requested_.load(std::memory_order_acquire);
  if (requested == nullptr || !client_enabled_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(pack_mutex_);
    if (open_.data != nullptr || !spares_.empty()) return;
  }
  OpenBuffer fresh;
  requested(&fresh.data, &fresh.size, &fresh.max_records);
  // A null buffer or one of size 0 is the client declining: the records that come are
  // dropped and counted when they are copied, as today.
  if (fresh.data == nullptr || fresh.size == 0) return;
  std::lock_guard<std::mutex> lock(pack_mutex_);
  KeepLocked(fresh);
}

void CuptiMux::KeepLocked(const OpenBuffer& fresh) {
  if (open_.data == nullptr) {
    open_ = fresh;
  } else {
    spares_.push_back(fresh);  // another thread opened one meanwhile
  }
}

void CuptiMux::ForgetInChildAfterFork() {
  // The client's callbacks and buffers belong to the parent's threads; CUDA cannot be used
  // in this child anyway.
  client_callbacks_on_.store(false);
  client_records_on_.store(false);
  client_.store(nullptr);
  route_.store(kForward);
  new (&route_mutex_) std::mutex();
  new (&control_mutex_) std::mutex();
  new (&pack_mutex_) std::mutex();
  open_ = OpenBuffer{};
  new (&spares_) std::vector<OpenBuffer>();
}

// ---------------------------------------------------------------------------------------
// The client's side

CuptiMux::Client* CuptiMux::Lookup(CUpti_SubscriberHandle handle) const {
  Client* client = client_.load(std::memory_order_acquire);
  // Compared, never dereferenced first: a stale or made-up handle is simply not the client.
  return client != nullptr && reinterpret_cast<CUpti_SubscriberHandle>(client) == handle
             ? client
             : nullptr;
}

CUptiResult CuptiMux::Reconcile(CUpti_CallbackDomain domain) {
  const uint32_t size = CallbackBits::DomainSize(domain);
  uint32_t wanted = 0;
  uint32_t differ = 0;
  for (uint32_t id = 0; id < size; ++id) {
    const bool want = own_bits_.Test(domain, id) || client_bits_.Test(domain, id);
    wanted += want;
    differ += want != real_bits_.Test(domain, id);
  }
  if (differ == 0) return CUPTI_SUCCESS;
  CUptiResult result = CUPTI_SUCCESS;
  if ((wanted == size || wanted == 0) && differ > 1) {
    result = api_->EnableDomain(wanted == size ? 1 : 0, own_, domain);
    if (result == CUPTI_SUCCESS) real_bits_.SetDomain(domain, wanted == size);
    return result;
  }
  for (uint32_t id = 0; id < size; ++id) {
    const bool want = own_bits_.Test(domain, id) || client_bits_.Test(domain, id);
    if (want == real_bits_.Test(domain, id)) continue;
    const CUptiResult r = api_->EnableCallback(want ? 1 : 0, own_, domain, id);
    if (r == CUPTI_SUCCESS) {
      real_bits_.Set(domain, id, want);
    } else if (result == CUPTI_SUCCESS) {
      result = r;
    }
  }
  return result;
}

CUptiResult CuptiMux::Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                void* userdata) {
  if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (client_.load() != nullptr) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  auto* client = new Client();
  client->callback = callback;  // may be null: then never called
  client->userdata = userdata;
  client_.store(client, std::memory_order_release);
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(client);
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::Unsubscribe(CUpti_SubscriberHandle subscriber) {
  Client* client = nullptr;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    client = Lookup(subscriber);
    if (client == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    client->live.store(false, std::memory_order_release);
    client_.store(nullptr, std::memory_order_release);
    client_bits_.ClearAll();
    for (int d = CUPTI_CB_DOMAIN_INVALID + 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
      Reconcile(static_cast<CUpti_CallbackDomain>(d));
    }
    UpdateFlags();
  }
  // As CUPTI: no callback of the subscriber runs after this returns. One running on this
  // thread's own stack (an unsubscribe from inside the callback) is not waited for; one
  // that never returns is waited for at most 2 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (client->in_flight.load(std::memory_order_acquire) > t_client_depth &&
         std::chrono::steady_clock::now() < deadline) {
    sched_yield();
  }
  EndClient(/*flush=*/t_client_depth == 0);
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                     CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (Lookup(subscriber) == nullptr || !CallbackBits::Valid(domain, cbid)) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  client_bits_.Set(domain, cbid, enable != 0);
  const CUptiResult result = Reconcile(domain);
  UpdateFlags();
  return result;
}

CUptiResult CuptiMux::EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                   CUpti_CallbackDomain domain) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (Lookup(subscriber) == nullptr || CallbackBits::DomainSize(domain) == 0) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  client_bits_.SetDomain(domain, enable != 0);
  const CUptiResult result = Reconcile(domain);
  UpdateFlags();
  return result;
}

CUptiResult CuptiMux::EnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (Lookup(subscriber) == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  CUptiResult result = CUPTI_SUCCESS;
  for (int d = CUPTI_CB_DOMAIN_INVALID + 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    const auto domain = static_cast<CUpti_CallbackDomain>(d);
    client_bits_.SetDomain(domain, enable != 0);
    const CUptiResult r = Reconcile(domain);
    if (result == CUPTI_SUCCESS) result = r;
  }
  UpdateFlags();
  return result;
}

CUptiResult CuptiMux::GetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (enable == nullptr || Lookup(subscriber) == nullptr || !CallbackBits::Valid(domain, cbid)) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  *enable = client_bits_.Test(domain, cbid) ? 1 : 0;
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::Finalize() {
  // The client tears CUPTI down (Kineto does, from inside a callback, with TEARDOWN_CUPTI=1).
  // CUPTI stays up for cumemtrace; for the client it is as if finalized: unsubscribed,
  // nothing enabled, no buffer callbacks.
  Client* client = client_.load(std::memory_order_acquire);
  if (client != nullptr) {
    Unsubscribe(reinterpret_cast<CUpti_SubscriberHandle>(client));
  } else {
    EndClient(/*flush=*/t_client_depth == 0);
  }
  client_requested_.store(nullptr, std::memory_order_release);
  client_completed_.store(nullptr, std::memory_order_release);
  return CUPTI_SUCCESS;
}

void CuptiMux::EndClient(bool flush) {
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    for (uint32_t kind = 1; kind < KindBits::kMaxKind; ++kind) {
      const bool enabled = client_kinds_.Test(kind) || context_enables_[kind] > 0;
      if (enabled && !own_kinds_.Test(kind)) {
        api_->ActivityDisable(static_cast<CUpti_ActivityKind>(kind));
      }
      context_enables_[kind] = 0;
    }
    client_kinds_.ClearAll();
    if (client_flush_period_ && api_->ActivityFlushPeriod != nullptr) api_->ActivityFlushPeriod(0);
    client_flush_period_ = false;
    for (int i = 0; i < kSwitches; ++i) {
      if (client_switches_[i] && api_->Switches[i] != nullptr) api_->Switches[i](0);
      client_switches_[i] = false;
    }
  }
  // Records of the client's kinds still inside CUPTI reach it now. Not from inside a CUPTI
  // callback (Kineto finalizes from one): those arrive with cumemtrace's next flush.
  if (flush && client_wants_.Any()) api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    client_wants_.ClearAll();
    UpdateFlags();
  }
  DeliverOpenBuffers(/*spares_too=*/true);
}

CUptiResult CuptiMux::ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                CUpti_BuffersCallbackCompleteFunc completed) {
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  client_requested_.store(requested, std::memory_order_release);
  client_completed_.store(completed, std::memory_order_release);
  EnsureOpenBuffer();  // kinds enabled before the callbacks were registered
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityEnable(CUpti_ActivityKind kind, bool and_dump) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  if (own_kinds_.Test(kind) && !client_wants_.Test(kind)) {
    // cumemtrace's records of this kind made before this call stay its own: CUPTI hands
    // them over now, before the client's copy starts.
    api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    CUptiResult result = CUPTI_SUCCESS;
    if (and_dump) {
      result = api_->ActivityEnableAndDump != nullptr ? api_->ActivityEnableAndDump(kind)
                                                      : CUPTI_ERROR_NOT_SUPPORTED;
    } else if (!own_kinds_.Test(kind) && !client_kinds_.Test(kind) &&
               context_enables_[kind] == 0) {
      result = api_->ActivityEnable(kind);
    }
    if (result != CUPTI_SUCCESS) return result;
    client_kinds_.Set(kind, true);
    client_wants_.Set(kind, true);
    UpdateFlags();
  }
  EnsureOpenBuffer();
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityDisable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  bool shared = false;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (!client_kinds_.Test(kind) && context_enables_[kind] == 0) return CUPTI_SUCCESS;
    client_kinds_.Set(kind, false);
    context_enables_[kind] = 0;
    UpdateFlags();
    shared = own_kinds_.Test(kind);
    // No more records of this kind are made; those already made still reach the client.
    if (!shared) return api_->ActivityDisable(kind);
  }
  // cumemtrace still has this kind on, so its records keep coming: what was made before
  // this call goes to the client (a forced flush copies it), nothing after.
  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(control_mutex_);
  client_wants_.Set(kind, false);
  UpdateFlags();
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityEnableContext(CUcontext context, CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  if (own_kinds_.Test(kind) && !client_wants_.Test(kind)) {
    api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (!own_kinds_.Test(kind) && !client_kinds_.Test(kind)) {
      if (api_->ActivityEnableContext == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
      const CUptiResult result = api_->ActivityEnableContext(context, kind);
      if (result != CUPTI_SUCCESS) return result;
    }
    ++context_enables_[kind];
    client_wants_.Set(kind, true);
    UpdateFlags();
  }
  EnsureOpenBuffer();
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityDisableContext(CUcontext context, CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  bool last_shared = false;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (context_enables_[kind] == 0) return CUPTI_SUCCESS;
    --context_enables_[kind];
    if (!own_kinds_.Test(kind) && !client_kinds_.Test(kind) &&
        api_->ActivityDisableContext != nullptr) {
      api_->ActivityDisableContext(context, kind);
    }
    last_shared = context_enables_[kind] == 0 && !client_kinds_.Test(kind) && own_kinds_.Test(kind);
    UpdateFlags();
  }
  if (last_shared) {
    api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(control_mutex_);
    client_wants_.Set(kind, false);
    UpdateFlags();
  }
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityFlushAll(uint32_t flag) {
  // CUPTI completes its buffers (cumemtrace's), whose client records are copied; then the
  // client's partly filled buffer is handed over too, as CUPTI's flush would.
  const CUptiResult result = api_->ActivityFlushAll(flag);
  DeliverOpenBuffers(/*spares_too=*/false);
  // Kinds still on: CUPTI would ask for a new buffer with the next record; ask now, so that
  // a client that flushes only while it holds a buffer (Kineto) flushes again.
  EnsureOpenBuffer();
  return result;
}

CUptiResult CuptiMux::ActivityFlushPeriod(uint32_t ms) {
  if (api_->ActivityFlushPeriod == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(control_mutex_);
  const CUptiResult result = api_->ActivityFlushPeriod(ms);
  if (result == CUPTI_SUCCESS) client_flush_period_ = ms != 0;
  return result;
}

CUptiResult CuptiMux::ActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id,
                                                   size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t fresh = 0;
  if (api_->ActivityGetNumDroppedRecords(context, stream_id, &fresh) == CUPTI_SUCCESS) {
    CuptiSession::Get().AddDroppedRecords(fresh);
  }
  std::lock_guard<std::mutex> lock(pack_mutex_);
  *dropped = static_cast<size_t>(client_dropped_) + fresh;
  client_dropped_ = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CuptiMux::ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock) {
  // One clock for CUPTI, process-wide: the client's wins, so its records are exactly what
  // it asked for; cumemtrace maps its own records back onto CLOCK_MONOTONIC
  // (CuptiSession::UpdateClockMap).
  if (clock == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (api_->ActivityRegisterTimestampCallback == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  CuptiSession& session = CuptiSession::Get();
  client_clock_.store(clock, std::memory_order_release);
  session.BeforeClientClock();
  const CUptiResult result = api_->ActivityRegisterTimestampCallback(clock);
  if (result == CUPTI_SUCCESS) session.AfterClientClock();
  return result;
}

const char* CuptiMux::SwitchName(Switch which) {
  static const char* const kNames[kSwitches] = {
      "cuptiActivityEnableLatencyTimestamps",         "cuptiActivityEnableLaunchAttributes",
      "cuptiActivityEnableCudaEventDeviceTimestamps", "cuptiActivityEnableAllSyncRecords",
      "cuptiActivityEnableDeviceGraph",               "cuptiActivityEnableHWTrace",
      "cuptiActivityEnableAllocationSource"};
  return which >= 0 && which < kSwitches ? kNames[which] : "";
}

CUptiResult CuptiMux::ActivitySwitch(Switch which, uint8_t enable) {
  const auto func = api_->Switches[which];
  if (func == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(control_mutex_);
  const CUptiResult result = func(enable);
  if (result == CUPTI_SUCCESS) client_switches_[which] = enable != 0;
  return result;
}

}  // namespace cumemtrace::tracer

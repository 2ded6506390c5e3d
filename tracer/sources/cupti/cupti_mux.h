// One CUPTI subscription, shared with the program's own CUPTI client (torch.profiler's
// Kineto, a CUPTI sample, ...).
//
// CUPTI takes one subscriber per process and one pair of activity buffer callbacks. The
// tracer is preloaded, so the cupti* names it exports (cupti_exports.cc) come before
// libcupti's: a client's calls reach this class, which keeps the real subscription and the
// real buffer callbacks for good and stands in for CUPTI towards the client:
// - callbacks: the real subscription has the union of what cumemtrace and the client
//   enabled; the client's callback is called for exactly the (domain, id) pairs it enabled,
//   with CUPTI's own arguments, before cumemtrace's own work for that call;
// - activity records: CUPTI's buffers are always cumemtrace's (requested by CuptiSession).
//   At completion, the records of the kinds the client enabled are copied, in order, into
//   buffers from the client's request callback, which reach its completion callback when
//   full or when the client flushes, as CUPTI's own would. Copying keeps the two cadences
//   apart: cumemtrace flushes every 100 ms, and handing the client a half-empty buffer of
//   its own at each of those flushes would grow its memory by a buffer per flush.
//   While the client has a kind enabled and its buffer callbacks registered, it holds one
//   open buffer, requested at once (at the enable or the registration, and again after its
//   own flush handed that buffer back), as CUPTI asks for one as soon as records come:
//   Kineto flushes at the end of a window only if it was ever asked for a buffer.
// - unsubscribe (or cuptiFinalize) disables again everything the client enabled that
//   cumemtrace does not need, and hands it back its last records.
// The client's callbacks are never called with one of the tracer's locks held, and its
// mistakes (a null callback, a stale or doubled handle, a buffer of size 0) are answered
// with CUPTI's error codes or counted as dropped records, never a crash.
//
// When the interposition cannot be trusted (a second CUPTI in the process: one loaded by
// full path, or linked statically and exported), the tracer hands CUPTI over as before
// (CuptiSession::HandOver) and forwards every call unchanged.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cumemtrace::tracer {

struct CuptiApi;

// Callback ids per domain, each a bit readable without a lock.
class CallbackBits {
 public:
  static constexpr uint32_t kMaxCbid = 2048;
  static bool Valid(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  // Callback ids of a domain: [0, DomainSize).
  static uint32_t DomainSize(CUpti_CallbackDomain domain);

  bool Test(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) const {
    return (words_[domain][cbid >> 6].load(std::memory_order_relaxed) >> (cbid & 63)) & 1;
  }
  void Set(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool on);
  void SetDomain(CUpti_CallbackDomain domain, bool on);
  void ClearAll();
  bool Any() const;

 private:
  std::atomic<uint64_t> words_[CUPTI_CB_DOMAIN_SIZE][kMaxCbid / 64] = {};
};

// Activity kinds, likewise.
class KindBits {
 public:
  static constexpr uint32_t kMaxKind = 128;
  bool Test(uint32_t kind) const {
    return kind < kMaxKind && ((words_[kind >> 6].load(std::memory_order_relaxed) >> (kind & 63)) & 1);
  }
  void Set(uint32_t kind, bool on);
  bool Any() const {
    return (words_[0].load(std::memory_order_relaxed) | words_[1].load(std::memory_order_relaxed)) != 0;
  }
  void ClearAll() {
    words_[0].store(0);
    words_[1].store(0);
  }

 private:
  std::atomic<uint64_t> words_[2] = {};
};

class CuptiMux {
 public:
  static CuptiMux& Get();

  // Whether the program's CUPTI calls go through the mux (true) or straight to CUPTI.
  // Decided at the first call: the tracer's own session starts then if it has not yet, and
  // the interposition must be safe (CuptiSession::InterpositionSafe), else CUPTI is handed
  // over. The answer stays for the life of the process.
  bool Shared() {
    const int route = route_.load(std::memory_order_acquire);
    return route != kUndecided ? route == kShared : Decide();
  }

  // --- from CuptiSession -----------------------------------------------------------------
  // The real subscription exists: from now on the mux owns it.
  void Install(const CuptiApi* api, CUpti_SubscriberHandle own);
  bool installed() const { return api_ != nullptr; }
  // What cumemtrace itself wants, enabled in CUPTI unless the client has it already.
  CUptiResult EnableOwnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  CUptiResult EnableOwnKind(CUpti_ActivityKind kind);
  bool OwnKind(uint32_t kind) const { return own_kinds_.Test(kind); }
  // The hot path's one extra load: whether a client has callbacks enabled.
  static bool ClientCallbacksOn() { return client_callbacks_on_.load(std::memory_order_relaxed); }
  // Calls the client's callback when it enabled (domain, cbid); returns whether cumemtrace
  // enabled that pair itself.
  bool Dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
  // A completed buffer of cumemtrace's: copies the client's records into its buffers.
  static bool ClientRecordsOn() { return client_records_on_.load(std::memory_order_relaxed); }
  void CopyClientRecords(const uint8_t* buffer, size_t valid_size);
  // Records CUPTI dropped (read in cumemtrace's completion callback): the client's count too.
  void AddCuptiDropped(size_t count);
  // In a forked child: the parent's client is not ours to call.
  void ForgetInChildAfterFork();

  // --- the interposed calls (cupti_exports.cc), while the mux is installed -----------------
  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                        void* userdata);
  CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber);
  CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                             CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  CUptiResult EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                           CUpti_CallbackDomain domain);
  CUptiResult EnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber);
  CUptiResult GetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                               CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  CUptiResult Finalize();
  CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                        CUpti_BuffersCallbackCompleteFunc completed);
  CUptiResult ActivityEnable(CUpti_ActivityKind kind, bool and_dump);
  CUptiResult ActivityDisable(CUpti_ActivityKind kind);
  CUptiResult ActivityEnableContext(CUcontext context, CUpti_ActivityKind kind);
  CUptiResult ActivityDisableContext(CUcontext context, CUpti_ActivityKind kind);
  CUptiResult ActivityFlushAll(uint32_t flag);
  CUptiResult ActivityFlushPeriod(uint32_t ms);
  CUptiResult ActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id, size_t* dropped);
  CUptiResult ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock);
  // Process-wide switches of the form cuptiActivityEnableX(uint8_t enable), each off (0)
  // by default: what the client turns on is turned off again when it ends.
  enum Switch : int {
    kLatencyTimestamps,
    kLaunchAttributes,
    kCudaEventDeviceTimestamps,  // Kineto's CUDA_SYNC activity
    kAllSyncRecords,
    kDeviceGraph,
    kHWTrace,
    kAllocationSource,
    kSwitches
  };
  static const char* SwitchName(Switch which);
  CUptiResult ActivitySwitch(Switch which, uint8_t enable);

  // The clock the client gave CUPTI, or null (CuptiSession maps its records back).
  CUpti_TimestampCallbackFunc client_clock() const {
    return client_clock_.load(std::memory_order_acquire);
  }

 private:
  struct Client;  // one subscription of the program's; never freed (a stale handle stays safe)
  struct OpenBuffer {
    uint8_t* data = nullptr;
    size_t size = 0;
    size_t used = 0;
    size_t max_records = 0;
    size_t records = 0;
  };

  enum : int { kUndecided = 0, kShared = 1, kForward = 2 };
  bool Decide();
  Client* Lookup(CUpti_SubscriberHandle handle) const;  // the live client, or null
  // Makes CUPTI's subscription hold own | client for one domain (control_mutex_ held).
  CUptiResult Reconcile(CUpti_CallbackDomain domain);
  void UpdateFlags();  // control_mutex_ held
  // The client holds an open buffer while it has a kind enabled (client_enabled_) and
  // buffer callbacks: requested now if it holds none. No lock held (calls the client).
  void EnsureOpenBuffer();
  // Under pack_mutex_: a fresh buffer of the client's becomes the open one, or a spare when
  // another thread opened one meanwhile.
  void KeepLocked(const OpenBuffer& fresh);
  // The client is gone (unsubscribe or finalize): everything it enabled that cumemtrace
  // does not need is disabled, and its last records are handed to it. No lock held.
  void EndClient(bool flush);
  // Hands the open buffer (and unused spares) to the client's completion callback.
  void DeliverOpenBuffers(bool spares_too);
  void Complete(const OpenBuffer& buffer);

  const CuptiApi* api_ = nullptr;
  CUpti_SubscriberHandle own_ = nullptr;
  std::atomic<int> route_{kUndecided};
  std::mutex route_mutex_;

  static std::atomic<bool> client_callbacks_on_;
  static std::atomic<bool> client_records_on_;
  std::atomic<bool> client_enabled_{false};  // a kind enabled by the client now

  std::mutex control_mutex_;  // subscribe, enables; never held while calling the client
  std::atomic<Client*> client_{nullptr};
  CallbackBits own_bits_;
  CallbackBits client_bits_;
  CallbackBits real_bits_;  // what CUPTI has for the subscription (control_mutex_)
  KindBits own_kinds_;
  KindBits client_kinds_;      // enabled by the client now
  KindBits client_wants_;      // copied to the client: enabled now, or still in flight
  uint32_t context_enables_[KindBits::kMaxKind] = {};  // client's per-context enables
  bool client_flush_period_ = false;
  bool client_switches_[kSwitches] = {};

  std::atomic<CUpti_BuffersCallbackRequestFunc> client_requested_{nullptr};
  std::atomic<CUpti_BuffersCallbackCompleteFunc> client_completed_{nullptr};
  std::atomic<CUpti_TimestampCallbackFunc> client_clock_{nullptr};

  std::mutex pack_mutex_;  // the open buffer; never held while calling the client
  OpenBuffer open_;
  std::vector<OpenBuffer> spares_;  // obtained by a racing copier, not yet used
  uint64_t client_dropped_ = 0;     // (pack_mutex_) not delivered to the client
};

}  // namespace cumemtrace::tracer

// The result of analyzing a trace: plain data, filled by Analyze (engine.h), read by SummaryJson,
// PrintSummaryText and anything else that wants the figures (viewers, exports, tests).
// Times named *_ns are relative to the process's first timestamp unless named *_abs_ns
// (absolute, in the stream's timestamp clock). Byte counts are exact.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cumemtrace {

// A thread id of 0 means "not seen" throughout (as on the wire).
struct ExitStatus {
  enum class Source { kUnknown, kLauncher, kTracer };
  Source source = Source::kUnknown;
  int32_t code = 0;
  int32_t signal = 0;  // launcher only; 0 when the process exited
  bool core_dumped = false;
};

struct Notice {
  std::string level;  // "info", "warning" or "" (unspecified)
  std::string code;
  std::string text;
  bool from_launcher = false;  // said by `cumemtrace run`, not by the tracer
};

// One DroppedRecords report.
struct DropWindow {
  uint64_t count = 0;
  uint64_t first_ns = 0;  // relative; 0 with has_window false when the tracer did not know
  uint64_t last_ns = 0;
  bool has_window = false;
};

struct DropSummary {
  std::string source;  // "cupti", "tracer_queue", "unspecified"
  uint64_t total = 0;
  std::vector<DropWindow> windows;
};

// EventBatch.sequence jumped: `missing` batches between after_sequence and the next one seen.
struct SequenceGap {
  uint64_t after_sequence = 0;  // last sequence seen before the gap (meaningless if at_start)
  uint64_t next_sequence = 0;
  uint64_t missing = 0;
  bool at_start = false;  // the first batch seen was not sequence 0
};

struct LiveGroup {
  std::string phase;  // "" when no phase was open
  std::string kind;   // "DEVICE", "ARRAY"
  uint64_t count = 0;
  uint64_t bytes = 0;
};

struct LiveAllocation {
  uint64_t address = 0;
  uint64_t bytes = 0;
  std::string kind;
  std::string phase;
  std::string api;  // "" when the call was not seen
  uint32_t thread_id = 0;
  uint64_t birth_ns = 0;
  // A tensor with attribution (`run --modules`, `--ops`; docs/design.md "Modules and
  // operators"): the module path, outer and inner operator it was born in ("" when unknown).
  bool attributed = false;  // the tracer said what was running (all below "" otherwise)
  std::string module;
  std::string op;
  std::string inner_op;
  bool backward = false;          // born in an autograd node's backward (op names the node)
  bool linked = false;            // backward: its forward operation was found
  bool module_inherited = false;  // backward: module is its forward operation's
  // backward, not linked: module is that of the forward op just before its own (which
  // allocated nothing: a view), a guess
  bool module_from_earlier = false;
  std::string forward_op;         // linked: the forward allocation's outer and inner operator
  std::string forward_inner_op;
  std::string forward_line;  // linked: "file:line" of its forward stack's innermost Python frame
};

// A module path's tensor bytes (`run --modules`): `bytes` its own and its submodules', at the
// tensor peak; `self_bytes` born in it outside every submodule.
struct ModuleBytes {
  std::string module;  // "" for tensors born outside every module
  uint32_t depth = 0;  // 0: a root (or a top-level path when the process named no one root)
  uint64_t bytes = 0;
  uint64_t self_bytes = 0;
  uint64_t count = 0;           // tensors of the subtree live at the tensor peak
  uint64_t own_peak_bytes = 0;  // the subtree's highest live bytes over the run
};

// Tensor bytes live at the tensor peak by the outermost operator they were born in.
struct OperatorBytes {
  std::string op;  // "" when none was running (or `--ops` was off)
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// A device's tensors by module and operator (docs/design.md "Modules and operators"); given
// when the process sent any attribution.
struct DeviceAttribution {
  bool given = false;
  uint64_t tensor_peak_bytes = 0;  // = TorchLayers::allocated_peak_bytes
  uint64_t tensor_peak_time_ns = 0;
  // Every module path with bytes over the run, as a tree: depth-first, each node before its
  // children, siblings by bytes at the peak (largest first); then "" (no module).
  std::vector<ModuleBytes> modules;
  std::vector<OperatorBytes> operators;  // largest first
  // Backward allocations over the run, and those whose forward operation was not found.
  uint64_t backward_allocations = 0;
  uint64_t backward_bytes = 0;
  uint64_t unlinked_backward_allocations = 0;
  uint64_t unlinked_backward_bytes = 0;
};

struct KindStats {
  uint64_t allocations = 0;
  uint64_t releases = 0;  // releases matched to an allocation of this kind
  uint64_t allocated_bytes = 0;
  uint64_t released_bytes = 0;
  uint64_t peak_bytes = 0;  // this kind alone
  uint64_t live_at_exit_count = 0;
  uint64_t live_at_exit_bytes = 0;
};

// Device memory (DEVICE + ARRAY) grouped by where it came from: the API the program called,
// or the library that called it. Separates what a framework's allocator holds
// (libc10_cuda.so, cudaMallocAsync) from what libraries take for themselves (cuBLAS's
// workspaces), which the framework's own counters never see.
struct OriginStats {
  uint64_t allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t peak_bytes = 0;          // this API's allocations alone, at their own peak
  uint64_t live_at_peak_bytes = 0;  // this API's share of the device peak
  uint64_t live_at_exit_bytes = 0;
};

// Device memory live at a peak by the stack that allocated it (`run --stacks`).
struct StackAtPeak {
  uint64_t bytes = 0;
  uint64_t count = 0;
  // The innermost frame of the program's own code: "file:line in function".
  std::string frame;
};

struct DevicePeak {
  bool seen = false;  // false: no device memory was ever in use
  uint64_t bytes = 0;
  uint64_t time_ns = 0;
  uint64_t time_abs_ns = 0;
  std::vector<LiveGroup> live_by_phase_and_kind;  // largest bytes first
  std::vector<LiveAllocation> largest;            // largest first, at most top_allocations
  uint64_t live_count = 0;
  // Largest first, at most top_allocations; empty when the trace has no stacks. Memory
  // without a stack (threads without Python, releases of stacks lost) is not listed.
  std::vector<StackAtPeak> top_stacks;
};

// Memory that is on the device but not the program's own allocations.
struct NotProgramMemory {
  uint64_t static_peak_bytes = 0;  // DEVICE_STATIC + MANAGED_STATIC live together, highest
  uint64_t static_allocations = 0;
  uint64_t static_releases = 0;
  uint64_t tracer_bytes = 0;  // largest TracerMemory figure reported for the device
  std::string tracer_description;
  uint64_t released_unknown_count = 0;  // releases of addresses never seen allocated
  uint64_t released_unknown_bytes = 0;
};

// Device memory live at the peak by lifetime class (collector/engine/lifetimes.h). Given only
// for a process with training phases (HasTrainingPhases): the classes are defined by forward
// and backward, and without them "peak - persistent" would call any program's whole peak
// activation memory.
struct LifetimeAtPeak {
  bool given = false;
  std::map<std::string, uint64_t> bytes_by_class;  // temporary, activation, gradient, ...
  uint64_t activation_memory_bytes = 0;  // peak - persistent: what the EP plan measures
};
// The classes in the order every output lists them, the longest-lived first.
inline constexpr const char* kLifetimeClassOrder[] = {"persistent", "activation", "gradient",
                                                      "temporary", "other"};

// One category's bytes at one instant, and how much of it the program's own objects named
// (TensorCategory tags); the rest, bytes - objects_bytes, was inferred.
struct CategoryBytes {
  uint64_t bytes = 0;
  uint64_t objects_bytes = 0;
};

struct CategoryFigures {
  CategoryBytes at_tensor_peak;
  CategoryBytes at_device_peak;
  CategoryBytes at_end;           // live when the trace ended
  CategoryBytes own_peak;         // this category alone, at its highest (objects: at that instant)
  uint64_t own_peak_time_ns = 0;  // the first instant it was reached
  uint64_t allocations = 0;
  uint64_t objects_allocations = 0;  // of them, named by the program's objects
};

// Device memory by category: what the tensor allocations are (docs/phases.md
// "Categories"). Given for a process with training phases or with at least one tag.
struct DeviceCategories {
  bool given = false;
  // What the tensor allocations are: "torch_allocated" (the bridge's blocks), "async" (the
  // stream-ordered device allocations: PyTorch's async mode), or "device" (every device
  // allocation: no bridge and no stream-ordered allocator, e.g. native mode's segments).
  std::string tensor_layer;
  // The tensors' own peak (torch.cuda.max_memory_allocated with the bridge), and when.
  uint64_t tensor_peak_bytes = 0;
  uint64_t tensor_peak_time_ns = 0;
  // Beside the tensors at each peak: PyTorch's cache beyond its tensors (reserved - allocated,
  // with the bridge), and device memory PyTorch never sees, in all and by library.
  uint64_t cache_at_tensor_peak_bytes = 0;
  uint64_t cache_at_device_peak_bytes = 0;
  uint64_t not_torch_at_tensor_peak_bytes = 0;
  uint64_t not_torch_at_device_peak_bytes = 0;
  std::map<std::string, uint64_t> not_torch_at_tensor_peak_by_library;
  std::map<std::string, uint64_t> not_torch_at_device_peak_by_library;
  // By category name ("parameter", "buffer", ...; kCategoryOrder), those with allocations.
  std::map<std::string, CategoryFigures> by_category;
};
// The categories in the order every output lists them.
inline constexpr const char* kCategoryOrder[] = {
    "parameter", "buffer",    "optimizer_state", "gradient",      "input",
    "activation", "temporary", "workspace",      "autograd_other"};

// PyTorch's two layers on one device, when the bridge to its caching allocator is attached
// (design.md "Tensors"): tensors (the allocator's blocks, TORCH_ALLOCATED) and the segments
// it holds from the driver (TORCH_RESERVED); device memory in use counts tensors plus the
// memory PyTorch never sees (cuBLAS workspaces, NCCL, the program's own cudaMalloc).
struct TorchLayers {
  bool present = false;
  uint64_t allocated_peak_bytes = 0;  // = torch.cuda.max_memory_allocated()
  uint64_t reserved_peak_bytes = 0;   // = torch.cuda.max_memory_reserved()
  uint64_t reserved_at_allocated_peak_bytes = 0;
  // Reserved but not allocated when tensors peaked: what the cache holds beyond them.
  uint64_t fragmentation_at_peak_bytes = 0;
  uint64_t other_device_peak_bytes = 0;  // DEVICE memory PyTorch never sees, its own peak
};

struct DeviceReport {
  uint32_t index = 0;
  bool has_info = false;  // a DeviceInfo arrived; otherwise only the index is known
  std::string name;
  std::string uuid;
  uint64_t total_memory_bytes = 0;
  DevicePeak peak;
  std::map<std::string, KindStats> by_kind;  // every kind seen, by name
  std::map<std::string, OriginStats> by_api;      // by API called; "(unknown)" if unseen
  LifetimeAtPeak lifetime_at_peak;
  std::map<std::string, OriginStats> by_library;  // by calling module; "(not unwound)" for
                                                  // stream-ordered calls
  NotProgramMemory not_program;
  uint64_t live_at_exit_count = 0;  // DEVICE + ARRAY never released
  uint64_t live_at_exit_bytes = 0;
  uint64_t kernel_count = 0;
  uint64_t kernel_busy_ns = 0;  // sum of end - start (overlaps counted twice)
  uint64_t reallocated_live_address = 0;  // allocation at an address already live (anomaly)
  TorchLayers torch;
  DeviceCategories categories;
  DeviceAttribution attribution;
};

// Device memory in use at one occurrence's entry and at its highest point inside:
// peak_bytes - bytes_at_entry = peak_above_entry_bytes, always.
struct PhaseWindow {
  uint64_t bytes_at_entry = 0;
  uint64_t peak_bytes = 0;
  uint64_t peak_above_entry_bytes = 0;
};

// Per phase and device, summed over the events attributed to it. (Entry and peak figures
// come from one occurrence at a time.)
struct PhaseCounters {
  uint64_t allocated_bytes = 0;
  uint64_t freed_bytes = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t failed_allocations = 0;
  uint64_t kernels = 0;
};

// The PhaseWindow is the occurrence with the highest peak (the earliest of equals), so that
// the three figures of a row come from one occurrence and add up.
struct PhaseDeviceStats : PhaseCounters, PhaseWindow {
  uint32_t index = 0;
  PhaseWindow first;   // the first occurrence (warm-up)
  PhaseWindow steady;  // occurrences 2..n: the one whose rise is the lower median
  uint64_t steady_of = 0;  // n - 1: how many occurrences `steady` is the median of (0: n <= 1)
};

// A phase's names and occurrences, as the sweep counts them (phases.h) and the report lists
// them.
struct PhaseCounts {
  std::string name;     // canonical phase (PhaseRules), or the range's own name
  std::vector<std::string> range_names;  // NVTX names ("domain: message") mapped to it
  bool inferred = false;   // synthesized from the program's threads, not from NVTX
  bool iteration = false;  // the range marks iterations
  uint64_t occurrences = 0;
  uint64_t total_ns = 0;
  uint64_t still_open = 0;  // occurrences open at the end, closed at the last timestamp
};

struct PhaseReport : PhaseCounts {
  std::string domain;  // of the first range seen: "" for the default domain
  std::string message;
  uint64_t first_open_ns = 0;
  std::vector<PhaseDeviceStats> devices;  // devices the process used, by index
};

// Memory held at one instant, grouped by one key (phase, kind, library or stack).
struct HeldGroup {
  std::string name;  // "" when the key is not known (no phase, not unwound, no stack)
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// One allocation live at an instant (an out-of-memory's largest holders).
struct HeldBlock {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t time_ns = 0;  // its birth, since the process's first event
  std::string phase;     // of origin; "" for none
  std::string kind;      // "DEVICE", "TORCH_ALLOCATED", ...
  std::string library;   // calling module's base name; "" when not unwound
  std::string stack;     // innermost frame of the program's own code; "" without `--stacks`
  // Its category (docs/phases.md "Categories"): "" when it is no tensor allocation or the
  // process has none; category_from_objects: the program's objects named it.
  std::string category;
  bool category_from_objects = false;
};

// PyTorch's cache in one pool (small or large, default or private) on one stream, at the
// instant of a failed allocation (docs/oom.md).
struct CachePoolState {
  std::string pool;  // "small" or "large"
  uint64_t stream = 0;  // cudaStream_t as a number, 0 for the default stream
  uint64_t pool_id_first = 0;  // 0, 0: the default pool; else a graph's or MemPool's
  uint64_t pool_id_second = 0;
  bool expandable = false;  // its memory is mapped pages (expandable_segments)
  uint64_t segments = 0;
  uint64_t segment_bytes = 0;
  uint64_t allocated_bytes = 0;  // blocks handed to tensors
  uint64_t free_bytes = 0;       // the gaps between them inside the segments
  uint64_t free_blocks = 0;
  uint64_t largest_free_block_bytes = 0;
  uint64_t wholly_free_segment_bytes = 0;  // segments without one allocated block
};

// Whether a change would have let the request fit, from the state at that instant.
struct WouldFit {
  bool fits = false;
  uint64_t available_bytes = 0;  // what the change would have made available
  uint64_t needed_bytes = 0;     // what the request would have needed then
  uint64_t short_by_bytes = 0;   // needed - available when it does not fit, else 0
};

// Why an allocation failed and what would have let it fit (docs/oom.md).
struct OomPostMortem {
  // The cache's state was rebuilt from the PyTorch bridge's events; false: only the device's
  // free bytes and what held memory are known.
  bool cache_known = false;
  // "fragmentation", "split", "cached_segments", "too_large" or "device_full" (docs/oom.md).
  std::string reason;
  std::string explanation;  // one sentence with the figures
  uint64_t request_bytes = 0;  // as the allocator looked for it (rounded), or the call asked
  std::string pool;            // the request's pool ("small", "large"); "" for a driver call
  uint64_t stream = 0;
  uint64_t device_free_bytes = 0;
  bool expandable_segments_on = false;  // the allocator already mapped expandable segments
  uint64_t cache_free_bytes = 0;  // free inside every segment of the device
  uint64_t pool_free_bytes = 0;   // free inside the request's pool and stream
  uint64_t largest_free_block_bytes = 0;  // in the request's pool and stream
  uint64_t wholly_free_segment_bytes = 0;
  // Segments the allocator gave back to the driver after the request's last block event and
  // before it raised (its own retry: release_cached_blocks).
  uint64_t released_before_bytes = 0;
  uint64_t largest_request_that_fits_bytes = 0;
  WouldFit expandable_segments;  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  WouldFit empty_cache;          // torch.cuda.empty_cache() just before
  WouldFit smaller_request;      // the largest request that fitted (available_bytes)
  std::vector<CachePoolState> pools;  // the device's pools and streams
  // Device memory live then (the program's own), largest first.
  uint64_t held_bytes = 0;
  std::vector<HeldGroup> held_by_phase;
  std::vector<HeldGroup> held_by_kind;
  std::vector<HeldGroup> held_by_library;
  std::vector<HeldGroup> held_by_stack;  // at most 10; empty without `run --stacks`
  // By category, when the process has categories (DeviceCategories::given): the tensor
  // allocations live then (of the device's tensor layer), by what they are. The groups sum to
  // held_tensor_bytes; held_bytes - held_tensor_bytes is device memory that is no tensor.
  bool categories_given = false;
  uint64_t held_tensor_bytes = 0;
  std::vector<HeldGroup> held_by_category;  // largest first; `count`: allocations
  std::vector<HeldBlock> largest_held;      // the 10 largest allocations live then
};

struct FailedAllocationReport {
  uint64_t time_ns = 0;
  uint64_t time_abs_ns = 0;
  std::string api;
  uint64_t requested_bytes = 0;
  int32_t error_code = 0;
  std::string error_name;
  std::string kind;
  uint32_t device = 0;
  uint64_t device_free_bytes = 0;
  uint64_t device_total_bytes = 0;
  uint32_t thread_id = 0;
  std::string caller;  // calling module, "" when unknown
  std::string phase;
  uint64_t device_in_use_bytes = 0;  // program device memory in use on that device then
  OomPostMortem post_mortem;
};

// How phases were inferred for a program without NVTX phases (or why they were not).
struct PhaseInferenceReport {
  bool applied = false;
  std::string reason;
  std::string signal;  // "memory" or "kernels"
  uint32_t calling_thread = 0;
  std::vector<uint32_t> autograd_threads;
  uint64_t backward_passes = 0;
  uint64_t optimizers_inferred = 0;
};

// One metric over iterations 2..N; the lower median is an observed value.
struct Spread {
  uint64_t count = 0;
  int64_t median = 0;  // the lower median: an observed value, exact to the byte
  int64_t min = 0;
  int64_t max = 0;
};

struct IterationPhaseDevice {
  uint32_t index = 0;
  int64_t warmup_peak_above_entry_bytes = 0;  // first iteration
  int64_t warmup_net_change_bytes = 0;
  Spread peak_above_entry_bytes;  // per iteration: highest (peak - entry) of its occurrences
  Spread net_change_bytes;        // per iteration: sum of (exit - entry) of its occurrences
};

struct IterationPhaseStats {
  std::string phase;
  bool inferred = false;
  uint64_t iterations_with_phase = 0;
  bool in_warmup = false;  // the first iteration had this phase
  int64_t warmup_ns = 0;
  Spread time_ns;  // per iteration: summed duration of its occurrences
  std::vector<IterationPhaseDevice> devices;
};

struct IterationReport {
  std::string source;  // "range", "repetition", or "" when none were found
  std::string range;   // the iteration range, or the repeated sequence
  std::string note;    // why none were found
  uint64_t count = 0;
  std::vector<std::pair<uint64_t, uint64_t>> windows_ns;  // relative start, end
  int64_t warmup_ns = 0;
  Spread duration_ns;
  std::vector<IterationPhaseStats> phases;
};

// One allocation's life, for the lifetimes CSV (kept only when asked for).
struct AllocationLifetime {
  uint32_t device = 0;
  uint32_t stream = 0;
  std::string kind;
  std::string api;
  std::string library;
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t birth_ns = 0;
  int64_t death_ns = -1;  // -1: still live at the end
  std::string birth_phase;
  std::string death_phase;
  int64_t birth_iteration = -1;  // 0-based; -1 outside every iteration
  int64_t death_iteration = -1;
  std::string lifetime_class;
  std::string category;  // "" for memory that is no tensor allocation or without categories
  bool category_from_objects = false;
};

// The bridge to PyTorch's caching allocator, for one process.
struct TorchBridgeReport {
  bool seen = false;      // the tracer said whether it attached
  bool attached = false;  // tensors come from the allocator's own events
  std::string torch_version;
  std::string bridge_torch_version;
  std::string library;    // the libc10_cuda the program loaded
  std::string allocator;  // its name(): "native", "cudaMallocAsync"
  std::string reason;     // why not attached
  uint64_t events = 0;    // allocator events received
  uint64_t blocks = 0;    // tensor allocations made of them
  // Of those, the small-pool blocks the bridge sent rounded, without reading counters.
  uint64_t rounded_blocks = 0;
  // Blocks whose size could not be read from the allocator's counters (no later event
  // before the process ended): rounded up to 512 bytes from the size asked for.
  uint64_t estimated_block_sizes = 0;
  // Events where the allocator's own allocated_bytes disagreed with the blocks rebuilt
  // from its events (0 when every figure is exact); lost events make this non-zero.
  uint64_t counter_mismatches = 0;
  uint64_t lost_events = 0;    // gaps in the allocator's sequence numbers
  uint64_t unknown_frees = 0;  // frees of blocks never seen allocated
  uint64_t out_of_memory = 0;  // the allocator raised OutOfMemoryError
};

// What a stream (one traced process) said about itself, as the decoder reads it
// (decoded_stream.h) and the report lists it: one struct from the handshake to summary.json.
struct StreamFacts {
  uint32_t stream_id = 0;
  bool has_handshake = false;
  uint32_t pid = 0;  // the handshake's; without one, the peer the collector saw connect
  uint32_t ppid = 0;
  std::vector<std::string> command_line;
  std::string hostname;
  std::string tracer_version;
  std::string timestamp_clock;  // "monotonic", "realtime", "unspecified"
  std::string allocator_mode;
  std::string pytorch_alloc_conf;
  // "ld_preload", "cuda_injection", "nvtx_injection", "unspecified"
  std::string injection_mode;
  bool kernels_enabled = false;          // GPU kernel records (`run --kernels`)
  bool kernel_launches_enabled = false;  // kernels at their launch only (no GPU times)
  int32_t rank = -1;        // rank in a distributed job (RANK / SLURM_PROCID), -1: none
  int32_t local_rank = -1;  // rank on its host, -1: unknown
  int32_t world_size = 0;   // ranks in the job, 0: unknown
  std::vector<std::string> damage;  // frames skipped and why
  std::vector<Notice> notices;
  // The connection ended while the process still ran (StreamClosed.peer_running), and the
  // records read from its shared ring then.
  bool closed_while_running = false;
  uint64_t ring_records_recovered = 0;
  std::vector<SequenceGap> sequence_gaps;
  uint64_t batches = 0;
  std::map<uint32_t, std::string> thread_names;
};

struct ProcessReport : StreamFacts {
  ExitStatus exit;
  bool complete = false;  // an exit record (tracer or launcher) was seen
  std::vector<std::string> incomplete_reasons;
  bool damaged = false;  // some wire frames could not be parsed and were skipped
  std::vector<DropSummary> dropped;
  uint64_t lost_batches = 0;
  uint64_t events = 0;
  // Events that arrived after the analysis had swept past their time (more than the
  // reorder window late): applied where they arrived, out of time order (design.md).
  uint64_t late_events = 0;
  uint64_t first_timestamp_abs_ns = 0;
  uint64_t duration_ns = 0;
  std::vector<DeviceReport> devices;  // by index
  std::vector<PhaseReport> phases;    // by first opening
  uint64_t nvtx_marks = 0;
  uint64_t unmatched_range_closes = 0;  // pop on an empty stack, end of an unknown id
  std::vector<FailedAllocationReport> failed_allocations;  // the program saw; in time order
  // Failed driver calls retried at once, successfully, by the layer above (the CUDA
  // runtime, PyTorch's handle probe): never seen by the program (failed_allocations.h).
  std::vector<FailedAllocationReport> driver_retries;
  uint64_t rolled_up_ranges = 0;  // per-op ranges (emit_nvtx) folded into their phase
  PhaseInferenceReport phase_inference;
  IterationReport iterations;
  std::vector<AllocationLifetime> lifetimes;  // device memory; only with keep_lifetimes
  TorchBridgeReport torch;
  // TensorCategory tags received, and those whose address held no live allocation (ignored).
  // Categories are given (DeviceCategories) when categories_given.
  bool categories_given = false;
  uint64_t category_tags = 0;
  uint64_t category_tags_unmatched = 0;
};

// One rank of a distributed job, on the device where its memory peaked highest.
struct RankFigures {
  int32_t rank = -1;
  int32_t local_rank = -1;
  uint32_t pid = 0;
  std::string hostname;
  uint32_t device = 0;
  std::string device_uuid;
  uint64_t peak_bytes = 0;
  uint64_t peak_abs_ns = 0;  // CLOCK_REALTIME: comparable across hosts
  uint64_t nccl_bytes_at_peak = 0;  // held by NCCL (libnccl*) at the peak: not the program's
  std::map<std::string, uint64_t> phase_peak_bytes;
};

struct JobReport {
  std::vector<RankFigures> ranks;  // by rank; empty when no process carried a rank
  std::vector<std::string> hosts;
  int32_t world_size = 0;
  int32_t highest_rank = -1;
  uint64_t highest_peak_bytes = 0;
  uint64_t lowest_peak_bytes = 0;
  double imbalance = 0;  // (highest - lowest) / highest peak
};

struct Report {
  std::string trace_file;  // "" when not analyzed from a file
  bool truncated = false;
  std::string truncation_reason;
  std::vector<ProcessReport> processes;  // by stream id
  JobReport job;
};

}  // namespace cumemtrace

#include "tracer/sending/record_translator.h"

#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/api_catalog.h"
#include "tracer/recording/nvtx_domain.h"

namespace cumemtrace::tracer {
namespace {

const ApiInfo* ApiAt(uint16_t index) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  return index < count ? &apis[index] : nullptr;
}

v1::MemoryKind ToMemoryKind(CUpti_ActivityMemoryKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return v1::MEMORY_KIND_PAGEABLE;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return v1::MEMORY_KIND_PINNED;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      return v1::MEMORY_KIND_DEVICE;
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return v1::MEMORY_KIND_ARRAY;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      return v1::MEMORY_KIND_MANAGED;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return v1::MEMORY_KIND_DEVICE_STATIC;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return v1::MEMORY_KIND_MANAGED_STATIC;
    default:
      return v1::MEMORY_KIND_UNKNOWN;
  }
}

v1::MemoryPoolType ToPoolType(CUpti_ActivityMemoryPoolType type) {
  switch (type) {
    case CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL:
      return v1::MEMORY_POOL_TYPE_LOCAL;
    case CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED:
      return v1::MEMORY_POOL_TYPE_IMPORTED;
    default:
      return v1::MEMORY_POOL_TYPE_NONE;
  }
}

}  // namespace

std::string ErrorNamer::DriverErrorName(int code) const {
  // The one a memory tracer meets; others are named by number.
  if (code == 2) return "CUDA_ERROR_OUT_OF_MEMORY";
  return "CUresult " + std::to_string(code);
}

void RecordTranslator::AddHostRecord(const HostRecord& record) {
  // Strings are interned before the event that uses them is added, so a definition always
  // precedes its first use in the stream.
  switch (record.type) {
    case HostRecord::Type::kCorrelation:
      correlations_->Put(record.correlation_id, record.thread_id, record.api,
                         record.caller.empty() ? nullptr : ModuleName(record.caller));
      return;
    case HostRecord::Type::kLaunch:
      AddLaunch(record);
      return;
    case HostRecord::Type::kMemory:
      if (record.release) {
        AddRelease(record);
      } else {
        AddAllocation(record);
      }
      return;
    case HostRecord::Type::kNvtx: {
      const uint32_t domain_id =
          record.domain != nullptr ? encoder_->Intern(record.domain->name) : 0;
      const uint32_t message_id = record.text.empty() ? 0 : encoder_->Intern(record.text);
      v1::Nvtx* nvtx = encoder_->AddEvent(record.timestamp_ns)->mutable_nvtx();
      nvtx->set_operation(static_cast<v1::NvtxOperation>(record.nvtx_operation));
      nvtx->set_thread_id(record.thread_id);
      nvtx->set_domain_id(domain_id);
      nvtx->set_message_id(message_id);
      nvtx->set_range_id(record.range_id);
      nvtx->set_category(record.category);
      nvtx->set_color(record.color);
      return;
    }
    case HostRecord::Type::kFailedAllocation: {
      const ApiInfo* api = ApiAt(record.api);
      const uint32_t api_id = encoder_->Intern(api != nullptr ? api->name : "unknown");
      const uint32_t error_id = encoder_->Intern(error_namer_->DriverErrorName(record.error_code));
      const uint32_t caller_id = record.caller.empty() ? 0 : encoder_->Intern(record.caller);
      v1::FailedAllocation* failed =
          encoder_->AddEvent(record.timestamp_ns)->mutable_failed_allocation();
      failed->set_api_name_id(api_id);
      failed->set_requested_bytes(record.bytes);
      failed->set_error_code(record.error_code);
      failed->set_error_name_id(error_id);
      failed->set_device(record.device);
      failed->set_device_free_bytes(record.device_free_bytes);
      failed->set_device_total_bytes(record.device_total_bytes);
      failed->set_thread_id(record.thread_id);
      failed->set_correlation_id(record.correlation_id);
      failed->set_kind(api != nullptr ? api->kind : v1::MEMORY_KIND_UNKNOWN);
      failed->set_caller_module_id(caller_id);
      return;
    }
    case HostRecord::Type::kThreadName: {
      v1::ThreadName* name = encoder_->AddEvent(record.timestamp_ns)->mutable_thread_name();
      name->set_thread_id(record.thread_id);
      name->set_name(record.text);
      return;
    }
    case HostRecord::Type::kProcessExit:
      encoder_->AddEvent(record.timestamp_ns)->mutable_process_exit()->set_exit_code(
          record.error_code);
      return;
    case HostRecord::Type::kDeviceSeen:
      return;  // the sender queries the device and emits DeviceInfo itself
    case HostRecord::Type::kTorchAllocator: {
      const uint32_t stack_id = stacks_.Intern(record.stack, record.stack_words);
      constexpr uint64_t kBackward = v1::ring::kBackwardBit;
      if (record.torch.action == v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE) {
        // Its own event: a reader that does not know it skips it (trace.proto).
        v1::TorchAutogradNode* node =
            encoder_->AddEvent(record.timestamp_ns)->mutable_torch_autograd_node();
        node->set_thread_id(record.thread_id);
        node->set_module_id(record.torch.module);
        node->set_operator_id(record.torch.op);
        node->set_inner_operator_id(record.torch.inner_op);
        node->set_autograd_sequence(record.torch.autograd_sequence & ~kBackward);
        node->set_autograd_thread(record.torch.autograd_thread);
        node->set_stack_id(stack_id);
        return;
      }
      v1::TorchAllocatorEvent* torch =
          encoder_->AddEvent(record.timestamp_ns)->mutable_torch_allocator();
      torch->set_action(static_cast<v1::TorchAllocatorAction>(record.torch.action));
      torch->set_device(record.device);
      torch->set_address(record.address);
      torch->set_requested_bytes(record.bytes);
      torch->set_stream(record.torch.stream);
      torch->set_thread_id(record.thread_id);
      torch->set_sequence(record.torch.sequence);
      torch->set_allocated_bytes_total(record.torch.allocated_total);
      torch->set_allocated_bytes_current(record.torch.allocated_current);
      torch->set_reserved_bytes_current(record.torch.reserved_current);
      torch->set_pool_id_first(record.torch.pool_first);
      torch->set_pool_id_second(record.torch.pool_second);
      torch->set_stack_id(stack_id);
      torch->set_module_id(record.torch.module);
      torch->set_operator_id(record.torch.op);
      torch->set_inner_operator_id(record.torch.inner_op);
      torch->set_autograd_sequence(record.torch.autograd_sequence & ~kBackward);
      torch->set_autograd_thread(record.torch.autograd_thread);
      torch->set_backward((record.torch.autograd_sequence & kBackward) != 0);
      return;
    }
    case HostRecord::Type::kAttributionName: {
      v1::AttributionName* name =
          encoder_->AddEvent(record.timestamp_ns)->mutable_attribution_name();
      name->set_kind(v1::AttributionKind_IsValid(static_cast<int>(record.category))
                         ? static_cast<v1::AttributionKind>(record.category)
                         : v1::ATTRIBUTION_KIND_UNSPECIFIED);
      name->set_id(static_cast<uint32_t>(record.range_id));
      name->set_name(record.text);
      return;
    }
    case HostRecord::Type::kTensorCategory: {
      v1::TensorCategory* tag = encoder_->AddEvent(record.timestamp_ns)->mutable_tensor_category();
      tag->set_device(record.device);
      tag->set_address(record.address);
      tag->set_bytes(record.bytes);
      tag->set_category(static_cast<v1::Category>(record.category));
      return;
    }
    case HostRecord::Type::kTorchBridgeState:
      if (record.torch_bridge_state != nullptr) {
        encoder_->AddEvent(record.timestamp_ns)->mutable_torch_bridge()->Swap(
            record.torch_bridge_state);
        delete record.torch_bridge_state;
      }
      return;
  }
}

bool RecordTranslator::AddActivity(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      AddMemory(*reinterpret_cast<const CUpti_ActivityMemory4*>(record));
      return true;
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
      AddMemoryPool(*reinterpret_cast<const CUpti_ActivityMemoryPool3*>(record));
      return true;
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      AddKernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
      return true;
    default:
      return false;
  }
}

void RecordTranslator::AddAllocation(const HostRecord& record) {
  const Live live{record.bytes, record.device, record.memory_kind};
  const ApiInfo* api = ApiAt(record.api);
  if (api != nullptr && api->mapping) {
    mapped_[record.address] = live;
  } else {
    // An address still live here lost its release (a call the tracer does not watch): the
    // collector closes the old allocation when it sees the new one.
    live_[record.address] = live;
  }
  EmitMemory(record, api, record.address, live);
}

void RecordTranslator::AddRelease(const HostRecord& record) {
  const ApiInfo* api = ApiAt(record.api);
  if (api != nullptr && api->mapping) {
    // cuMemUnmap(ptr, size) ends every mapping in [ptr, ptr + size).
    const uint64_t end = record.address + record.bytes;
    auto it = mapped_.lower_bound(record.address);
    while (it != mapped_.end() && it->first < end) {
      EmitMemory(record, api, it->first, it->second);
      it = mapped_.erase(it);
    }
    return;
  }
  auto it = live_.find(record.address);
  if (it == live_.end()) {
    // Not made while traced (or not memory at all): sent as it is, the collector counts it
    // as released but unknown.
    EmitMemory(record, api, record.address, Live{0, record.device, v1::MEMORY_KIND_UNKNOWN});
    return;
  }
  EmitMemory(record, api, record.address, it->second);
  live_.erase(it);
}

void RecordTranslator::EmitMemory(const HostRecord& record, const ApiInfo* api, uint64_t address,
                                  const Live& memory) {
  const uint32_t api_id = api != nullptr ? encoder_->Intern(api->name) : 0;
  const uint32_t caller_id = record.caller.empty() ? 0 : encoder_->Intern(record.caller);
  const uint32_t stack_id = stacks_.Intern(record.stack, record.stack_words);
  v1::MemoryOp* op = encoder_->AddEvent(record.timestamp_ns)->mutable_memory();
  op->set_operation(record.release ? v1::MEMORY_OPERATION_RELEASE
                                   : v1::MEMORY_OPERATION_ALLOCATE);
  op->set_address(address);
  op->set_bytes(memory.bytes);
  op->set_kind(static_cast<v1::MemoryKind>(memory.kind));
  op->set_device(memory.device);
  op->set_stream(record.stream_id);
  op->set_is_async(record.is_async);
  op->set_correlation_id(record.correlation_id);
  op->set_thread_id(record.thread_id);
  op->set_api_name_id(api_id);
  op->set_caller_module_id(caller_id);
  op->set_stack_id(stack_id);
}

void RecordTranslator::AddMemory(const CUpti_ActivityMemory4& record) {
  const CorrelationTable::Entry* call = correlations_->Find(record.correlationId);
  const ApiInfo* api = call != nullptr ? ApiAt(call->api) : nullptr;
  const uint32_t api_id = api != nullptr ? encoder_->Intern(api->name) : 0;
  const uint32_t caller_id =
      call != nullptr && call->caller != nullptr ? encoder_->Intern(*call->caller) : 0;
  v1::MemoryOp* op = encoder_->AddEvent(CuptiTime(record.timestamp))->mutable_memory();
  op->set_operation(record.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
                        ? v1::MEMORY_OPERATION_RELEASE
                        : v1::MEMORY_OPERATION_ALLOCATE);
  op->set_address(record.address);
  op->set_bytes(record.bytes);
  op->set_kind(ToMemoryKind(record.memoryKind));
  op->set_device(record.deviceId);
  op->set_context(record.contextId);
  op->set_stream(record.streamId);
  op->set_is_async(record.isAsync != 0);
  op->set_pool_type(ToPoolType(record.memoryPoolConfig.memoryPoolType));
  op->set_pool_address(record.memoryPoolConfig.address);
  op->set_correlation_id(record.correlationId);
  op->set_thread_id(call != nullptr ? call->thread_id : 0);
  op->set_api_name_id(api_id);
  op->set_caller_module_id(caller_id);
}

const std::string* RecordTranslator::ModuleName(const std::string& name) {
  std::unique_ptr<std::string>& stored = modules_[name];
  if (stored == nullptr) stored = std::make_unique<std::string>(name);
  return stored.get();
}

void RecordTranslator::AddMemoryPool(const CUpti_ActivityMemoryPool3& record) {
  v1::MemoryPoolOp* op = encoder_->AddEvent(CuptiTime(record.timestamp))->mutable_memory_pool();
  switch (record.memoryPoolOperationType) {
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
      op->set_operation(v1::MEMORY_POOL_OPERATION_CREATED);
      break;
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
      op->set_operation(v1::MEMORY_POOL_OPERATION_DESTROYED);
      break;
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
      op->set_operation(v1::MEMORY_POOL_OPERATION_TRIMMED);
      break;
    default:
      break;
  }
  op->set_pool_type(ToPoolType(record.memoryPoolType));
  op->set_address(record.address);
  op->set_size(record.size);
  op->set_utilized_size(record.utilizedSize);
  op->set_release_threshold(record.releaseThreshold);
  op->set_device(record.deviceId);
  op->set_correlation_id(record.correlationId);
  op->set_is_managed(record.isManagedPool != 0);
}

void RecordTranslator::AddLaunch(const HostRecord& record) {
  uint32_t name_id = 0;
  if (!record.text.empty()) {
    name_id = encoder_->Intern(record.text);
    if (record.symbol != nullptr) launch_names_[record.symbol] = name_id;
  } else if (record.symbol != nullptr) {
    const auto it = launch_names_.find(record.symbol);
    name_id = it != launch_names_.end() ? it->second : encoder_->Intern("?");
  } else {
    name_id = encoder_->Intern("?");
  }
  v1::Kernel* kernel = encoder_->AddEvent(record.timestamp_ns)->mutable_kernel();
  kernel->set_name_id(name_id);
  kernel->set_device(record.device);
  kernel->set_correlation_id(record.correlation_id);
  kernel->set_thread_id(record.thread_id);
  kernel->set_launch_only(true);
}

void RecordTranslator::AddKernel(const CUpti_ActivityKernel10& record) {
  const CorrelationTable::Entry* call = correlations_->Find(record.correlationId);
  const uint32_t name_id = encoder_->Intern(record.name != nullptr ? record.name : "?");
  v1::Kernel* kernel = encoder_->AddEvent(CuptiTime(record.start))->mutable_kernel();
  kernel->set_name_id(name_id);
  kernel->set_device(record.deviceId);
  kernel->set_stream(record.streamId);
  kernel->set_end_ns(CuptiTime(record.end));
  kernel->set_correlation_id(record.correlationId);
  kernel->set_thread_id(call != nullptr ? call->thread_id : 0);
  kernel->set_context(record.contextId);
  kernel->set_grid_size(static_cast<uint32_t>(record.gridX) * static_cast<uint32_t>(record.gridY) *
                        static_cast<uint32_t>(record.gridZ));
  kernel->set_block_size(static_cast<uint32_t>(record.blockX) *
                         static_cast<uint32_t>(record.blockY) *
                         static_cast<uint32_t>(record.blockZ));
}

}  // namespace cumemtrace::tracer

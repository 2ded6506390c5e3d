// The NVTX source: the tracer's functions patched into each NVTX instance's tables, and what
// the process layer calls around them (injection.cc, tracer_runtime.cc's fork handlers).
#pragma once

#include <cstdint>

namespace cumemtrace::tracer {

// NVTX's NvtxGetExportTableFunc_t, spelled out: nvToolsExt.h brings NVTX's own implementation
// (its tables and their init, some 30 KB) into every file that includes it.
using NvtxExportTableGetter = const void* (*)(uint32_t export_table_id);

// Fills the tables of the NVTX instance that called InitializeInjectionNvtx2: 1 on success.
int PatchNvtxTables(NvtxExportTableGetter get_export_table);

// Ranges of cumemtrace's own Python start-up hooks (`run --phase`), as NVTX push and pop.
int PushPhaseRange(const char* name);
int PopPhaseRange();

// Around fork (tracer_runtime.cc's pthread_atfork handlers): the NVTX domain mutex.
void LockNvtxBeforeFork();
void UnlockNvtxInParentAfterFork();
void ResetNvtxInChildAfterFork();

}  // namespace cumemtrace::tracer

// Categories (docs/phases.md "Categories"): what a tensor allocation's memory is, as a
// v1::Category value (1..9; 0: none). An allocation's category byte is the value, with
// kFromObjects set when a TensorCategory named it (else it was inferred). Apart from
// lifetimes.h (which infers them) for the live view, which only reads the program's tags.
#pragma once

#include <cstdint>

namespace cumemtrace::internal {

constexpr int kCategoryCount = 10;  // indexed by v1::Category value; 0 is unused
constexpr uint8_t kFromObjects = 0x80;
// "parameter", "buffer", ... (summary.json's keys); "" for 0.
const char* CategoryName(uint8_t category);
// PyTorch's memory_viz name: "parameter", "optimizer_state", "input", "temporary",
// "activation", "gradient", "autograd_detail"; "unknown" for 0.
const char* MemoryVizCategoryName(uint8_t category);
// Which of two tags of one allocation wins: the higher (parameter > buffer >
// optimizer_state > gradient > input > the rest).
int TagPriority(uint8_t category);

}  // namespace cumemtrace::internal

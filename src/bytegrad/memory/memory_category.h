// What a block of device memory is for. Every live block has exactly one category, by this precedence:
// parameter > gathered_parameter > buffer > gradient > optimizer_state > communication > workspace >
// activation > autograd_temporary > other.
// A block is born with a category (the thread's CategoryScope: `autograd_temporary` inside backward,
// `workspace` for BLAS workspaces, `gathered_parameter` and `communication` in FSDP and DDP, else `other`)
// and gains or loses roles while it lives (registered as a module's parameter or buffer, made a leaf's
// .grad, kept as optimizer state, saved by an autograd node); its category is the highest of its birth
// category and its current roles.
//  - gathered_parameter: a parameter an FSDP all-gather made whole (its unsharded tensor), held while its
//    module runs; the shard it came from stays a `parameter`.
//  - communication: a buffer that exists to feed or receive a collective: FSDP's all-gather flats and
//    reduce-scatter input, DDP's gradient buckets without gradient_as_bucket_view, the broadcast flats,
//    the barrier's flag. Below gradient, so that a bucket or reduce-scatter output whose views became the
//    .grad counts as gradients.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace bytegrad {

enum class MemoryCategory : uint8_t {
  parameter,
  gathered_parameter,
  buffer,
  gradient,
  optimizer_state,
  communication,
  workspace,
  activation,
  autograd_temporary,
  other,
};
inline constexpr int kMemoryCategoryCount = 10;
inline constexpr std::array<MemoryCategory, kMemoryCategoryCount> kMemoryCategories = {
    MemoryCategory::parameter, MemoryCategory::gathered_parameter, MemoryCategory::buffer,
    MemoryCategory::gradient,  MemoryCategory::optimizer_state,    MemoryCategory::communication,
    MemoryCategory::workspace, MemoryCategory::activation,         MemoryCategory::autograd_temporary,
    MemoryCategory::other};

std::string_view category_name(MemoryCategory category);  // "parameter", "optimizer_state", ...

// Bytes per category, indexed by MemoryCategory.
using CategoryBytes = std::array<int64_t, kMemoryCategoryCount>;

// Sets one of the thread's settings below for the scope's lifetime and puts the one before back when the
// scope ends, so scopes nest. `setting` returns the thread's variable.
template <typename Value, Value& (*setting)()>
class ThreadSettingScope {
 public:
  explicit ThreadSettingScope(Value value) : previous_(setting()) { setting() = value; }
  ~ThreadSettingScope() { setting() = previous_; }
  ThreadSettingScope(const ThreadSettingScope&) = delete;
  ThreadSettingScope& operator=(const ThreadSettingScope&) = delete;

 private:
  Value previous_;
};

namespace detail {
MemoryCategory& thread_birth_category();
}  // namespace detail

// The category blocks allocated on this thread are born with, for the scope's lifetime (nestable).
using CategoryScope = ThreadSettingScope<MemoryCategory, detail::thread_birth_category>;
MemoryCategory current_birth_category();

// What the program is doing, for the peak report: forward (the default), backward (set by the autograd
// engine), optimizer_step (set by optimizers' step()).
enum class MemoryPhase : uint8_t { forward, backward, optimizer_step };
std::string_view phase_name(MemoryPhase phase);
namespace detail {
MemoryPhase& thread_phase();
}  // namespace detail
using PhaseScope = ThreadSettingScope<MemoryPhase, detail::thread_phase>;
MemoryPhase current_phase();

}  // namespace bytegrad

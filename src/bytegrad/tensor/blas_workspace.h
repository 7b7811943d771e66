// The BLAS workspaces PyTorch parks in the caching allocator, modelled for every device that has one
// (cuda for real; sim and meta simulate the H100 the goldens came from, so their figures match a card's):
//  - the cuBLAS workspace: allocated by the first matrix product a thread runs on a device and stream (on
//    that stream), never freed.
//    Size from CUBLAS_WORKSPACE_CONFIG (":SIZE:COUNT" pairs, KiB), default 4096 KiB x 8 = 32 MiB on
//    compute capability 9.x (H100, and sim/meta), 4096 KiB x 2 + 16 KiB x 8 = 8519680 B elsewhere.
//  - the cuBLASLt workspace: allocated by the first bias-fused product (addmm/linear with bias) a thread
//    runs, CUBLASLT_WORKSPACE_SIZE KiB (default 1024). Measured on PyTorch 2.11: with the cuBLAS workspace
//    configured to 0 (":0:0") this block is not allocated either, so it follows that setting.
// cpu has neither. Allocations are tagged "workspace".
//
// PyTorch keys both by cuBLAS handle, and handles belong to threads. CUDA backward runs on the autograd
// engine's device thread (one per device, shared by every thread that calls backward), so the first
// matrix product of a backward parks a second set of workspaces. bytegrad runs backward on the calling
// thread; the engine marks that stretch with a BlasHandleOwnerScope so the workspaces follow PyTorch's.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "bytegrad/core/device.h"
#include "bytegrad/core/scoped_value.h"
#include "bytegrad/kernels/gemm_args.h"
#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

struct BlasWorkspace {
  void* data = nullptr;  // nullptr when the configured size is 0 (or on meta)
  size_t bytes = 0;
};

// Throw std::invalid_argument naming the variable and its text when a number does not fit in 64 bits or
// the workspace total overflows (a CUBLAS_WORKSPACE_CONFIG without any ":SIZE:COUNT" pair keeps the default,
// as PyTorch does), or when CUBLASLT_WORKSPACE_SIZE is not a non-negative integer.
size_t blas_workspace_bytes(Device device);
size_t blas_lt_workspace_bytes(Device device);
// Reads both settings (CUBLAS_WORKSPACE_CONFIG or set_blas_workspace_config's, and CUBLASLT_WORKSPACE_SIZE),
// throwing as above when one is bad: the matrix products call it before they allocate anything.
void check_blas_settings(Device device);
// This thread's workspace on the device, allocated on first use.
BlasWorkspace blas_workspace(Device device);
BlasWorkspace blas_lt_workspace(Device device);
// The calling thread's own cuBLAS workspace on the device and its current stream if a product has parked it,
// else an empty one; allocates nothing. Kernels this thread runs on that stream between products may borrow
// it as scratch across several launches, which no figure sees (layer_norm_backward's partial sums). Its own,
// whichever handle owner is current: the autograd device thread's workspace is shared by every thread that
// runs a backward, and another thread's product could come between two launches that keep data in it.
BlasWorkspace parked_blas_workspace(Device device);
// Frees every workspace: this thread's and the autograd device thread's, on every device
// (torch._C._cuda_clearCublasWorkspaces()).
void clear_blas_workspaces();

// Frees the workspaces parked in `allocator` (this thread's and the autograd device thread's): for a scope
// that installed a fresh allocator and is giving it up (testing::FreshDevice).
void release_blas_workspaces(const CachingAllocator& allocator);

// Sets the cuBLAS workspaces in code, in CUBLAS_WORKSPACE_CONFIG's syntax, in place of the variable:
// set_blas_workspace_config(":0:0") turns both workspaces off (the goldens' setting), so a test's first
// matrix product allocates only its result; std::nullopt goes back to the variable (or PyTorch's default).
// Takes effect for workspaces not yet allocated (clear_blas_workspaces() drops those that are). Throws
// std::invalid_argument, keeping the previous setting, when the text is anything but ':SIZE:COUNT' pairs
// (stricter than the variable, where PyTorch warns and keeps its default when it finds no pair) or the
// total overflows.
void set_blas_workspace_config(std::optional<std::string> config);

// Whose handle (kernels/gemm_args.h's BlasHandleOwner), and so whose workspaces, BLAS calls on this
// thread use.
BlasHandleOwner current_blas_handle_owner();

// Sets the owner for its lifetime; nested scopes restore the outer owner when they end.
class BlasHandleOwnerScope {
 public:
  explicit BlasHandleOwnerScope(BlasHandleOwner owner);

 private:
  ScopedValue<BlasHandleOwner> scope_;
};

}  // namespace bytegrad

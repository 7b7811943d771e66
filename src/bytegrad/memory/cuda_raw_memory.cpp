// Segments from a real GPU: cudaMalloc / cudaFree / cudaMemGetInfo; for expandable segments, CUDA's virtual
// memory API (cuMemAddressReserve, cuMemCreate + cuMemMap + cuMemSetAccess per page, cuMemUnmap +
// cuMemRelease), reached through the runtime's driver entry points so nothing links against libcuda.
// The virtual memory path compiles here but has not run on a GPU yet (no GPU on the development machine).
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <string>
#include <type_traits>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/raw_memory.h"
#include "bytegrad/memory/virtual_address_space.h"

#ifdef BYTEGRAD_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "bytegrad/memory/cuda_runtime_check.h"
#endif

namespace bytegrad {

#ifdef BYTEGRAD_HAVE_CUDA
namespace {

using cuda_runtime::check;

void check(CUresult status, const char* what) {
  if (status != CUDA_SUCCESS)
    throw std::runtime_error(std::string("CUDA driver error ") + std::to_string(static_cast<int>(status)) + " in " +
                             what);
}

// The driver functions the virtual memory API needs, looked up once (CUDA 12.0 signatures).
struct VirtualMemoryApi {
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;

  static const VirtualMemoryApi& get() {
    static const VirtualMemoryApi api = [] {
      VirtualMemoryApi a;
      auto load = [](const char* name, auto& fn) {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult found{};
        check(cudaGetDriverEntryPointByVersion(name, &ptr, 12000, cudaEnableDefault, &found),
              "cudaGetDriverEntryPointByVersion");
        if (found != cudaDriverEntryPointSuccess || !ptr)
          throw std::runtime_error(std::string("expandable segments: the CUDA driver has no ") + name);
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(ptr);
      };
      load("cuMemAddressReserve", a.address_reserve);
      load("cuMemAddressFree", a.address_free);
      load("cuMemCreate", a.create);
      load("cuMemRelease", a.release);
      load("cuMemMap", a.map);
      load("cuMemUnmap", a.unmap);
      load("cuMemSetAccess", a.set_access);
      return a;
    }();
    return api;
  }
};

// Best fit's tie addresses on a real GPU. PyTorch breaks ties between equal free blocks by the address the
// driver gave each segment in its own process, and those addresses follow the host mappings around them:
// a Python process with PyTorch's thread pools lays its address map out differently from a C++ program,
// so bytegrad's own addresses would settle some ties the other way (GPT-2 small fp32 did). Ties therefore
// go by where the same segments would sit in a fresh PyTorch process, the model sim and meta allocate
// from (virtual_address_space.h), and cuda's figures are meta's for the same program, run after run.
// BYTEGRAD_CUDA_TIE_ADDRESSES=driver breaks them by this process's own addresses instead.
bool ties_by_driver_addresses() {
  const char* setting = std::getenv("BYTEGRAD_CUDA_TIE_ADDRESSES");
  if (!setting || !*setting || std::strcmp(setting, "model") == 0) return false;
  if (std::strcmp(setting, "driver") == 0) return true;
  throw std::invalid_argument(std::string("BYTEGRAD_CUDA_TIE_ADDRESSES: expected 'model' or 'driver', got '") +
                              setting + "'");
}

size_t device_total_bytes(int index) {
  check(cudaSetDevice(index), "cudaSetDevice");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total;
}

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int index)
      : index_(index),
        driver_ties_(ties_by_driver_addresses()),
        modelled_addresses_(uintptr_t{1} << 44, VirtualAddressSpace::span_for(device_total_bytes(index))) {}

  void* allocate(size_t bytes) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky error so the caller can flush the cache and retry
      return nullptr;
    }
    check(status, "cudaMalloc");
    if (!driver_ties_) tie_addresses_[ptr] = modelled_addresses_.allocate(bytes);
    return ptr;
  }

  void release(void* ptr, size_t bytes) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    check(cudaFree(ptr), "cudaFree");
    if (auto it = tie_addresses_.find(ptr); it != tie_addresses_.end()) {
      if (it->second != 0) modelled_addresses_.release(it->second, bytes);
      tie_addresses_.erase(it);
    }
  }

  uintptr_t tie_address(const void* segment) const override {
    auto it = tie_addresses_.find(segment);
    // 0: the model's span ran out (it is four times the card), so this segment keeps the driver's address.
    if (it == tie_addresses_.end() || it->second == 0) return reinterpret_cast<uintptr_t>(segment);
    return it->second;
  }

  void note_driver_allocations(uint32_t what) override {
    if (driver_ties_) return;
    if (threads_on_card_ == 0) {
      int sms = 0, threads = 0;
      check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index_), "cudaDeviceGetAttribute");
      check(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, index_), "cudaDeviceGetAttribute");
      threads_on_card_ = size_t(sms) * size_t(threads);
    }
    modelled_addresses_.note_driver_allocations(what, threads_on_card_);
  }
  // Ties follow the model's addresses, so its placement of the regions before the first launch is cuda's too.
  void set_early_regions(EarlyRegions placement) override { modelled_addresses_.set_early_regions(placement); }
  void set_host_map_holes(bool holes) override { modelled_addresses_.set_host_map_holes(holes); }
  bool early_regions_decided() const override { return !driver_ties_ && modelled_addresses_.early_regions_decided(); }

  uintptr_t reserve_addresses(size_t bytes) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    CUdeviceptr address = 0;
    check(VirtualMemoryApi::get().address_reserve(&address, bytes, 0, 0, 0), "cuMemAddressReserve");
    return static_cast<uintptr_t>(address);
  }

  void release_addresses(uintptr_t address, size_t bytes) override {
    check(VirtualMemoryApi::get().address_free(static_cast<CUdeviceptr>(address), bytes), "cuMemAddressFree");
  }

  // One physical allocation per page, as PyTorch makes them; when the device runs out part-way, the pages
  // created so far are released and nothing is mapped.
  bool map_pages(uintptr_t address, size_t bytes, size_t page_size) override {
    const VirtualMemoryApi& api = VirtualMemoryApi::get();
    check(cudaSetDevice(index_), "cudaSetDevice");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = index_;
    std::vector<CUmemGenericAllocationHandle> created;
    for (size_t offset = 0; offset < bytes; offset += page_size) {
      CUmemGenericAllocationHandle handle = 0;
      const CUresult status = api.create(&handle, page_size, &prop, 0);
      if (status == CUDA_ERROR_OUT_OF_MEMORY) {
        for (CUmemGenericAllocationHandle h : created) check(api.release(h), "cuMemRelease");
        return false;
      }
      check(status, "cuMemCreate");
      created.push_back(handle);
    }
    for (size_t i = 0; i < created.size(); ++i) {
      const uintptr_t page = address + i * page_size;
      check(api.map(static_cast<CUdeviceptr>(page), page_size, 0, created[i], 0), "cuMemMap");
      handles_[page] = created[i];
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = index_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(api.set_access(static_cast<CUdeviceptr>(address), bytes, &access, 1), "cuMemSetAccess");
    return true;
  }

  // Unlike cudaFree, unmapping does not wait for kernels still using the pages: synchronize first.
  void unmap_pages(uintptr_t address, size_t bytes, size_t page_size) override {
    const VirtualMemoryApi& api = VirtualMemoryApi::get();
    check(cudaSetDevice(index_), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (uintptr_t page = address; page < address + bytes; page += page_size) {
      auto it = handles_.find(page);
      if (it == handles_.end()) throw std::logic_error("unmap_pages: a page that is not mapped");
      check(api.unmap(static_cast<CUdeviceptr>(page), page_size), "cuMemUnmap");
      check(api.release(it->second), "cuMemRelease");
      handles_.erase(it);
    }
  }

  Info info() override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {free, total};
  }

 private:
  int index_;
  bool driver_ties_;
  VirtualAddressSpace modelled_addresses_;
  size_t threads_on_card_ = 0;                                 // SMs x threads per SM, read when first needed
  std::unordered_map<const void*, uintptr_t> tie_addresses_;   // segment -> its modelled address
  std::map<uintptr_t, CUmemGenericAllocationHandle> handles_;  // mapped page address -> its allocation
};

}  // namespace

std::unique_ptr<RawMemory> make_cuda_raw_memory(int index) { return std::make_unique<CudaRawMemory>(index); }

int cuda_compute_capability_major(int index) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major;
}

DeviceLaunchLimits cuda_launch_limits(int index) {
  DeviceLaunchLimits limits;
  if (cudaDeviceGetAttribute(&limits.multiprocessor_count, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits.max_threads_per_multiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor, index) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return limits;
}

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no GPU: report none
      return 0;
    }
    return n;
  }();
  return count;
}

#else

std::unique_ptr<RawMemory> make_cuda_raw_memory(int index) {
  throw std::runtime_error("cuda:" + std::to_string(index) +
                           " is not available: bytegrad was built without CUDA (nvcc was not found)");
}

int cuda_device_count() { return 0; }
int cuda_compute_capability_major(int) { return 0; }
DeviceLaunchLimits cuda_launch_limits(int) { return {}; }

#endif

}  // namespace bytegrad

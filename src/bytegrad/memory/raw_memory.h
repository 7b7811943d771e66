// Where segments come from: the small interface the caching allocator draws whole segments through
// (cudaMalloc/cudaFree on a real GPU), and, for expandable segments, address ranges with physical pages
// mapped into them on demand (CUDA's virtual memory API). Three implementations: a real CUDA device, host
// memory posing as a GPU of a chosen capacity (`sim`), and addresses without memory (`meta`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace bytegrad {

// What the CUDA driver allocates for itself from the addresses segments come from, as flags
// (RawMemory::note_driver_allocations; placed by virtual_address_space.h). Measured on the H100 with
// PyTorch 2.11 and driver 580 (tools/probes/driver_first_launch_probe.py):
enum DriverAllocation : uint32_t {
  // A kernel module's global variables (curand's tables: 2 x 100 KiB; most modules a few bytes), loaded
  // with the module at its first launch and packed into 2 MiB chunks: the first module to load takes one
  // (unless cuBLAS's chunk is there already), later ones fit in it.
  kModuleGlobals = 1,
  // At the first launch of most of PyTorch's elementwise, reduction, indexing and normalization kernels:
  // 512 MiB reserved below every region so far, its top 8 MiB mapped: 2 MiB the driver shares with the
  // host, 6 MiB left free. Being the lowest free range, those 6 MiB take the next small segments.
  kLaunchHeap = 2,
  // Stack for kernels that need it (reductions, indexing, losses: 32 bytes a thread), for every thread the
  // card can hold at once (132 x 2048 x 32 bytes = 8.25 MiB on an H100), at their first launch.
  kKernelStack = 4,
  // A new cuBLAS handle (a thread's first matrix product): 64 MiB, and 129 KiB from a 2 MiB chunk of its
  // own that later handles share.
  kBlasHandle = 8,
  // An NCCL communicator (a process group's first collective), measured in DDP processes of two ranks on two
  // H200s (docs/evidence/ddp_addresses/, session 26): NCCL's buffers take every free range among the
  // segments so far, and below them the driver leaves the layout the launch heap and kernel stack are part of
  // (VirtualAddressSpace::note_driver_allocations).
  kNcclCommunicator = 16,
};

// Where the driver puts the regions a program reserves before its first kernel launch that fit neither the
// first gaps nor the hole below the first small segment T (in a training program, `.to()`'s segments;
// virtual_address_space.h). Two placements were recorded (tools/probes/to_regions.py on
// docs/evidence/generated_segments/):
//  - in holes of the host's address map above T and its gaps, the 414 MiB stretch that the first launch
//    frees below T under them (the model: a descending series of regions above T);
//  - new regions below T - 414 MiB, under the stretch, which stays at [T - 414 MiB, T).
// Which one follows from the host's address map: host work before the launch that started PyTorch's CPU
// thread pool left a glibc malloc arena per pool thread there, 128 MiB apart, with holes between them
// (host_work.h: the op layer notes host loops PyTorch would run on the pool, e.g. nanoGPT's slow attention's
// torch.tril on the CPU; the SDPA model builds no mask). RawMemory::set_host_map_holes overrides that note;
// the other placement is still a
// second outcome, since thread timing moves the holes (and a program's own runs were seen to differ), as a
// tie between segments is (CachingAllocator::TieOrder).
enum class EarlyRegions {
  as_host_map,  // the placement the host map implies
  reversed,     // the other one
};

class RawMemory {
 public:
  struct Info {
    size_t free = 0;   // what cudaMemGetInfo would say is free on the device
    size_t total = 0;  // the device's total capacity
  };

  virtual ~RawMemory() = default;
  // One segment of `bytes`; nullptr when the device has no room (cudaErrorMemoryAllocation).
  // Any other failure throws.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
  // The address best fit breaks ties by for a segment `allocate` just returned (caching_allocator.h).
  // sim and meta place segments where the CUDA driver puts them in a fresh PyTorch process
  // (virtual_address_space.h), so their answer is the segment's own address; a real GPU answers from
  // the same model, because the driver's address in this process follows this process's host mappings,
  // not PyTorch's (cuda_raw_memory.cpp).
  virtual uintptr_t tie_address(const void* segment) const { return reinterpret_cast<uintptr_t>(segment); }
  // The driver's own allocations that a kernel launch or a new cuBLAS handle makes (DriverAllocation
  // flags, virtual_address_space.h): where segments are placed by the model (sim, meta, and cuda's tie
  // addresses) the model places these too, since they move later segments. A real GPU makes them itself.
  virtual void note_driver_allocations(uint32_t /*what*/) {}
  // Which placement of the regions reserved before the first launch the model follows (EarlyRegions; where
  // segment addresses are not modelled, nothing), and whether it decided anything: the first launch found such
  // regions below T - 414 MiB with the stretch still to place, so the other placement orders them differently.
  virtual void set_early_regions(EarlyRegions /*placement*/) {}
  // Whether the program's host work before its first kernel launch left holes in the process's address map
  // (EarlyRegions above); unless set, as host_thread_pool_started() says at the first launch (host_work.h).
  virtual void set_host_map_holes(bool /*holes*/) {}
  virtual bool early_regions_decided() const { return false; }

  // Expandable segments. An address range of `bytes` that holds no memory (cuMemAddressReserve); 0 when
  // no addresses are left.
  virtual uintptr_t reserve_addresses(size_t bytes);
  virtual void release_addresses(uintptr_t address, size_t bytes);
  // Backs [address, address + bytes) with physical pages of `page_size` (cuMemCreate + cuMemMap +
  // cuMemSetAccess per page), all or nothing: false, with nothing mapped, when the device has no room.
  // `bytes` is a multiple of `page_size`, the range inside one reservation and not mapped yet.
  virtual bool map_pages(uintptr_t address, size_t bytes, size_t page_size);
  // Gives mapped pages back (cuMemUnmap + cuMemRelease).
  virtual void unmap_pages(uintptr_t address, size_t bytes, size_t page_size);
  // Which bytes of a segment belong to a live block: host-backed memory (sim) tells AddressSanitizer, so
  // in a sanitizer build a write past a tensor into its neighbour or into cached memory is reported. A
  // no-op elsewhere.
  virtual void mark_in_use(void* /*ptr*/, size_t /*bytes*/, bool /*in_use*/) {}
  virtual Info info() = 0;
  // All memory this process holds on the device, driver context included (NVML's per-process figure),
  // when known.
  virtual std::optional<size_t> process_memory_in_use() { return std::nullopt; }
};

// PyTorch reports this total for the H100 80GB the goldens were measured on.
inline constexpr size_t kSimDefaultTotalBytes = 85017493504;
// On that card, cudaMemGetInfo showed 85017493504 - 84465090560 = 552402944 bytes in use with an empty
// cache (golden seed002 notes, mem_get_info): the CUDA context and driver reservations.
inline constexpr size_t kSimDefaultContextBytes = 552402944;
// What the driver holds outside PyTorch's allocator once a training program has launched its first kernels
// and made its first cuBLAS handle: total - free - memory_reserved() = 720175104 bytes (the context's
// 552402944, then 96468992 more at the first allocation's launches, then 71303168 with cuBLAS; cuBLASLt adds
// nothing). Measured on an H200 with PyTorch 2.11 and CUDA 13.0: tests/data/pytorch_probes/cuda_context.json
// (outside_allocator_bytes_after.cublas; tests/programs/card.cpp holds this constant to it). The H100's
// context there measured the same 552402944. bytegrad-estimate --card takes it off a card's total.
inline constexpr size_t kCudaDriverShareBytes = 720175104;

struct SimulatedCapacity {
  size_t total_bytes = kSimDefaultTotalBytes;
  size_t context_bytes = kSimDefaultContextBytes;  // held by the "driver": never available to segments
  // What kernels size their launches by (cudaDeviceProp): the H100's, so launch-dependent allocations
  // (reduction scratch) match the goldens'.
  int multiprocessor_count = 132;
  int max_threads_per_multiprocessor = 2048;
};

// A GPU simulated in host memory: segments are real (lazily committed) host pages, limited to the
// capacity's total minus its context reservation.
std::unique_ptr<RawMemory> make_host_backed_raw_memory(SimulatedCapacity capacity);
// Accounting only: hands out distinct, 2 MiB-aligned addresses and never touches memory.
std::unique_ptr<RawMemory> make_address_only_raw_memory(SimulatedCapacity capacity);
// cudaMalloc/cudaFree on device `index`; throws std::runtime_error when built without CUDA.
std::unique_ptr<RawMemory> make_cuda_raw_memory(int index);

}  // namespace bytegrad

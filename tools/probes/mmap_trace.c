// LD_PRELOAD interposer for tools/probes/driver_placement_probe.py --trace: logs every mmap / munmap /
// mremap and cudaMalloc / cudaFree / cudaMemcpyAsync of the process (with the calling library) to
// $MMAP_TRACE_FILE, so the probe can see what the CUDA driver maps around the segments it places.
// Build: gcc -O2 -shared -fPIC -o /tmp/mmap_trace.so tools/probes/mmap_trace.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int trace_fd = -1;
static __thread int inside;

static void emit(const char* kind, uintptr_t addr, size_t len, uintptr_t ret, void* caller) {
  if (inside) return;
  inside = 1;
  if (trace_fd < 0) {
    const char* path = getenv("MMAP_TRACE_FILE");
    if (path) trace_fd = (int)syscall(SYS_open, path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  if (trace_fd >= 0) {
    Dl_info info;
    const char* lib = "?";
    if (caller && dladdr(caller, &info) && info.dli_fname) {
      lib = strrchr(info.dli_fname, '/');
      lib = lib ? lib + 1 : info.dli_fname;
    }
    char line[256];
    int n = snprintf(line, sizeof line, "%s %lx %zu %lx %ld %s\n", kind, (unsigned long)addr, len, (unsigned long)ret,
                     (long)syscall(SYS_gettid), lib);
    syscall(SYS_write, trace_fd, line, n);
  }
  inside = 0;
}

// Writes the anonymous mappings of at least 1 MiB (what the driver reserves or maps) to the log.
static void dump_maps(const char* why) {
  if (inside || trace_fd < 0 || !getenv("MMAP_TRACE_MAPS")) return;
  inside = 1;
  static char buf[1 << 20];
  int fd = (int)syscall(SYS_open, "/proc/self/maps", O_RDONLY, 0);
  long n = 0, r;
  while (fd >= 0 && (r = syscall(SYS_read, fd, buf + n, sizeof buf - 1 - n)) > 0) n += r;
  if (fd >= 0) syscall(SYS_close, fd);
  buf[n] = 0;
  char head[64];
  int h = snprintf(head, sizeof head, "maps %s\n", why);
  syscall(SYS_write, trace_fd, head, h);
  for (char* line = buf; line && *line;) {
    char* end = strchr(line, '\n');
    if (end) *end = 0;
    unsigned long lo, hi, inode;
    char perms[8], dev[16];
    unsigned long off;
    int consumed = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perms, &off, dev, &inode, &consumed) >= 6 &&
        inode == 0 && hi - lo >= (1ul << 20) && line[consumed] == 0) {
      char out[96];
      int k = snprintf(out, sizeof out, "  %lx-%lx %s %lu\n", lo, hi, perms, (hi - lo) >> 20);
      syscall(SYS_write, trace_fd, out, k);
    }
    line = end ? end + 1 : 0;
  }
  inside = 0;
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  void* r = (void*)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  char kind[32];
  snprintf(kind, sizeof kind, "mmap%s%s", prot == PROT_NONE ? "-none" : "", fd >= 0 ? "-fd" : "");
  emit(kind, (uintptr_t)addr, len, (uintptr_t)r, __builtin_return_address(0));
  if (prot == PROT_NONE && len >= (1u << 20)) dump_maps("after mmap-none");
  return r;
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

int munmap(void* addr, size_t len) {
  int r = (int)syscall(SYS_munmap, addr, len);
  emit("munmap", (uintptr_t)addr, len, (uintptr_t)r, __builtin_return_address(0));
  return r;
}

void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  void* new_addr = va_arg(ap, void*);
  va_end(ap);
  void* r = (void*)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
  emit("mremap", (uintptr_t)old, new_len, (uintptr_t)r, __builtin_return_address(0));
  return r;
}

typedef int (*malloc_fn)(void**, size_t);
int cudaMalloc(void** ptr, size_t size) {
  static malloc_fn real;
  if (!real) real = (malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
  emit("cudaMalloc-begin", 0, size, 0, __builtin_return_address(0));
  dump_maps("at cudaMalloc");
  int r = real(ptr, size);
  emit("cudaMalloc", 0, size, r == 0 ? (uintptr_t)*ptr : 0, __builtin_return_address(0));
  return r;
}
typedef int (*free_fn)(void*);
int cudaFree(void* ptr) {
  static free_fn real;
  if (!real) real = (free_fn)dlsym(RTLD_NEXT, "cudaFree");
  emit("cudaFree", (uintptr_t)ptr, 0, 0, __builtin_return_address(0));
  return real(ptr);
}
typedef int (*copy_fn)(void*, const void*, size_t, int, void*);
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* stream) {
  static copy_fn real;
  if (!real) real = (copy_fn)dlsym(RTLD_NEXT, "cudaMemcpyAsync");
  emit("cudaMemcpyAsync-begin", (uintptr_t)dst, n, (uintptr_t)src, __builtin_return_address(0));
  dump_maps("at cudaMemcpyAsync");
  int r = real(dst, src, n, kind, stream);
  emit("cudaMemcpyAsync", (uintptr_t)dst, n, (uintptr_t)src, __builtin_return_address(0));
  dump_maps("after cudaMemcpyAsync");
  return r;
}

#include "bytegrad/kernels/parallel.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace bytegrad {

namespace {

// The processors this process may run on: its affinity mask, else what the standard library reports.
int available_processors() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    const int count = CPU_COUNT(&mask);
    if (count > 0) return count;
  }
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

int default_num_threads() {
  if (const char* value = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && parsed > 0 && parsed <= 4096) return static_cast<int>(parsed);
  }
  return available_processors();
}

std::atomic<int>& num_threads_setting() {
  static std::atomic<int> setting{default_num_threads()};
  return setting;
}

// Set on pool threads, and on a caller for the length of its parallel_for: a parallel_for there runs inline.
thread_local bool inside_parallel_region = false;

// One parallel_for's chunks, shared by the caller and the helpers that join it.
struct Job {
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t begin = 0, end = 0, chunk_size = 0, chunk_count = 0;
  int helpers_wanted = 0;
  std::atomic<int> helpers_joined{0};
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int64_t> finished_chunks{0};
  std::mutex mutex;  // guards error; taken to wake the caller
  std::condition_variable all_finished;
  std::exception_ptr error;

  // Takes chunks until none is left (chunk i starts at begin + i * chunk_size; the last one ends at end). A chunk is
  // only claimed before finished_chunks reaches chunk_count, and the caller returns only after that, so body is never
  // called once the caller has returned.
  void run_chunks() {
    for (int64_t chunk = next_chunk.fetch_add(1); chunk < chunk_count; chunk = next_chunk.fetch_add(1)) {
      const int64_t chunk_begin = begin + chunk * chunk_size;
      try {
        (*body)(chunk_begin, chunk + 1 == chunk_count ? end : chunk_begin + chunk_size);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      if (finished_chunks.fetch_add(1) + 1 == chunk_count) {
        const std::lock_guard<std::mutex> lock(mutex);
        all_finished.notify_all();
      }
    }
  }
};

// Helper threads, started on first need and kept (sleeping on a condition variable) for the process's life.
class ThreadPool {
 public:
  static ThreadPool& instance() {
    // Never destroyed: helpers may still be asleep in wait() when static destructors run at exit.
    static auto* pool = new ThreadPool();
    return *pool;
  }

  // Runs `job` on the calling thread and up to job->helpers_wanted helpers; returns when every chunk is done.
  void run(const std::shared_ptr<Job>& job) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      // A new helper counts from the generation before this job's, so this job is the first it sees.
      while (static_cast<int>(helpers_.size()) < job->helpers_wanted)
        helpers_.emplace_back([this, seen = generation_] { serve(seen); });
      current_job_ = job;
      ++generation_;
    }
    work_available_.notify_all();
    job->run_chunks();
    {
      std::unique_lock<std::mutex> lock(job->mutex);
      job->all_finished.wait(lock, [&] { return job->finished_chunks.load() == job->chunk_count; });
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (current_job_ == job) current_job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

  // Held by the one parallel_for using the pool; another thread's parallel_for meanwhile runs inline.
  std::mutex& submit_mutex() { return submit_mutex_; }

  // After fork() the child has none of the parent's helpers: a pool made in another process is not used.
  bool usable_in_this_process() const { return owner_pid_ == getpid(); }

 private:
  ThreadPool() : owner_pid_(getpid()) {}

  void serve(uint64_t seen) {
    inside_parallel_region = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_available_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      const std::shared_ptr<Job> job = current_job_;
      if (!job) continue;
      lock.unlock();
      if (job->helpers_joined.fetch_add(1) < job->helpers_wanted) job->run_chunks();
      lock.lock();
    }
  }

  const pid_t owner_pid_;
  std::mutex submit_mutex_;
  std::mutex mutex_;  // guards helpers_, current_job_, generation_
  std::condition_variable work_available_;
  std::vector<std::thread> helpers_;
  std::shared_ptr<Job> current_job_;
  uint64_t generation_ = 0;
};

}  // namespace

int get_num_threads() { return num_threads_setting().load(std::memory_order_relaxed); }

void set_num_threads(int num_threads) {
  if (num_threads < 1)
    throw std::invalid_argument(
        fmt::format("set_num_threads: expected a positive number of threads, got {}", num_threads));
  num_threads_setting().store(num_threads, std::memory_order_relaxed);
}

namespace parallel {

void parallel_for(int64_t begin, int64_t end, int64_t grain, int64_t align,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  align = std::max<int64_t>(align, 1);
  const int64_t length = end - begin;
  const int64_t threads = std::min<int64_t>(get_num_threads(), length / grain);
  if (threads < 2 || inside_parallel_region) return body(begin, end);

  ThreadPool& pool = ThreadPool::instance();
  if (!pool.usable_in_this_process()) return body(begin, end);
  std::unique_lock<std::mutex> submit(pool.submit_mutex(), std::try_to_lock);
  if (!submit.owns_lock()) return body(begin, end);

  // A few chunks a thread, so that when a helper gets no core the caller finishes its share in pieces.
  constexpr int64_t kChunksPerThread = 4;
  const int64_t wanted_chunks = std::min(length / grain, threads * kChunksPerThread);
  int64_t chunk_size = (length + wanted_chunks - 1) / wanted_chunks;
  chunk_size = (chunk_size + align - 1) / align * align;

  auto job = std::make_shared<Job>();
  job->body = &body;
  job->begin = begin;
  job->end = end;
  job->chunk_size = chunk_size;
  job->chunk_count = length / chunk_size;  // the last chunk takes the remainder: no chunk below the grain
  job->helpers_wanted = static_cast<int>(std::min<int64_t>(threads, job->chunk_count) - 1);
  if (job->helpers_wanted < 1) return body(begin, end);

  inside_parallel_region = true;
  try {
    pool.run(job);
  } catch (...) {
    inside_parallel_region = false;
    throw;
  }
  inside_parallel_region = false;
}

}  // namespace parallel
}  // namespace bytegrad

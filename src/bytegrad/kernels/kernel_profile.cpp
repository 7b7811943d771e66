#include "bytegrad/kernels/kernel_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace bytegrad {

namespace {

struct Totals {
  int64_t calls = 0;
  double ms = 0;
};

struct Profiler {
  std::mutex mutex;
  std::map<std::string, Totals> by_key;
  std::map<std::string, Totals> by_label;
  std::vector<void (*)()> flushes;
  bool reported = false;
};

Profiler& profiler() {
  static Profiler* p = new Profiler;  // never destroyed: the exit report may run after static destructors
  return *p;
}

thread_local std::string current_label;

void flush_all() {
  std::vector<void (*)()> flushes;
  {
    std::lock_guard<std::mutex> lock(profiler().mutex);
    flushes = profiler().flushes;
  }
  for (auto flush : flushes) flush();
}

std::vector<KernelProfileRow> sorted_rows(const std::map<std::string, Totals>& m) {
  std::vector<KernelProfileRow> rows;
  rows.reserve(m.size());
  for (const auto& [key, t] : m) rows.push_back({key, t.calls, t.ms});
  std::sort(rows.begin(), rows.end(), [](const KernelProfileRow& a, const KernelProfileRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.key < b.key;
  });
  return rows;
}

void report_at_exit() {
  if (profiler().reported) return;
  const KernelProfile p = kernel_profile();
  if (p.by_key.empty()) return;
  std::fputs(kernel_profile_report().c_str(), stderr);
}

}  // namespace

namespace kernel_profile_detail {
bool read_enabled() {
  const char* v = std::getenv("BYTEGRAD_PROFILE_KERNELS");
  const bool on = v && *v && std::string_view(v) != "0";
  if (on) std::atexit(report_at_exit);
  return on;
}
}  // namespace kernel_profile_detail

KernelProfileLabel::KernelProfileLabel(std::string_view label) {
  if (kernel_profiling_enabled()) scope_.emplace(current_label, std::string(label));
}

const std::string& kernel_profile_label() { return current_label; }

void kernel_profile_add(const std::string& key, const std::string& label, double ms) {
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mutex);
  Totals& k = p.by_key[key];
  k.calls += 1;
  k.ms += ms;
  Totals& l = p.by_label[label + " | " + key.substr(0, key.find(' ', key.find(' ') + 1))];
  l.calls += 1;
  l.ms += ms;
}

void kernel_profile_register_flush(void (*flush)()) {
  std::lock_guard<std::mutex> lock(profiler().mutex);
  auto& f = profiler().flushes;
  if (std::find(f.begin(), f.end(), flush) == f.end()) f.push_back(flush);
}

KernelProfile kernel_profile() {
  flush_all();
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mutex);
  KernelProfile out;
  out.by_key = sorted_rows(p.by_key);
  out.by_label = sorted_rows(p.by_label);
  for (const KernelProfileRow& r : out.by_key) out.total_ms += r.total_ms;
  return out;
}

void kernel_profile_reset() {
  flush_all();
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.by_key.clear();
  p.by_label.clear();
}

std::string kernel_profile_report(int steps, size_t top) {
  const KernelProfile p = kernel_profile();
  profiler().reported = true;
  const double per = steps > 0 ? 1.0 / steps : 1.0;
  std::string out;
  auto table = [&](const char* title, const std::vector<KernelProfileRow>& rows) {
    out += fmt::format("{:<64} {:>9} {:>11} {:>10} {:>6}\n", title, "calls", "total ms", "ms/step", "%");
    size_t shown = 0;
    for (const KernelProfileRow& r : rows) {
      if (top && shown++ == top) break;
      out += fmt::format("{:<64} {:>9} {:>11.3f} {:>10.3f} {:>6.2f}\n", r.key.substr(0, 64), r.calls, r.total_ms,
                         r.total_ms * per, p.total_ms > 0 ? 100.0 * r.total_ms / p.total_ms : 0.0);
    }
  };
  out += fmt::format("kernel profile: {:.3f} ms in backend calls over {} step(s), {:.3f} ms per step\n", p.total_ms,
                     steps, p.total_ms * per);
  table("by backend call (method op dtype)", p.by_key);
  out += "\n";
  table("by label (autograd node / optimizer / forward op) | method op", p.by_label);
  return out;
}

}  // namespace bytegrad

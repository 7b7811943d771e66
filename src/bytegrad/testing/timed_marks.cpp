#include "bytegrad/testing/timed_marks.h"

#include <sstream>
#include <stdexcept>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/testing/fresh_device.h"

namespace bytegrad::testing {

namespace {

struct FigureName {
  const char* key;
  const char* shown;  // as describe_timed_marks prints it
  bool bytes;
};

const std::vector<FigureName>& figure_names() {
  static const std::vector<FigureName> names = {
      {"allocated_bytes.all.current", "allocated", true}, {"reserved_bytes.all.current", "reserved", true},
      {"active_bytes.all.current", "active", true},       {"inactive_split_bytes.all.current", "inactive_split", true},
      {"allocation.all.current", "blocks", false},        {"active.all.current", "active blocks", false},
      {"segment.all.current", "segments", false},         {"allocated_bytes.all.peak", "max_allocated", true},
      {"reserved_bytes.all.peak", "max_reserved", true},  {"num_sync_all_streams", "num_sync_all_streams", false},
      {"num_alloc_retries", "num_alloc_retries", false},  {"num_ooms", "num_ooms", false},
      {"num_device_alloc", "num_device_alloc", false},    {"num_device_free", "num_device_free", false},
  };
  return names;
}

// "reserved 20.00 MiB (20971520 B)" / "segments 1".
std::string shown(const FigureName& name, int64_t value) {
  return std::string(name.shown) + " " + (name.bytes ? human_bytes(value) : std::to_string(value));
}

// Sets the device's policy for a scope and puts the previous one back, even when the program throws.
class TimingScope {
 public:
  TimingScope(Device device, SimulatedTiming timing) : device_(device), previous_(simulated_timing(device)) {
    set_simulated_timing(device, timing);
  }
  ~TimingScope() { set_simulated_timing(device_, previous_); }
  TimingScope(const TimingScope&) = delete;
  TimingScope& operator=(const TimingScope&) = delete;

 private:
  Device device_;
  SimulatedTiming previous_;
};

std::vector<std::pair<std::string, MarkFigures>> run_under(Device device, SimulatedTiming timing,
                                                           const std::function<void(MarkRecorder&)>& program,
                                                           std::optional<SimulatedCapacity> capacity) {
  FreshDevice fresh(device, capacity);  // first: its restart waits for work queued before the run
  TimingScope scope(device, timing);
  MarkRecorder recorder(device);
  program(recorder);
  return recorder.marks();
}

std::string labels(const std::vector<std::pair<std::string, MarkFigures>>& marks) {
  std::string out;
  for (const auto& [label, figures] : marks) out += (out.empty() ? "'" : ", '") + label + "'";
  return out.empty() ? "none" : out;
}

}  // namespace

void MarkRecorder::mark(const std::string& label) {
  const auto stats = memory_stats(device_);
  MarkFigures figures;
  for (const FigureName& name : figure_names()) {
    auto it = stats.find(name.key);
    figures[name.key] = it == stats.end() ? 0 : it->second;
  }
  marks_.emplace_back(label, std::move(figures));
}

const std::vector<std::string>& timed_mark_figure_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> made;
    for (const FigureName& name : figure_names()) made.emplace_back(name.key);
    return made;
  }();
  return keys;
}

std::vector<std::string> TimedMark::differing() const {
  std::vector<std::string> keys;
  for (const std::string& key : timed_mark_figure_keys()) {
    auto pending = if_work_pending.find(key), done = if_work_done.find(key);
    const int64_t a = pending == if_work_pending.end() ? 0 : pending->second;
    const int64_t b = done == if_work_done.end() ? 0 : done->second;
    if (a != b) keys.push_back(key);
  }
  return keys;
}

std::vector<TimedMark> marks_under_both_timings(Device device, const std::function<void(MarkRecorder&)>& program,
                                                std::optional<SimulatedCapacity> capacity) {
  if (device.type != DeviceType::sim && device.type != DeviceType::meta)
    throw std::invalid_argument("marks_under_both_timings(" + device.str() +
                                "): only a simulated device (sim or meta) can run under both timings");
  if (!program) throw std::invalid_argument("marks_under_both_timings: no program given");
  const auto pending = run_under(device, SimulatedTiming::work_pending_until_waited, program, capacity);
  const auto done = run_under(device, SimulatedTiming::work_done_at_launch, program, capacity);
  bool same_marks = pending.size() == done.size();
  for (size_t i = 0; same_marks && i < pending.size(); ++i) same_marks = pending[i].first == done[i].first;
  if (!same_marks)
    throw std::runtime_error("marks_under_both_timings: the program made different marks under the two timings (" +
                             labels(pending) + " with work pending until waited for; " + labels(done) +
                             " with work done at launch): its marks cannot be compared one by one");
  std::vector<TimedMark> marks;
  for (size_t i = 0; i < pending.size(); ++i) {
    TimedMark m{pending[i].first, pending[i].second, done[i].second, false};
    m.timing_dependent = !m.differing().empty();
    marks.push_back(std::move(m));
  }
  return marks;
}

std::string describe_timed_marks(const std::vector<TimedMark>& marks) {
  const auto& names = figure_names();
  auto find = [&](const std::string& key) -> const FigureName& {
    for (const FigureName& name : names)
      if (key == name.key) return name;
    return names.front();  // unreachable: differing() yields only these keys
  };
  std::ostringstream out;
  for (const TimedMark& m : marks) {
    if (!m.timing_dependent) {
      out << m.label << ": " << shown(names[0], m.if_work_pending.at(names[0].key)) << ", "
          << shown(names[1], m.if_work_pending.at(names[1].key)) << "\n";
      continue;
    }
    std::string if_pending, if_done;
    for (const std::string& key : m.differing()) {
      const FigureName& name = find(key);
      if_pending += (if_pending.empty() ? "" : ", ") + shown(name, m.if_work_pending.at(key));
      if_done += (if_done.empty() ? "" : ", ") + shown(name, m.if_work_done.at(key));
    }
    out << m.label << ": depends on GPU timing\n"
        << "  if queued work is still pending: " << if_pending << "\n"
        << "  if it has finished:             " << if_done << "\n";
  }
  return out.str();
}

}  // namespace bytegrad::testing

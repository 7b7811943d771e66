// bytegrad-walkthrough: the main job. Replays every seed document's program on a device and prints, mark
// by mark, PyTorch's figure (shared/golden/scenarios), bytegrad's, and what changed in between (which
// ops' blocks appeared or were freed, from the allocator's history).
//
//   bytegrad-walkthrough [NAME|all]... [--device sim|meta|cuda] [--default-workspace] [--expandable-segments]
//                        [--json] [--list] [--memory-viz DIR] [--html DIR]
//
// NAME is a seed program or a GPT-2 one (g_gpt2_tiny_fp32, g_gpt2_small_fp32: run by name, not by "all");
// several names run one after another, in the order given.
// --json prints one {"name", "steps": [{"label", "allocated", "reserved", "max_allocated",
// "max_reserved", "segments", "blocks", "requested", "inactive_split", "ledger"}]} object per scenario, one per line.
// The seed documents' figures are PyTorch's with CUBLAS_WORKSPACE_CONFIG=:0:0 (shared/golden/scenarios), so that is the
// default here.
// --default-workspace runs with PyTorch's default cuBLAS workspaces instead (the variable unset) and
// compares with shared/golden/scenarios-default-workspace: the forward thread's 32 MiB (+1 MiB cuBLASLt)
// and the autograd device thread's own 32 MiB in backward.
// --expandable-segments adds expandable_segments:True to BYTEGRAD_ALLOC_CONF (PyTorch's
// PYTORCH_CUDA_ALLOC_CONF syntax; the variable alone does the same) and compares with
// shared/golden/scenarios-expandable: pages mapped into one reserved range per pool, no segments. There is
// no golden set with both it and --default-workspace; that combination runs without a comparison.
// --memory-viz DIR records each scenario's allocator history and writes DIR/<scenario>.json for PyTorch's
// viewer (https://pytorch.org/memory_viz; reports/memory_viz.h). A scenario that reconfigures its device
// (seed003_code_a_small_card) is recorded from its first mark on; blocks made before it show as allocated
// before recording.
// --html DIR writes DIR/<scenario>.html, bytegrad's memory report of each scenario (reports/memory_report.h:
// the timeline stacked by category with the marks, the peak, the allocator's state at any event, the marks'
// figures), and DIR/index.html linking them. Each page is one self-contained file that opens offline.
//
// Exit status: 0 when every mark equals PyTorch's; 1 when a mark differs or on an error (its message on
// stderr); 2 on a bad argument (one line naming it and what is accepted); 77 for --device cuda without a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/reports/memory_report.h"
#include "bytegrad/reports/memory_viz.h"
#include "programs/checks.h"
#include "programs/mark_notes.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/reports/memory_story.h"
#include "programs/registry.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

struct Options {
  std::vector<std::string> names;  // run in the order given; none (or "all") is every seed program
  // cuda where a GPU exists; without one meta, which keeps every figure exact and answers in seconds (sim
  // computes every value on the CPU too: seed003 alone draws 4 GB of random numbers).
  Device device = cuda_is_available() ? Device{DeviceType::cuda, 0} : kMeta;
  bool device_chosen = false;  // --device given
  bool json = false;
  bool default_workspace = false;    // PyTorch's default cuBLAS workspaces, against scenarios-default-workspace
  bool expandable_segments = false;  // BYTEGRAD_ALLOC_CONF has expandable_segments:True: scenarios-expandable
  std::string memory_viz_dir;        // where to write each scenario's memory_viz JSON ("" = none)
  std::string html_dir;              // where to write each scenario's HTML report ("" = none)
};

// A line of the --html index: a scenario's page and what it found.
struct ReportLink {
  std::string name;
  size_t marks = 0;
  int64_t peak = 0;
  std::string verdict;  // "all 14 marks equal PyTorch's", "2 of 14 marks differ from PyTorch", ""
};
std::vector<ReportLink> report_links;

std::string json_line(const ScenarioRecorder& r) {
  json::Value steps = json::array();
  for (const GoldenStep& s : r.steps()) {
    json::Value step = json::object();
    step.add("label", json::string(s.label))
        .add("allocated", json::integer(s.allocated))
        .add("reserved", json::integer(s.reserved))
        .add("max_allocated", json::integer(s.max_allocated))
        .add("max_reserved", json::integer(s.max_reserved))
        .add("segments", json::integer(s.segments))
        .add("blocks", json::integer(s.blocks))
        .add("requested", json::integer(s.requested))
        .add("inactive_split", json::integer(s.inactive_split));
    json::Value ledger = json::object();  // allocated by category: the parts sum to "allocated"
    for (MemoryCategory c : kMemoryCategories)
      ledger.add(std::string(category_name(c)), json::integer(s.ledger[static_cast<size_t>(c)]));
    step.add("ledger", std::move(ledger));
    steps.push_back(std::move(step));
  }
  json::Value line = json::object();
  line.add("name", json::string(r.name())).add("steps", std::move(steps));
  return json::dump(line);
}

// "4194304" when both agree, "4194304 (PyTorch 4194816)" when they do not.
std::string figure(int64_t ours, const GoldenStep* golden, int64_t GoldenStep::*field) {
  if (!golden || golden->*field == ours) return std::to_string(ours);
  return fmt::format("{} (PyTorch {})", ours, golden->*field);
}

// A byte figure for people: "4.00 MiB (4194304 B)", with PyTorch's beside it when they differ.
std::string bytes_figure(int64_t ours, const GoldenStep* golden, int64_t GoldenStep::*field) {
  if (!golden || golden->*field == ours) return human_bytes(ours);
  return fmt::format("{} (PyTorch {})", human_bytes(ours), human_bytes(golden->*field));
}

// The marks at which `program`, run again on meta (whose figures are sim's and cuda's) with another placement,
// differs from `ran`: "label (first difference)".
std::vector<std::string> marks_differing(const Program& program, const ScenarioRecorder& ran,
                                         CachingAllocator::TieOrder ties, CachingAllocator::EarlyRegions early) {
  fresh_process_state(kMeta);
  caching_allocator(kMeta).set_tie_order(ties);
  caching_allocator(kMeta).set_early_regions(early);
  ScenarioRecorder other(program.name, kMeta);
  program.run(other);
  if (program.needs_simulated_device) configure_simulated_device(kMeta, SimulatedCapacity{});
  fresh_process_state(kMeta);  // a new allocator: the default placement again
  std::vector<std::string> differing;
  for (size_t i = 0; i < std::min(ran.steps().size(), other.steps().size()); ++i) {
    const std::vector<std::string> d = step_differences(other.steps()[i], ran.steps()[i]);
    if (!d.empty()) differing.push_back(ran.steps()[i].label + " (" + d.front() + ")");
  }
  return differing;
}

std::string differing_text(const std::vector<std::string>& differing) {
  if (differing.empty()) return "every mark is the same\n";
  std::string line = fmt::format("{} marks differ, where PyTorch's run could too:", differing.size());
  for (size_t i = 0; i < differing.size() && i < 3; ++i) line += (i ? "; " : " ") + differing[i];
  return line + (differing.size() > 3 ? "; ...\n" : "\n");
}

// Best fit gives a tie between equal free blocks to the lower address, and PyTorch's addresses come from the
// CUDA driver (docs/status.md). When the run had such ties, the same program again with every tie the other
// way: which marks would then differ. Likewise when segments made before the first kernel launch met the
// stretch that launch frees (CachingAllocator::EarlyRegions): the run with them placed the other way.
std::string placement_line(const Program& program, const ScenarioRecorder& ran, int64_t ties, bool early) {
  using Ties = CachingAllocator::TieOrder;
  using Early = CachingAllocator::EarlyRegions;
  std::string line;
  if (ties > 0)
    line += fmt::format("   placement: {} {} equal free blocks, taken by address; with ties the other way ", ties,
                        ties == 1 ? "request found" : "requests found") +
            differing_text(marks_differing(program, ran, Ties::highest_address, Early::as_host_map));
  if (early)
    line +=
        "   placement: segments made before the first launch, where the driver puts them; with them placed the "
        "other way against the stretch that launch frees " +
        differing_text(marks_differing(program, ran, Ties::lowest_address, Early::reversed));
  return line;
}

int walk(const Program& program, const Options& options) {
  fresh_process_state(options.device);
  std::map<std::string, GoldenStep> golden;
  const bool has_golden = program.has_golden && !(options.default_workspace && options.expandable_segments);
  if (has_golden)
    for (const GoldenStep& s : read_golden_scenario(
             golden_scenario_path(program.name, options.default_workspace, options.expandable_segments)))
      golden[s.label] = s;

  ScenarioRecorder r(program.name, options.device);
  int differing = 0;
  {
    // The story reads the history for the text output and keeps the marks for --html.
    auto story = options.json && options.html_dir.empty() ? nullptr : std::make_unique<MemoryStory>(options.device);
    // For --memory-viz: keep the device's current allocator recording (a reconfigured device has a new one).
    auto keep_recording = [&] {
      if (options.memory_viz_dir.empty()) return;
      CachingAllocator& allocator = caching_allocator(options.device);
      if (!allocator.history_enabled()) allocator.record_history(true);
    };
    keep_recording();
    if (!options.json) {
      std::cout << fmt::format("\n== {} on {}{}\n", program.name, options.device.str(),
                               has_golden           ? ""
                               : program.has_golden ? " (no PyTorch golden with these settings)"
                                                    : " (no PyTorch golden: a bytegrad-only scenario)");
    }
    int64_t previous = 0;
    CategoryBytes previous_ledger{};
    r.on_mark([&](const GoldenStep& s) {
      keep_recording();
      auto it = golden.find(s.label);
      const GoldenStep* want = it == golden.end() ? nullptr : &it->second;
      const bool same = want && step_differences(s, *want).empty();
      if (want && !same) ++differing;
      // The note (why the mark looks as it does) goes into the story too: the HTML report shows it with the mark.
      const std::string note = options.expandable_segments ? "" : mark_note(program.name, s.label);
      const std::string change = story ? story->mark(s.label, note).str() : "";
      if (!options.json) {
        std::cout << fmt::format(
            "{} {:<26} allocated {}  reserved {}  peak {}  segments {}  blocks {}\n",
            want ? (same ? "ok" : "!!") : "  ", s.label, bytes_figure(s.allocated, want, &GoldenStep::allocated),
            bytes_figure(s.reserved, want, &GoldenStep::reserved),
            bytes_figure(s.max_allocated, want, &GoldenStep::max_allocated),
            figure(s.segments, want, &GoldenStep::segments), figure(s.blocks, want, &GoldenStep::blocks));
        const int64_t delta = s.allocated - previous;
        std::cout << fmt::format("   {:<26} {}{}: {}\n", "", delta > 0 ? "+" : "", human_bytes(delta), change);
        std::string by_category;  // what each category did since the previous mark
        for (MemoryCategory c : kMemoryCategories) {
          const int64_t change = s.ledger[static_cast<size_t>(c)] - previous_ledger[static_cast<size_t>(c)];
          if (change != 0)
            by_category += fmt::format("{}{}{} {}", by_category.empty() ? "" : ", ", change > 0 ? "+" : "",
                                       human_bytes(change), category_name(c));
        }
        if (!by_category.empty()) std::cout << fmt::format("   {:<26} by category: {}\n", "", by_category);
        // The notes explain the runs without expandable segments (segments, their sizes and splits).
        if (!note.empty()) std::cout << fmt::format("   {:<26} {}\n", "", note);
        if (!s.message.empty()) std::cout << "   error: " << s.message << '\n';
        if (!s.explanation.empty()) {  // indented under the error, line by line
          std::istringstream lines(s.explanation);
          for (std::string line; std::getline(lines, line);) std::cout << "   | " << line << '\n';
        }
        std::cout << std::flush;  // progress shows as it happens, also through a pipe
      }
      previous = s.allocated;
      previous_ledger = s.ledger;
    });
    program.run(r);
    if (!options.html_dir.empty()) {
      ReportLink link{program.name, r.steps().size(), max_memory_allocated(options.device), ""};
      if (has_golden)
        link.verdict = differing ? fmt::format("{} of {} marks differ from PyTorch", differing, r.steps().size())
                                 : fmt::format("all {} marks equal PyTorch's, every figure", r.steps().size());
      MemoryReportOptions report;
      report.title = fmt::format("{} on {}", program.name, options.device.str());
      report.subtitle = "bytegrad memory report" + (link.verdict.empty() ? "" : ": " + link.verdict);
      const std::string path = options.html_dir + "/" + program.name + ".html";
      write_memory_report(path, *story, report);
      report_links.push_back(link);
      if (!options.json) std::cout << "   html: " << path << '\n';
    }
    if (!options.memory_viz_dir.empty()) {
      const std::string path = options.memory_viz_dir + "/" + program.name + ".json";
      dump_memory_viz(path, caching_allocator(options.device));
      if (!options.json) std::cout << "   memory_viz: " << path << '\n';
    }
  }
  const int64_t ties = caching_allocator(options.device).placement_ties();
  const bool early = caching_allocator(options.device).early_regions_decided();
  if (program.needs_simulated_device) configure_simulated_device(options.device, SimulatedCapacity{});
  const std::string placement = (ties > 0 || early) && !options.json ? placement_line(program, r, ties, early) : "";
  if (options.json) {
    std::cout << json_line(r) << '\n';
  } else if (has_golden) {
    std::cout << (differing ? fmt::format("   {} of {} marks differ from PyTorch\n", differing, r.steps().size())
                            : fmt::format("   all {} marks equal PyTorch's, every figure\n", r.steps().size()));
  }
  std::cout << placement;
  return differing;
}

// A usage error: one line naming the argument and what is accepted, exit status 2.
int usage_error(const std::string& what) {
  std::cerr << "bytegrad-walkthrough: " << what << '\n';
  return 2;
}

// "all" runs the seed programs; the GPT-2 programs run by name.
std::vector<const Program*> named_programs() {
  std::vector<const Program*> out;
  for (const Program& e : seed_programs()) out.push_back(&e);
  for (const Program& e : gpt2_programs()) out.push_back(&e);
  return out;
}

std::string scenario_names() {
  std::string names = "all";
  for (const Program* e : named_programs()) names += ", " + e->name;
  return names;
}

const Program* find_program(const std::string& name) {
  for (const Program* e : named_programs())
    if (e->name == name) return e;
  return nullptr;
}

constexpr const char* kDevices = "sim, meta or cuda (each optionally :N)";
constexpr const char* kOptions =
    "--device, --default-workspace, --expandable-segments, --json, --list, --memory-viz, --html";

// DIR/index.html: a link to each scenario's report.
void write_report_index(const std::string& dir, const Device& device) {
  std::string rows;
  for (const ReportLink& l : report_links)
    rows += fmt::format(
        "<tr><td class=l><a href=\"{0}.html\">{0}</a></td><td>{1}</td><td>{2}<br><small>{3}</small></td>"
        "<td class=l>{4}</td></tr>\n",
        l.name, l.marks, l.peak, human_bytes(l.peak), l.verdict);
  const std::string page = fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>bytegrad walkthrough on {0}</title>
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:20px 28px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #d6dbe0;padding:3px 8px;text-align:right}} .l{{text-align:left}} small{{color:#5c6670}}</style>
</head><body><h1>bytegrad walkthrough on {0}</h1>
<p>One memory report per scenario: the timeline stacked by category with the marks, the peak, the allocator's state
at any event, and every mark's figures.</p>
<table><tr><th class=l>scenario</th><th>marks</th><th>max_allocated (bytes)</th><th class=l>against PyTorch 2.11</th></tr>
{1}</table></body></html>
)",
                                       device.str(), rows);
  std::ofstream out(dir + "/index.html");
  out << page;
  if (!out.flush()) throw std::runtime_error("cannot write " + dir + "/index.html");
}

// The arguments, then the run; throws only what main's last-resort handler reports.
int run(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device") {
      if (i + 1 >= argc) return usage_error("--device needs a value: " + std::string(kDevices));
      const std::string value = argv[++i];
      try {
        options.device = Device::parse(value);
        options.device_chosen = true;
      } catch (const std::invalid_argument&) {
        return usage_error("--device '" + value + "' is not a device: expected " + kDevices);
      }
      if (options.device.type == DeviceType::cpu)
        return usage_error("--device '" + value + "' has no caching allocator to walk through: expected " + kDevices);
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--memory-viz") {
      if (i + 1 >= argc) return usage_error("--memory-viz needs a directory");
      options.memory_viz_dir = argv[++i];
      if (options.memory_viz_dir.empty()) return usage_error("--memory-viz needs a directory, got ''");
    } else if (arg == "--html") {
      if (i + 1 >= argc) return usage_error("--html needs a directory");
      options.html_dir = argv[++i];
      if (options.html_dir.empty()) return usage_error("--html needs a directory, got ''");
    } else if (arg == "--default-workspace") {
      options.default_workspace = true;
    } else if (arg == "--expandable-segments") {
      options.expandable_segments = true;
    } else if (arg == "--list") {
      for (const Program* e : named_programs()) std::cout << e->name << '\n';
      return 0;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: bytegrad-walkthrough [NAME|all]... [--device sim|meta|cuda] [--default-workspace]"
                   " [--expandable-segments] [--json] [--list] [--memory-viz DIR] [--html DIR]\n";
      return 0;
    } else if (arg.rfind('-', 0) == 0) {
      return usage_error("unknown option '" + arg + "': expected NAME or one of " + kOptions);
    } else {
      options.names.push_back(arg);
    }
  }
  // Each name in order ("all": the seed programs, less those that reconfigure a cuda device); every name is
  // checked before anything runs.
  if (options.names.empty()) options.names.push_back("all");
  std::vector<const Program*> to_run;
  for (const std::string& name : options.names) {
    if (name == "all") {
      for (const Program& e : seed_programs())
        if (!(e.needs_simulated_device && options.device.type == DeviceType::cuda)) to_run.push_back(&e);
      continue;
    }
    const Program* named = find_program(name);
    if (!named) return usage_error("unknown scenario '" + name + "': expected one of " + scenario_names());
    if (named->needs_simulated_device && options.device.type == DeviceType::cuda)
      return usage_error("scenario '" + name + "' reconfigures its device: run it with --device sim or meta");
    to_run.push_back(named);
  }
  for (const std::string& dir : {options.memory_viz_dir, options.html_dir}) {
    if (dir.empty()) continue;
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      std::cerr << "bytegrad-walkthrough: cannot create " << dir << ": " << error.message() << '\n';
      return 1;
    }
  }
  if (options.device.type == DeviceType::cuda && !cuda_is_available()) {
    std::cout << "no CUDA GPU: skipping the walkthrough on cuda\n";
    return 77;  // ctest's SKIP_RETURN_CODE for the gpu-labelled runs
  }
  if (options.default_workspace) unsetenv("CUBLAS_WORKSPACE_CONFIG");
  else setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", /*overwrite=*/0);
  if (options.expandable_segments) {
    const char* conf = std::getenv("BYTEGRAD_ALLOC_CONF");
    const std::string text =
        conf && *conf ? std::string(conf) + ",expandable_segments:True" : "expandable_segments:True";
    setenv("BYTEGRAD_ALLOC_CONF", text.c_str(), 1);
  }
  try {
    options.expandable_segments = AllocatorConfig::from_environment().expandable_segments;
  } catch (const std::invalid_argument& e) {
    std::cerr << "bytegrad-walkthrough: " << e.what() << '\n';
    return 1;
  }
  if (!options.json) {
    std::cout << fmt::format(
        "bytegrad walkthrough on {}: each mark shows bytegrad's figure, PyTorch 2.11's from an H100 where it\n"
        "differs, and what changed since the previous mark (the ops whose blocks appeared or were freed).\n"
        "CUBLAS_WORKSPACE_CONFIG={}{}\n{}",
        options.device.str(),
        options.default_workspace ? "(unset: PyTorch's default workspaces)" : std::getenv("CUBLAS_WORKSPACE_CONFIG"),
        std::getenv("BYTEGRAD_ALLOC_CONF") ? fmt::format("  BYTEGRAD_ALLOC_CONF={}", std::getenv("BYTEGRAD_ALLOC_CONF"))
                                           : "",
        options.device_chosen || options.device.type == DeviceType::cuda
            ? ""
            : "No GPU here: running on meta (every figure exact, no values computed). --device sim computes every\n"
              "value on the CPU as well (minutes: seed003 draws 4 GB of random numbers); --device cuda on a GPU.\n");
  }
  int differing = 0;
  const bool found = !to_run.empty();
  try {
    for (const Program* program : to_run) differing += walk(*program, options);
    if (!options.html_dir.empty()) {
      write_report_index(options.html_dir, options.device);
      if (!options.json) std::cout << "\nhtml reports: " << options.html_dir << "/index.html\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "bytegrad-walkthrough: " << e.what() << '\n';
    return 1;
  }
  if (!found) return usage_error("no scenario to run on " + options.device.str());
  if (!options.json)
    std::cout << (differing ? fmt::format("\n{} marks differ from PyTorch\n", differing)
                            : "\nevery mark of every scenario equals PyTorch's figures\n");
  return differing ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // the last resort: a message and status 1, never a core dump
    std::cerr << "bytegrad-walkthrough: " << e.what() << '\n';
  } catch (...) {
    std::cerr << "bytegrad-walkthrough: unknown error\n";
  }
  return 1;
}

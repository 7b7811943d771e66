// bytegrad-replay TRACE|- [--check GOLDEN]: replays an allocator trace through the `sim` device's caching
// allocator (configured by BYTEGRAD_ALLOC_CONF) and prints its figures after every event.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/memory/out_of_memory.h"
#include "tools/trace_replay.h"

namespace {

int usage() {
  std::cerr << "usage: bytegrad-replay TRACE|- [--check GOLDEN] [--check-summary SUMMARY] [--summary]\n"
               "  TRACE is a file, or '-' for standard input.\n"
               "  Replays alloc/free events through the sim device's caching allocator and prints\n"
               "  'alloc|free <size> <allocated> <reserved> <segments>' per event.\n"
               "  --check GOLDEN: compare with PyTorch's lines; --check-summary: compare memory_summary()\n"
               "  after the last event; --summary: print it.\n"
               "  BYTEGRAD_ALLOC_CONF (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax) configures the allocator.\n";
  return 2;
}

// Opens a regular file for reading; throws std::runtime_error naming the path when it is missing, a
// directory, anything else that is not a regular file (checked before opening: opening a FIFO without a
// writer blocks, and a device such as /dev/zero never ends), or cannot be opened.
std::ifstream open_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) throw std::runtime_error("cannot open " + path + ": no such file");
  if (std::filesystem::is_directory(status)) throw std::runtime_error("cannot read " + path + ": it is a directory");
  if (!std::filesystem::is_regular_file(status))
    throw std::runtime_error("cannot read " + path +
                             ": it is not a regular file (a FIFO, device or socket); give a "
                             "file, or '-' to read the trace from standard input");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return in;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in = open_file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return lines;
}

int bad_argument(const std::string& what) {
  std::cerr << "bytegrad-replay: " << what << '\n';
  usage();
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_path, golden_path, summary_path;
  bool print_summary = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--check" || arg == "--check-summary") && i + 1 >= argc) return bad_argument(arg + " needs a file");
    if (arg == "--check") golden_path = argv[++i];
    else if (arg == "--check-summary") summary_path = argv[++i];
    else if (arg == "--summary") print_summary = true;
    else if (arg == "-h" || arg == "--help") return usage();
    else if (arg.size() > 1 && arg[0] == '-') return bad_argument("unknown option " + bytegrad::quote_excerpt(arg));
    else if (trace_path.empty()) trace_path = arg;
    else
      return bad_argument("one TRACE only: got " + bytegrad::quote_excerpt(trace_path) + " and " +
                          bytegrad::quote_excerpt(arg));
  }
  if (trace_path.empty()) return bad_argument("no TRACE given");
  try {
    std::vector<bytegrad::TraceEvent> events;
    if (trace_path == "-") {
      events = bytegrad::parse_trace(std::cin, "standard input");
    } else {
      std::ifstream in = open_file(trace_path);
      events = bytegrad::parse_trace(in, trace_path);
    }
    bytegrad::CachingAllocator allocator(bytegrad::make_host_backed_raw_memory({}),
                                         bytegrad::AllocatorConfig::from_environment());
    auto result = bytegrad::replay_trace(events, allocator);
    int status = 0;
    if (golden_path.empty() && summary_path.empty()) {
      for (const auto& line : result.lines) std::cout << line << '\n';
    }
    if (print_summary) std::cout << result.summary;
    if (!golden_path.empty()) {
      if (auto difference = bytegrad::first_difference(result.lines, read_lines(golden_path))) {
        std::cout << "MISMATCH against " << golden_path << ": " << *difference << '\n';
        status = 1;
      } else {
        std::cout << "OK: " << result.lines.size() << " lines match " << golden_path << '\n';
      }
    }
    if (!summary_path.empty()) {
      std::vector<std::string> summary_lines;
      std::istringstream summary(result.summary);
      for (std::string line; std::getline(summary, line);) summary_lines.push_back(line);
      if (auto difference = bytegrad::first_difference(summary_lines, read_lines(summary_path))) {
        std::cout << "SUMMARY MISMATCH against " << summary_path << ": " << *difference << '\n';
        status = 1;
      } else {
        std::cout << "OK: memory_summary matches " << summary_path << '\n';
      }
    }
    return status;
  } catch (const bytegrad::OutOfMemoryError& e) {
    std::cerr << "bytegrad-replay: the replay ran out of memory: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bytegrad-replay: " << e.what() << '\n';
    return 2;
  }
}

#include "bytegrad/memory/format_size.h"

#include <fmt/format.h>

namespace bytegrad {

std::string format_size(uint64_t bytes) {
  constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;
  if (bytes <= KiB) return fmt::format("{} bytes", bytes);
  if (bytes <= MiB) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / KiB);
  if (bytes <= GiB) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / MiB);
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / GiB);
}

}  // namespace bytegrad

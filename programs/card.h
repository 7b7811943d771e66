// The estimator's words for memory: sizes as people write them ("24GB", "24GiB") and cards ("24GB",
// "H100-80GB"), for bytegrad-estimate's --limit and --card.
#pragma once

#include <cstdint>
#include <string>

namespace bytegrad::programs {

// Bytes from "24GB", "24 GiB", "1.5TB" or "25769803776": GB, MB, KB, TB are powers of 1000 (24GB is 24 *
// 10^9 bytes), GiB, MiB, KiB, TiB powers of 1024 (24GiB is 24 * 2^30 = 25769803776 bytes, 7.4% more); the
// unit's case does not matter ("24gb" is 24GB, "24gib" is 24GiB); no unit (or B) means bytes. A bare "G",
// "M", "K" or "T" is refused as ambiguous (tools write it for either), as are NaN, infinities, sizes of zero
// or less, fractions of a byte and sizes past int64. Errors are std::invalid_argument naming `option`.
int64_t parse_byte_size(const std::string& option, const std::string& text);

// A card for --card: its total memory (what cudaMemGetInfo / torch.cuda.mem_get_info report as total) and
// what the driver keeps of it outside PyTorch's allocator once training runs (kCudaDriverShareBytes).
struct Card {
  std::string name;  // as the user wrote it
  int64_t total_bytes = 0;
  int64_t driver_bytes = 0;
  int64_t usable_bytes() const { return total_bytes - driver_bytes; }
};

// "24GB", "16GB", "40GB", "80GB" (any size parse_byte_size reads: a card of that total), or a card measured
// with PyTorch: "H100-80GB" (alias "H100": 85017493504 bytes total, the goldens' card) or "H200-141GB"
// (alias "H200": 150109880320, tests/data/pytorch_probes/cuda_context.json). A size is the card's total as
// its maker states it: "80GB" is 80 * 10^9 bytes, less than the 85017493504 PyTorch reports for an H100
// 80GB, so name the card when it is one of those. Throws
// std::invalid_argument naming the text when it is neither, or when the card is no larger than the
// driver's share.
Card parse_card(const std::string& text);

// The lines --help prints about --card and sizes.
std::string card_help();

}  // namespace bytegrad::programs

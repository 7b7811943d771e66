// Bad-input rows: optimizer and module arguments, the memory tools, allocator and workspace settings,
// the programs' inputs.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> tool_rows() {
  using E = Expect;
  (void)E::invalid_argument;
  return {};
}

}  // namespace bytegrad::bad_inputs

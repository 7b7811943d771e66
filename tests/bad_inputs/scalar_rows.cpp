// Bad-input rows: values that must fit their dtype; integer and bool arithmetic PyTorch refuses;
// host buffers read only within their bounds.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> scalar_rows() {
  using E = Expect;
  (void)E::invalid_argument;
  return {};
}

}  // namespace bytegrad::bad_inputs

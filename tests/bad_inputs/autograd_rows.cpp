// Bad-input rows: gradients entering autograd with the wrong dtype, device or shape; saved-tensor
// hooks; checkpointing.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> autograd_rows() {
  using E = Expect;
  (void)E::invalid_argument;
  return {};
}

}  // namespace bytegrad::bad_inputs

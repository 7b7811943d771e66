// Bad-input rows: scaled_dot_product_attention and the attention modules.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> attention_rows() {
  using E = Expect;
  (void)E::invalid_argument;
  return {};
}

}  // namespace bytegrad::bad_inputs

// The bad-input suite's row type and fixture. Each area's rows live in their own file (core_rows.cpp,
// scalar_rows.cpp, ...); bad_inputs.cpp runs them all with the same checks: the named exception type, a
// message fragment naming the problem, and the sim device's figures and every live tensor unchanged.
#pragma once

#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/nn/dropout.h"
#include "bytegrad/nn/embedding.h"
#include "bytegrad/nn/layer_norm.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/scoped_env.h"
#include "tools/trace_replay.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace bytegrad::bad_inputs {

using namespace bytegrad;
using namespace bytegrad::testing;

enum class Expect { invalid_argument, out_of_range, length_error, runtime_error, logic_error, out_of_memory };

// The live tensors every row may use (on sim; `c` on cpu), made once per row.
struct Fixture {
  Tensor a = arange(12.0, TensorOptions{ScalarType::float32, kSim}).view({3, 4});
  Tensor b = arange(8.0, TensorOptions{ScalarType::float32, kSim}).view({4, 2});
  Tensor ints = arange(6.0, TensorOptions{ScalarType::int64, kSim});
  Tensor flags = arange(4.0, TensorOptions{ScalarType::float32, kSim}) > 1.0;
  Tensor c = arange(12.0, TensorOptions{ScalarType::float32, kCpu}).view({3, 4});
  Tensor leaf = ones({3, 4}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();

  std::vector<std::vector<double>> values() const {
    return {a.tolist(), b.tolist(), ints.tolist(), flags.tolist(), c.tolist(), leaf.detach().tolist()};
  }
};

struct Row {
  const char* what;
  Expect expect;
  const char* fragment;
  std::function<void(Fixture&)> run;
};

// One table per area (a file each), concatenated by the runner.
std::vector<Row> core_rows();       // factories, views, ops, indexing, autograd, nn, allocator, configuration
std::vector<Row> scalar_rows();     // values that must fit their dtype; integer and bool arithmetic; host buffers
std::vector<Row> overlap_rows();    // writes whose source overlaps their destination; views and shapes
std::vector<Row> autograd_rows();   // gradients' dtype and device; hooks; checkpointing
std::vector<Row> tool_rows();       // optimizers, modules, memory tools, settings, the programs' inputs
std::vector<Row> attention_rows();  // scaled_dot_product_attention and attention modules

}  // namespace bytegrad::bad_inputs

#include "bytegrad/nn/checkpoint_sequential.h"

#include <stdexcept>

#include "bytegrad/autograd/checkpoint.h"

namespace bytegrad::nn {

namespace {

Tensor run_modules(const Sequential& modules, size_t first, size_t last, const Tensor& input) {
  Tensor x = input;
  for (size_t i = first; i <= last; ++i) x = (*modules[i])(x);
  return x;
}

}  // namespace

Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& input) {
  if (segments <= 0 || static_cast<size_t>(segments) > modules.size())
    throw std::invalid_argument("checkpoint_sequential: segments must be between 1 and the number of modules (" +
                                std::to_string(modules.size()) + "), got " + std::to_string(segments));
  const size_t segment_size = modules.size() / static_cast<size_t>(segments);
  Tensor x = input;
  size_t next = 0;
  for (int64_t s = 0; s + 1 < segments; ++s) {
    const size_t first = next, last = next + segment_size - 1;
    x = checkpoint([&modules, first, last](const Tensor& in) { return run_modules(modules, first, last, in); }, x);
    next = last + 1;
  }
  return run_modules(modules, next, modules.size() - 1, x);
}

}  // namespace bytegrad::nn

// What autograd keeps, and what in-place ops and no-grad scopes change. h = x @ w is 4 MiB (1024 x 1024
// floats); each line says what stays allocated while the result y is alive, and the peak on the way:
//   y = h * h            mul saves its operands: h stays alive inside the graph     held 8 MiB, peak 8 MiB
//   y = relu(h)          relu saves only its result: h is freed once relu has run   held 4 MiB, peak 8 MiB
//   y = h.relu_()        relu overwrites h: one buffer throughout                   held 4 MiB, peak 4 MiB
//   y = h * h, no grad   nothing is saved                                            held 4 MiB, peak 8 MiB
#include <cstdio>
#include <functional>

#include <bytegrad/bytegrad.h>

using namespace bytegrad;

int main(int argc, char** argv) {
  const Device on = argc > 1 ? Device::parse(argv[1]) : default_device();
  set_blas_workspace_config(":0:0");  // no cuBLAS workspace parked by the first product
  Tensor x = randn({1024, 1024}, device(on));
  Tensor w = randn({1024, 1024}, device(on)).requires_grad_();
  std::printf("on %s, h = x @ w is %s\n", on.str().c_str(), human_bytes(1024 * 1024 * 4).c_str());

  auto measure = [&](const char* what, const std::function<Tensor()>& forward) {
    const int64_t before = memory_allocated(on);
    reset_peak_memory_stats(on);
    Tensor y = forward();
    std::printf("%-22s held %-24s peak %s\n", what, human_bytes(memory_allocated(on) - before).c_str(),
                human_bytes(max_memory_allocated(on) - before).c_str());
  };
  measure("y = h * h", [&] {
    Tensor h = matmul(x, w);
    return h * h;
  });
  measure("y = relu(h)", [&] { return relu(matmul(x, w)); });
  measure("y = h.relu_()", [&] { return matmul(x, w).relu_(); });
  measure("y = h * h, no grad", [&] {
    NoGradGuard no_grad;
    Tensor h = matmul(x, w);
    return h * h;
  });
  return 0;
}

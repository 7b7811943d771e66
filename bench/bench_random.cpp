// Values per second of the random factories (rand, randn, randint) on cpu and sim, per dtype, at the
// thread count the process uses (get_num_threads; OMP_NUM_THREADS or set_num_threads change it).
//   bench_random [MILLIONS]     (values per tensor, default 64: a 256 MB float32 tensor)
// Each figure is the best of three draws of one tensor, timed to completion (the device synchronized).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>

#include "bytegrad/kernels/parallel.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

double best_seconds(const std::function<Tensor()>& draw, Device d) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    {
      const Tensor t = draw();
      synchronize(d);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = (argc > 1 ? std::atoll(argv[1]) : 64) * 1'000'000;
  fmt::print("{} values per tensor, {} threads\n", n, get_num_threads());
  manual_seed(0);
  for (const Device d : {kCpu, kSim}) {
    for (const ScalarType dtype :
         {ScalarType::float32, ScalarType::bfloat16, ScalarType::float16, ScalarType::float64}) {
      const TensorOptions options{dtype, d};
      const double randn_s = best_seconds([&] { return randn({n}, options); }, d);
      const double rand_s = best_seconds([&] { return rand({n}, options); }, d);
      fmt::print("{:4} {:9} randn {:7.1f} M values/s   rand {:7.1f} M values/s\n",
                 d.type == DeviceType::cpu ? "cpu" : "sim", scalar_type_name(dtype),
                 static_cast<double>(n) / randn_s / 1e6, static_cast<double>(n) / rand_s / 1e6);
    }
    const double randint_s = best_seconds([&] { return randint(0, 1000, {n}, device(d)); }, d);
    fmt::print("{:4} int64     randint {:7.1f} M values/s\n", d.type == DeviceType::cpu ? "cpu" : "sim",
               static_cast<double>(n) / randint_s / 1e6);
  }
  return 0;
}

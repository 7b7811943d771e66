// One rank of a multi-process test, started by bytegrad-launch (tests/CMakeLists.txt):
//   distributed_rank_program collectives sim|cpu|meta|cuda   every collective, sync and async, values checked
//   distributed_rank_program throw K            rank K throws after joining; the others wait in a collective
//   distributed_rank_program absent-init K      rank K never calls init_process_group (it sleeps)
//   distributed_rank_program absent-collective K   rank K joins, then never calls the all_reduce
// The store backend (sim, cpu, meta) or nccl (cuda) from init_process_group; the failure modes use a 2 s timeout.
// Exits 0 when every check passed, 1 with the reason on stderr otherwise, 77 for cuda with fewer GPUs than ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bytegrad/distributed/init.h"
#include "bytegrad/distributed/nccl.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;
using namespace bytegrad::distributed;

namespace {

void expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("check failed: " + what);
}

std::string text(const std::vector<double>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

void expect_values(const Tensor& t, const std::vector<double>& expected, const std::string& what) {
  Tensor host = t.device().type == DeviceType::meta ? Tensor() : t.to(kCpu);
  if (!host.defined()) return;  // meta: shapes only
  const std::vector<double> got = host.tolist();
  expect(got == expected, what + ": got " + text(got) + ", expected " + text(expected));
}

// Every collective on this rank, each with values every rank can predict: rank r holds (r+1) * [1, 10, -1, 0.5].
void all_collectives(ProcessGroup& pg) {
  const int r = pg.rank(), n = pg.size();
  const Device d = pg.device();
  const double k = r + 1;
  double sum = 0, product = 1;
  for (int i = 1; i <= n; ++i) {
    sum += i;
    product *= i;
  }
  for (bool async : {false, true}) {
    const std::string mode = async ? " (async)" : " (sync)";
    auto finish = [&](const std::shared_ptr<Work>& work) {
      expect((work != nullptr) == async, "a Work only for async_op" + mode);
      if (work) work->wait();
      synchronize(d);
    };
    Tensor x = from_vector({k, 10 * k, -k, 0.5 * k}, {4}, device(d));
    finish(pg.all_reduce(x, ReduceOp::sum, async));
    expect_values(x, {sum, 10 * sum, -sum, 0.5 * sum}, "all_reduce sum" + mode);

    Tensor m = from_vector({k, -k}, {2}, device(d));
    finish(pg.all_reduce(m, ReduceOp::max, async));
    expect_values(m, {double(n), -1}, "all_reduce max" + mode);

    Tensor p = full({3}, k, device(d));
    finish(pg.all_reduce(p, ReduceOp::product, async));
    expect_values(p, {product, product, product}, "all_reduce product" + mode);

    Tensor a = full({2}, k, device(d));
    finish(pg.all_reduce(a, ReduceOp::avg, async));
    expect_values(a, {sum / n, sum / n}, "all_reduce avg" + mode);

    Tensor b = full({3}, 100 + r, device(d));
    finish(pg.broadcast(b, n - 1, async));
    expect_values(b, {100.0 + n - 1, 100.0 + n - 1, 100.0 + n - 1}, "broadcast from the last rank" + mode);

    Tensor mine = from_vector({k, -k}, {2}, device(d));
    Tensor gathered = empty({2 * n}, device(d));
    finish(pg.all_gather_into_tensor(gathered, mine, async));
    std::vector<double> expected_gather;
    for (int i = 1; i <= n; ++i) expected_gather.insert(expected_gather.end(), {double(i), double(-i)});
    expect_values(gathered, expected_gather, "all_gather_into_tensor" + mode);

    // Rank r's input is (r+1) * [0, 1, ..., 2n-1]; slice r of the sum is sum * [2r, 2r+1].
    std::vector<double> ramp;
    for (int i = 0; i < 2 * n; ++i) ramp.push_back(k * i);
    Tensor input = from_vector(ramp, {2 * n}, device(d));
    Tensor slice = empty({2}, device(d));
    finish(pg.reduce_scatter_tensor(slice, input, ReduceOp::sum, async));
    expect_values(slice, {sum * 2 * r, sum * (2 * r + 1)}, "reduce_scatter_tensor" + mode);

    Tensor ints = full({2}, r + 1, TensorOptions{ScalarType::int64, d});
    finish(pg.all_reduce(ints, ReduceOp::sum, async));
    expect_values(ints, {sum, sum}, "all_reduce int64" + mode);

    finish(pg.barrier(async));
  }
}

InitOptions short_timeout(DeviceType type) {
  InitOptions options;
  options.device_type = type;
  options.group.timeout = std::chrono::milliseconds(2000);
  return options;
}

int run(int argc, char** argv) {
  if (argc < 3) throw std::invalid_argument("usage: distributed_rank_program MODE ARG (see the file's comment)");
  const std::string mode = argv[1], arg = argv[2];
  if (mode == "collectives") {
    const Device device = Device::parse(arg);
    if (device.type == DeviceType::cuda) {
      const RankEnvironment env = read_rank_environment();
      if (!nccl_available() || cuda_device_count() < env.world_size) {  // one host: a GPU per rank
        std::fprintf(stderr, "skipped: this rank needs NCCL and a GPU per local rank\n");
        return 77;
      }
    }
    InitOptions options;
    options.device_type = device.type;
    auto pg = init_process_group(device.type == DeviceType::cuda ? "nccl" : "store", options);
    all_collectives(*pg);
    std::printf("rank %d of %d on %s: every collective agreed\n", pg->rank(), pg->size(), pg->device().str().c_str());
    return 0;
  }
  const int chosen = std::stoi(arg);
  const RankEnvironment env = read_rank_environment();
  if (mode == "absent-init" && env.rank == chosen) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the launcher ends it when the others fail
    return 0;
  }
  auto pg = init_process_group("store", env, short_timeout(DeviceType::sim));
  Tensor x = ones({4}, device(pg->device()));
  if (mode == "throw" && pg->rank() == chosen) throw std::runtime_error("rank " + arg + " fails on purpose");
  if (mode == "absent-collective" && pg->rank() == chosen) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode != "throw" && mode != "absent-init" && mode != "absent-collective")
    throw std::invalid_argument("unknown mode '" + mode + "'");
  pg->all_reduce(x);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// Error messages name the op and both operands; reprs look like PyTorch's.
#include <chrono>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("shape, dtype and device mismatches name the op and both operands") {
  const Tensor a = zeros({2, 3}, bytegrad::device(kSim));
  const Tensor b = zeros({4}, bytegrad::device(kSim));
  std::string message = error_of([&] { add(a, b); });
  CHECK(contains(message, "add"));
  CHECK(contains(message, "Tensor(shape=[2, 3], dtype=float32, device=sim)"));
  CHECK(contains(message, "Tensor(shape=[4], dtype=float32, device=sim)"));
  CHECK_THROWS_AS(add(a, b), std::invalid_argument);

  const Tensor ints = zeros({2, 3}, TensorOptions{ScalarType::int64, kSim});
  // Pointwise ops promote (float32 * int64 is float32), but an in-place target that cannot hold the result
  // is named with the other operand; ops taking one dtype (mm) name both.
  message = error_of([&] { ints.mul_(a); });
  CHECK(contains(message, "mul_"));
  CHECK(contains(message, "dtype=float32"));
  CHECK(contains(message, "dtype=int64"));
  message = error_of([&] { mm(a, ints.t()); });
  CHECK(contains(message, "mm"));
  CHECK(contains(message, "dtype=float32"));
  CHECK(contains(message, "dtype=int64"));

  const Tensor host = zeros({2, 3}, bytegrad::device(kCpu));
  message = error_of([&] { sub(a, host); });
  CHECK(contains(message, "sub"));
  CHECK(contains(message, "device=sim"));
  CHECK(contains(message, "device=cpu"));

  message = error_of([&] { matmul(a, zeros({4, 5}, bytegrad::device(kSim))); });
  CHECK(contains(message, "mm"));
  CHECK(contains(message, "shape=[2, 3]"));
  CHECK(contains(message, "shape=[4, 5]"));
  message = error_of([&] {
    matmul(zeros({3, 2, 3}, bytegrad::device(kSim)), zeros({2, 3, 2}, bytegrad::device(kSim)));
  });
  CHECK(contains(message, "matmul"));
  CHECK(contains(message, "shape=[3, 2, 3]"));
  message = error_of([&] { bmm(zeros({3, 2, 3}, bytegrad::device(kSim)), zeros({2, 3, 2}, bytegrad::device(kSim))); });
  CHECK(contains(message, "bmm"));

  // In place: the other operand must broadcast to the target's shape.
  message = error_of([&] { b.add_(a); });
  CHECK(contains(message, "add_"));
  CHECK(contains(message, "shape=[2, 3]"));
  CHECK(contains(message, "shape=[4]"));
  message = error_of([&] { a.expand({5, 2, 3}).add_(1); });
  CHECK(contains(message, "add_"));
  message = error_of([&] { where(a, a, ints); });  // a float condition
  CHECK(contains(message, "where"));
  message = error_of([&] { exp(ints); });
  CHECK(contains(message, "exp"));
  CHECK(contains(message, "int64"));
  message = error_of([&] { cat({a, b}); });  // cat promotes dtypes (as PyTorch's) but not ranks
  CHECK(contains(message, "cat"));
  CHECK(contains(message, "shape=[4]"));
  message = error_of([&] { sum(a, {2}); });
  CHECK(contains(message, "sum"));
}

TEST_CASE("reprs follow PyTorch's") {
  const Tensor m = tensor({{1, 2}, {3, 4}}, bytegrad::device(kSim));
  CHECK(m.str() == "tensor([[1., 2.],\n        [3., 4.]], device='sim')");
  CHECK((m + 0.5).str() == "tensor([[1.5000, 2.5000],\n        [3.5000, 4.5000]], device='sim')");
  CHECK((m > 1).str() == "tensor([[False,  True],\n        [ True,  True]], device='sim')");
  CHECK(sum(m).str() == "tensor(10., device='sim')");
  CHECK(argmax(m).str() == "tensor(3, device='sim')");
  CHECK(matmul(m, m).to(kCpu).str() == "tensor([[ 7., 10.],\n        [15., 22.]])");
}

TEST_CASE("reprs of more than 1000 elements are summarized as PyTorch's, reading only the values shown") {
  // PyTorch's print options: threshold 1000, edgeitems 3; the width comes from the values shown.
  const TensorOptions ints{ScalarType::int64, kSim};
  CHECK(arange(2000.0, ints).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], device='sim')");
  CHECK(arange(2000.0, TensorOptions{ScalarType::float32, kSim}).view({40, 50}).str() ==
        "tensor([[   0.,    1.,    2.,  ...,   47.,   48.,   49.],\n"
        "        [  50.,   51.,   52.,  ...,   97.,   98.,   99.],\n"
        "        [ 100.,  101.,  102.,  ...,  147.,  148.,  149.],\n"
        "        ...,\n"
        "        [1850., 1851., 1852.,  ..., 1897., 1898., 1899.],\n"
        "        [1900., 1901., 1902.,  ..., 1947., 1948., 1949.],\n"
        "        [1950., 1951., 1952.,  ..., 1997., 1998., 1999.]], device='sim')");
  // 3-d: the slices, and the "..." between them, are separated by a blank line.
  const std::string cube = arange(1331.0, ints).view({11, 11, 11}).str();
  CHECK(cube.rfind("tensor([[[   0,    1,    2,  ...,    8,    9,   10],\n", 0) == 0);
  CHECK(contains(cube,
                 "[ 341,  342,  343,  ...,  349,  350,  351],\n"
                 "         [ 352,  353,  354,  ...,  360,  361,  362]],\n\n"
                 "        ...,\n\n"
                 "        [[ 968,  969,  970,  ...,  976,  977,  978],\n"));
  // 2^30 expanded elements (PyTorch 2.11 on the H100: 55 characters on cuda:0) and a 2^15 x 2^15 view:
  // each element shown is read on its own, so both take milliseconds (the whole tensor was copied first).
  const Tensor one = ones({1}, TensorOptions{ScalarType::float32, kSim});
  const auto start = std::chrono::steady_clock::now();
  CHECK(one.expand({int64_t{1} << 30}).str() == "tensor([1., 1., 1.,  ..., 1., 1., 1.], device='sim')");
  const std::string row = "[1., 1., 1.,  ..., 1., 1., 1.]", next = ",\n        " + row;
  CHECK(one.expand({int64_t{1} << 15, int64_t{1} << 15}).str() ==
        "tensor([" + row + next + next + ",\n        ..." + next + next + next + "], device='sim')");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

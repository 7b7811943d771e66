// nn::Embedding refuses indices outside [0, num_embeddings) before looking anything up (issue #9): a
// negative index used to wrap silently to the last rows; PyTorch raises "index out of range in self".
#include <stdexcept>

#include "bytegrad/nn/embedding.h"
#include "nn_helpers.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("Embedding: negative and too-large indices are refused, naming the op, the index and the range") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(17);
    nn::Embedding emb(5, 3, f64(d));
    const std::vector<double> weight = emb.weight().tolist();
    const Tensor negative = from_vector({4, -1, 0}, {3}, TensorOptions{ScalarType::int64, d});
    const Tensor too_large = from_vector({0, 1, 5, 2}, {2, 2}, TensorOptions{ScalarType::int64, d});
    const int64_t allocated_before = d == kSim ? allocated(kSim) : host_allocator().memory_allocated();
    const int64_t reserved_before = d == kSim ? caching_allocator(kSim).memory_reserved() : 0;

    const std::string message = error_of([&] { emb(negative); });
    CHECK(contains(message, "embedding: index -1 is out of range for dimension 0 with size 5"));
    CHECK(contains(message, "valid indices are 0 to 4"));
    CHECK(contains(message, "index out of range in self"));
    CHECK_THROWS_AS(emb(negative), std::out_of_range);
    CHECK_THROWS_WITH_AS(emb(too_large), doctest::Contains("embedding: index 5 is out of range"), std::out_of_range);

    CHECK((d == kSim ? allocated(kSim) : host_allocator().memory_allocated()) == allocated_before);
    if (d == kSim) CHECK(caching_allocator(kSim).memory_reserved() == reserved_before);
    CHECK(emb.weight().tolist() == weight);
    CHECK_FALSE(emb.weight().grad().defined());
    // In range still looks up.
    CHECK(emb(from_vector({4}, {1}, TensorOptions{ScalarType::int64, d})).tolist() ==
          std::vector<double>(weight.begin() + 12, weight.end()));
  }
}

// The first bad-input rows: factories, views, ops, indexing, autograd, nn, optimizers, the allocator, the
// configuration and the trace reader.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> core_rows() {
  using E = Expect;
  return {
      // ------------------------------------------------------------------------------- factories
      {"empty with a negative size", E::invalid_argument, "-2",
       [](Fixture&) {
         empty({3, -2}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"empty whose element count overflows int64", E::length_error, "more than int64 can count",
       [](Fixture&) {
         empty({int64_t{1} << 32, int64_t{1} << 32}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"empty whose byte size overflows", E::length_error, "more than int64 can count",
       [](Fixture&) {
         empty({(int64_t{1} << 62) + 1, 16}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"from_vector with too few values", E::invalid_argument, "[2, 3]",
       [](Fixture&) {
         from_vector({1, 2, 3}, {2, 3}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"a ragged nested tensor", E::invalid_argument, "",
       [](Fixture&) {
         tensor({{1.0, 2.0}, {3.0}}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"arange with step 0", E::invalid_argument, "step",
       [](Fixture&) {
         arange(0.0, 5.0, 0.0, TensorOptions{ScalarType::float32, kSim});
       }},
      {"arange whose step points away from the end", E::invalid_argument, "",
       [](Fixture&) {
         arange(0.0, 5.0, -1.0, TensorOptions{ScalarType::float32, kSim});
       }},
      {"randint with low >= high", E::invalid_argument, "",
       [](Fixture&) {
         randint(5, 5, {3}, TensorOptions{ScalarType::int64, kSim});
       }},
      {"empty_strided with more strides than sizes", E::invalid_argument, "",
       [](Fixture&) {
         empty_strided({2, 3}, {3, 1, 1}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"an unknown device name", E::invalid_argument, "gpu", [](Fixture&) { zeros({2}, device("gpu")); }},
      {"a bad device index", E::invalid_argument, "cuda:x", [](Fixture&) { zeros({2}, device("cuda:x")); }},
      // ----------------------------------------------------------------------------------- views
      {"as_strided past the storage", E::out_of_range, "out of bounds for storage",
       [](Fixture& f) {
         f.a.as_strided({4, 4}, {4, 1}, 0);
       }},
      {"as_strided far past the storage", E::out_of_range, "out of bounds for storage",
       [](Fixture& f) { f.a.as_strided({2}, {1}, int64_t{1} << 40); }},
      {"as_strided with a negative stride", E::invalid_argument, "", [](Fixture& f) { f.a.as_strided({2}, {-1}, 4); }},
      {"view to a different element count", E::invalid_argument, "[5, 2]",
       [](Fixture& f) {
         f.a.view({5, 2});
       }},
      {"view of a transposed tensor across its strides", E::invalid_argument, "reshape",
       [](Fixture& f) { f.a.t().view({12}); }},
      {"reshape with two inferred dimensions", E::invalid_argument, "inferred",
       [](Fixture& f) {
         f.a.reshape({-1, -1});
       }},
      {"reshape to a different element count", E::invalid_argument, "", [](Fixture& f) { f.a.reshape({7}); }},
      {"transpose with a dimension out of range", E::out_of_range, "dimension 2",
       [](Fixture& f) { f.a.transpose(0, 2); }},
      {"permute with a repeated dimension", E::invalid_argument, "repeats",
       [](Fixture& f) {
         f.a.permute({0, 0});
       }},
      {"permute with too few dimensions", E::invalid_argument, "", [](Fixture& f) { f.a.permute({1}); }},
      {"select past the end", E::out_of_range, "", [](Fixture& f) { f.a.select(0, 3); }},
      {"select on a dimension out of range", E::out_of_range, "", [](Fixture& f) { f.a.select(2, 0); }},
      {"slice with step 0", E::invalid_argument, "step", [](Fixture& f) { f.a.slice(0, 0, 2, 0); }},
      {"narrow past the end", E::out_of_range, "", [](Fixture& f) { f.a.narrow(1, 2, 3); }},
      {"expand to an incompatible size", E::invalid_argument, "",
       [](Fixture& f) {
         f.a.expand({3, 5});
       }},
      {"squeeze a dimension out of range", E::out_of_range, "", [](Fixture& f) { f.a.squeeze(3); }},
      {"unsqueeze a dimension out of range", E::out_of_range, "", [](Fixture& f) { f.a.unsqueeze(4); }},
      {"split with size 0", E::invalid_argument, "", [](Fixture& f) { f.a.split(0, 0); }},
      {"chunk into 0 pieces", E::invalid_argument, "", [](Fixture& f) { f.a.chunk(0, 0); }},
      {"unbind a dimension out of range", E::out_of_range, "", [](Fixture& f) { f.a.unbind(2); }},
      {"flatten with start after end", E::invalid_argument, "", [](Fixture& f) { f.a.flatten(1, 0); }},
      // ------------------------------------------------------------------------------------- ops
      {"add of unbroadcastable shapes", E::invalid_argument, "broadcast", [](Fixture& f) { f.a + f.b; }},
      {"mm of two dtypes", E::invalid_argument, "dtype mismatch",
       [](Fixture& f) { mm(f.a, f.b.to(ScalarType::float64)); }},
      {"in-place add of floats into integers", E::invalid_argument, "can't be cast",
       [](Fixture& f) { f.ints.add_(f.ints.to(ScalarType::float32)); }},
      {"div of two integer dtypes", E::invalid_argument, "floating-point",
       [](Fixture& f) { f.ints / f.ints.to(ScalarType::int32); }},
      {"add across devices", E::invalid_argument, "same device", [](Fixture& f) { f.a + f.c; }},
      {"div of integers", E::invalid_argument, "floating-point", [](Fixture& f) { f.ints / f.ints; }},
      {"exp of integers", E::invalid_argument, "floating-point", [](Fixture& f) { exp(f.ints); }},
      {"neg of bools", E::invalid_argument, "bool", [](Fixture& f) { neg(f.flags); }},
      {"mm of mismatched inner sizes", E::invalid_argument, "cannot be multiplied", [](Fixture& f) { mm(f.a, f.a); }},
      {"mm of a vector", E::invalid_argument, "2-d", [](Fixture& f) { mm(f.a, f.b.view({8})); }},
      {"bmm of different batch sizes", E::invalid_argument, "batch",
       [](Fixture& f) {
         bmm(f.a.view({3, 2, 2}), f.b.view({2, 2, 2}));
       }},
      {"matmul of a 0-d tensor", E::invalid_argument, "at least one dimension",
       [](Fixture& f) { matmul(f.a.sum(), f.a); }},
      {"addmm with a bias of the wrong shape", E::invalid_argument, "cannot be broadcast",
       [](Fixture& f) { addmm(f.a.view({12}), f.a, f.b); }},
      {"matmul of bools", E::invalid_argument, "bool", [](Fixture& f) { matmul(f.flags, f.flags); }},
      {"sum over a dimension out of range", E::out_of_range, "", [](Fixture& f) { sum(f.a, {2}); }},
      {"mean of integers", E::invalid_argument, "floating-point", [](Fixture& f) { mean(f.ints); }},
      {"softmax of integers", E::invalid_argument, "floating-point", [](Fixture& f) { softmax(f.ints, 0); }},
      {"softmax over a dimension out of range", E::out_of_range, "", [](Fixture& f) { softmax(f.a, 2); }},
      {"var of integers", E::invalid_argument, "floating-point", [](Fixture& f) { var(f.ints); }},
      {"max of an empty tensor", E::invalid_argument, "no elements", [](Fixture& f) { max(f.a.slice(0, 0, 0)); }},
      {"cat of nothing", E::invalid_argument, "", [](Fixture&) { cat({}, 0); }},
      {"cat of mismatched shapes", E::invalid_argument, "",
       [](Fixture& f) {
         cat({f.a, f.b}, 0);
       }},
      {"stack of mismatched shapes", E::invalid_argument, "",
       [](Fixture& f) {
         stack({f.a, f.b}, 0);
       }},
      {"where with a float condition", E::invalid_argument, "bool", [](Fixture& f) { where(f.a, f.a, f.a); }},
      {"masked_fill with a float mask", E::invalid_argument, "bool", [](Fixture& f) { masked_fill(f.a, f.a, 0.0); }},
      {"in-place into an expanded view", E::invalid_argument, "expanded",
       [](Fixture& f) {
         f.a.select(0, 0).expand({3, 4}).add_(1.0);
       }},
      {"in-place add that would grow the target", E::invalid_argument, "in-place target",
       [](Fixture& f) { f.a.select(0, 0).add_(f.a); }},
      {"an op on an undefined tensor", E::invalid_argument, "undefined", [](Fixture& f) { f.a + Tensor(); }},
      {"item of several elements", E::invalid_argument, "", [](Fixture& f) { f.a.item(); }},
      {"item on meta", E::runtime_error, "meta tensor", [](Fixture&) { zeros({}, device("meta")).item(); }},
      {"copy_ from an unbroadcastable shape", E::invalid_argument, "", [](Fixture& f) { f.a.clone().copy_(f.b); }},
      {"triu of a vector", E::invalid_argument, "2 dimensions", [](Fixture& f) { triu(f.a.view({12})); }},
      {"layer_norm over a mismatched shape", E::invalid_argument, "normalized_shape",
       [](Fixture& f) { layer_norm(f.a, {3}); }},
      // ------------------------------------------------------------------------------- indexing
      {"index_select with float indices", E::invalid_argument, "",
       [](Fixture& f) { f.a.index_select(0, f.a.view({12})); }},
      {"index_select on a dimension out of range", E::out_of_range, "",
       [](Fixture& f) { f.a.index_select(2, f.ints.slice(0, 0, 2)); }},
      {"index_select past the end", E::out_of_range, "", [](Fixture& f) { f.a.index_select(0, f.ints); }},
      {"index_select with a negative index", E::out_of_range, "index -1",
       [](Fixture& f) { f.a.index_select(0, f.ints.slice(0, 0, 2) - 1); }},
      {"gather with a negative index", E::out_of_range, "index -1",
       [](Fixture& f) {
         f.a.gather(1, (f.ints.slice(0, 0, 6) - 1).view({3, 2}));
       }},
      {"embedding with a negative index", E::out_of_range, "index -1",
       [](Fixture& f) { embedding(f.a, f.ints.slice(0, 0, 2) - 1); }},
      {"gather with an index of another rank", E::invalid_argument, "",
       [](Fixture& f) { f.a.gather(1, f.ints.slice(0, 0, 2)); }},
      {"embedding with float indices", E::invalid_argument, "", [](Fixture& f) { embedding(f.a, f.a); }},
      {"embedding past the vocabulary", E::out_of_range, "", [](Fixture& f) { embedding(f.a, f.ints); }},
      // ------------------------------------------------------------------------------- autograd
      {"backward of a non-scalar without a gradient", E::runtime_error, "scalar",
       [](Fixture& f) { (f.leaf * 2.0).backward(); }},
      {"backward twice through a freed graph", E::runtime_error, "second time",
       [](Fixture& f) {
         Tensor y = (f.leaf * f.leaf).sum();
         y.backward();
         f.leaf.set_grad(Tensor());
         y.backward();
       }},
      {"requires_grad_(false) on a non-leaf", E::runtime_error, "leaf",
       [](Fixture& f) { (f.leaf * 2.0).requires_grad_(false); }},
      {"requires_grad_ on integers", E::invalid_argument, "floating point",
       [](Fixture& f) { f.ints.clone().requires_grad_(); }},
      {"in-place on a leaf that requires grad", E::runtime_error, "leaf", [](Fixture& f) { f.leaf.mul_(2.0); }},
      {"in-place through a view of a leaf that requires grad", E::runtime_error, "a view of a leaf Variable",
       [](Fixture& f) { f.leaf.select(0, 0).mul_(3.0); }},
      {"copy_ into a view of a leaf that requires grad", E::runtime_error, "a view of a leaf Variable",
       [](Fixture& f) { f.leaf.slice(1, 0, 2).copy_(f.a.slice(1, 0, 2)); }},
      {"a saved tensor modified before backward", E::runtime_error, "modified by an inplace operation",
       [](Fixture& f) {
         Tensor h = f.leaf * 2.0;
         Tensor y = (h * h).sum();
         h.add_(1.0);
         y.backward();
       }},
      {"backward of a tensor that does not require grad", E::runtime_error, "does not require grad",
       [](Fixture& f) { f.a.sum().backward(); }},
      {"backward with a gradient of the wrong shape", E::invalid_argument, "does not match",
       [](Fixture& f) {
         (f.leaf * 2.0).backward(ones({2}, TensorOptions{ScalarType::float32, kSim}));
       }},
      {"differentiating a no_grad row", E::logic_error, "not differentiable", [](Fixture& f) { abs(f.leaf * 2.0); }},
      // ------------------------------------------------------------------------------------ nn
      {"Linear with the wrong input width", E::invalid_argument, "cannot be multiplied",
       [](Fixture& f) {
         nn::Linear(5, 2, true, TensorOptions{ScalarType::float32, kSim})(f.a);
       }},
      {"LayerNorm over the wrong width", E::invalid_argument, "normalized_shape",
       [](Fixture& f) {
         nn::LayerNorm(Shape{5}, 1e-5, true, true, TensorOptions{ScalarType::float32, kSim})(f.a);
       }},
      {"Dropout with p above 1", E::invalid_argument, "probability", [](Fixture& f) { dropout(f.a, 1.5); }},
      {"cross_entropy with float targets", E::invalid_argument, "int64", [](Fixture& f) { cross_entropy(f.a, f.a); }},
      {"cross_entropy with a target out of range", E::out_of_range, "",
       [](Fixture& f) { cross_entropy(f.a, f.ints.slice(0, 3, 6)); }},
      {"mse_loss of shapes that do not broadcast", E::invalid_argument, "cannot be broadcast",
       [](Fixture& f) { mse_loss(f.a, f.b); }},
      {"nll_loss with a 3-d input", E::invalid_argument, "",
       [](Fixture& f) {
         nll_loss(f.a.view({3, 2, 2}), f.ints.slice(0, 0, 3));
       }},
      // ----------------------------------------------------------------------------- optimizers
      {"SGD with nesterov and no momentum", E::invalid_argument, "Nesterov",
       [](Fixture& f) { optim::SGD({f.leaf}, optim::SGDOptions{.lr = 0.1, .nesterov = true}); }},
      // ------------------------------------------------------------------------------- allocator
      {"freeing a pointer the allocator never gave", E::invalid_argument, "not allocated",
       [](Fixture& f) { caching_allocator(kSim).free(static_cast<char*>(f.a.data_ptr()) + 8); }},
      {"a memory fraction above 1", E::invalid_argument, "fraction",
       [](Fixture&) { caching_allocator(kSim).set_memory_fraction(1.5); }},
      {"an allocation of an exabyte", E::out_of_memory, "out of memory",
       [](Fixture&) {
         empty({int64_t{1} << 58}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"more than the card holds", E::out_of_memory, "Tried to allocate",
       [](Fixture&) {
         empty({int64_t{1} << 35}, TensorOptions{ScalarType::float32, kSim});
       }},
      {"an impossible simulated capacity", E::invalid_argument, "context_bytes",
       [](Fixture&) {
         SimulatedCapacity capacity;
         capacity.total_bytes = size_t{1} << 20;
         capacity.context_bytes = size_t{1} << 21;
         configure_simulated_device(Device{DeviceType::sim, 1}, capacity);  // a sim with nothing live
       }},
      {"reset_device under a bad BYTEGRAD_ALLOC_CONF", E::invalid_argument, "max_split_size_mb",
       [](Fixture&) {
         ScopedEnv env("BYTEGRAD_ALLOC_CONF", "max_split_size_mb:abc");
         reset_device(Device{DeviceType::sim, 1});
       }},
      {"a huge CUBLAS_WORKSPACE_CONFIG", E::invalid_argument, "CUBLAS_WORKSPACE_CONFIG",
       [](Fixture& f) {
         ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":99999999999999999999999:2");
         mm(f.a, f.b);
       }},
      // --------------------------------------------------------------------------- configuration
      {"an unknown allocator setting", E::invalid_argument, "no_such_key",
       [](Fixture&) { AllocatorConfig::parse("no_such_key:1"); }},
      {"a non-numeric max_split_size_mb", E::invalid_argument, "max_split_size_mb",
       [](Fixture&) { AllocatorConfig::parse("max_split_size_mb:abc"); }},
      {"roundup_power2_divisions not a power of two", E::invalid_argument, "roundup_power2_divisions",
       [](Fixture&) { AllocatorConfig::parse("roundup_power2_divisions:3"); }},
      {"expandable segments with a value that is not a boolean", E::invalid_argument, "expandable_segments",
       [](Fixture&) { AllocatorConfig::parse("expandable_segments:maybe"); }},
      // ------------------------------------------------------------------------- the trace reader
      {"a trace line of an unknown kind", E::runtime_error, "line 1",
       [](Fixture&) {
         std::istringstream in("allocate 0x10 512 0\n");
         parse_trace(in);
       }},
      {"a trace line with a negative size", E::runtime_error, "size '-512'",
       [](Fixture&) {
         std::istringstream in("alloc 16 -512 0\n");
         parse_trace(in);
       }},
      {"a trace line with a missing size", E::runtime_error, "line 2",
       [](Fixture&) {
         std::istringstream in("# comment\nalloc 0x10\n");
         parse_trace(in);
       }},
  };
}

}  // namespace bytegrad::bad_inputs

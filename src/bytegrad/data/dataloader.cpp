// TensorDataset and DataLoader (dataloader.h).
#include "bytegrad/data/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  if (tensors_.empty()) throw std::invalid_argument("TensorDataset needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (!t.defined()) throw std::invalid_argument(fmt::format("TensorDataset: tensor {} is undefined", i));
    if (t.dim() == 0) throw std::invalid_argument(fmt::format("TensorDataset: tensor {} is 0-d: it has no rows", i));
    if (t.size(0) != tensors_.front().size(0))
      throw std::invalid_argument(fmt::format("Size mismatch between tensors: tensor 0 has {} rows, tensor {} has {}",
                                              tensors_.front().size(0), i, t.size(0)));
  }
  size_ = tensors_.front().size(0);
}

std::vector<Tensor> TensorDataset::get(int64_t index) const {
  if (index < -size_ || index >= size_)
    throw std::out_of_range(fmt::format("TensorDataset: index {} is out of range for {} samples", index, size_));
  std::vector<Tensor> out;
  for (const Tensor& t : tensors_) out.push_back(t.select(0, index < 0 ? index + size_ : index));
  return out;
}

namespace {

// PyTorch's RandomSampler without a generator draws a seed from the process generator; here once.
Generator seeded_from_process_generator() { return Generator(static_cast<uint64_t>(std::ldexp(random_uniform(), 53))); }

}  // namespace

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options, std::optional<Generator> generator)
    : dataset_(std::move(dataset)),
      options_(options),
      generator_(generator ? *generator : (options.shuffle ? seeded_from_process_generator() : Generator())) {
  if (options_.batch_size <= 0)
    throw std::invalid_argument(
        fmt::format("batch_size should be a positive integer value, but got batch_size={}", options_.batch_size));
  order_.resize(static_cast<size_t>(dataset_.size()));
  for (int64_t i = 0; i < dataset_.size(); ++i) order_[static_cast<size_t>(i)] = i;
}

DataLoader::DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle, bool drop_last,
                       std::optional<Generator> generator)
    : DataLoader(std::move(dataset), DataLoaderOptions{batch_size, shuffle, drop_last, std::nullopt},
                 std::move(generator)) {}

int64_t DataLoader::size() const {
  const int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  if (options_.shuffle) {
    const std::vector<double> drawn =
        randperm(dataset_.size(), TensorOptions{ScalarType::int64, kCpu}, &generator_).tolist();
    for (size_t i = 0; i < drawn.size(); ++i) order_[i] = static_cast<int64_t>(drawn[i]);  // exact below 2^53
  }
  return Iterator(this, 0);
}

DataLoader::Batch DataLoader::batch_of(const std::vector<int64_t>& indices) const {
  const int64_t n = dataset_.size();
  std::vector<int64_t> wrapped;
  wrapped.reserve(indices.size());
  for (int64_t i : indices) {
    if (i < -n || i >= n)
      throw std::out_of_range(fmt::format("DataLoader: index {} is out of range for {} samples", i, n));
    wrapped.push_back(i < 0 ? i + n : i);
  }
  NoGradGuard no_grad;
  AllocationScope scope("DataLoader batch");
  const Tensor host_index =
      from_vector(wrapped, {static_cast<int64_t>(wrapped.size())}, TensorOptions{ScalarType::int64, kCpu});
  Batch batch;
  for (const Tensor& t : dataset_.tensors()) {
    Tensor rows;
    {
      const Tensor index = host_index.to(t.device());  // x[idx] moves a host index to x's device first
      rows = index_select(t, 0, index);
    }
    if (options_.device && *options_.device != rows.device()) rows = rows.to(*options_.device);
    batch.push_back(std::move(rows));
  }
  return batch;
}

DataLoader::Batch DataLoader::Iterator::operator*() const {
  const auto& order = loader_->order_;
  const int64_t b = loader_->options_.batch_size;
  const auto begin = static_cast<size_t>(batch_ * b);
  const size_t end = std::min(order.size(), begin + static_cast<size_t>(b));
  return loader_->batch_of(std::vector<int64_t>(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                                order.begin() + static_cast<std::ptrdiff_t>(end)));
}

}  // namespace bytegrad::data

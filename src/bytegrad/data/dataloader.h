// torch.utils.data's TensorDataset and DataLoader for tensors already in memory: shuffle, batch, drop_last,
// a generator of their own.
//
//   data::TensorDataset dataset({x, y});                       // x: [N, 784], y: [N] on sim (or cpu)
//   data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true}, Generator(0));
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (std::vector<Tensor> batch : loader) { const Tensor& xb = batch[0]; const Tensor& yb = batch[1]; ... }
//
// Each epoch (each begin()) draws a new order with randperm(N, generator) on the host, as PyTorch's
// RandomSampler; without a generator, the loader seeds one of its own from the process generator at
// construction (PyTorch draws that seed at each epoch instead). A batch is, for each dataset tensor t,
// t[idx] with idx the batch's indices as a host int64 tensor, and its memory is what that makes in
// PyTorch: on a GPU-like device, idx copied there (one block of 8 bytes per index), then the batch (one
// block of batch_size rows), then the index copy freed; on cpu, the batch alone. With options.device set
// to another device than the dataset's, the batch is made where the dataset is and moved
// (`t[idx].to(device)`: on that device, one block per tensor). In a C++ range-for the previous batch is
// freed before the next is made (Python's `for xb, yb in loader` holds the previous one meanwhile).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::data {

// Samples are the rows (dim 0) of its tensors, which must agree on that size (std::invalid_argument).
class TensorDataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const { return size_; }  // len(dataset)
  // dataset[i]: a view of row i of each tensor (allocates nothing); i may be negative, as in Python.
  std::vector<Tensor> get(int64_t index) const;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;        // drop the last batch when it is short
  std::optional<Device> device;  // where batches go; unset: the dataset's device
};

class DataLoader {
 public:
  using Batch = std::vector<Tensor>;  // one tensor per dataset tensor, batch_size rows each

  // batch_size must be positive (std::invalid_argument).
  DataLoader(TensorDataset dataset, DataLoaderOptions options, std::optional<Generator> generator = std::nullopt);
  DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle = false, bool drop_last = false,
             std::optional<Generator> generator = std::nullopt);

  // Batches per epoch (len(loader)).
  int64_t size() const;
  // The batch of these dataset indices (each in [-N, N)), made as a loader's batch is made.
  Batch batch_of(const std::vector<int64_t>& indices) const;
  Generator& generator() { return generator_; }
  const TensorDataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch operator*() const;  // makes the batch (each call makes it anew)
    Iterator& operator++() {
      ++batch_;
      return *this;
    }
    bool operator==(const Iterator& other) const { return batch_ == other.batch_; }
    bool operator!=(const Iterator& other) const { return batch_ != other.batch_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, int64_t batch) : loader_(loader), batch_(batch) {}
    const DataLoader* loader_;
    int64_t batch_;
  };
  // A new epoch: with shuffle, a new order from the generator.
  Iterator begin();
  Iterator end() const { return Iterator(this, size()); }
  // The current epoch's order of dataset indices.
  const std::vector<int64_t>& order() const { return order_; }

 private:
  TensorDataset dataset_;
  DataLoaderOptions options_;
  Generator generator_;
  std::vector<int64_t> order_;
};

}  // namespace bytegrad::data

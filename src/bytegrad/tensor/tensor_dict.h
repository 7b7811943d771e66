// TensorDict: names -> tensors in insertion order, as the Python dict a state_dict or a safetensors file
// load gives (libtorch's OrderedDict<std::string, Tensor>). Iterating yields (name, tensor) pairs in order.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class TensorDict {
 public:
  using Item = std::pair<std::string, Tensor>;
  using const_iterator = std::vector<Item>::const_iterator;

  TensorDict() = default;
  // A name given twice is an error (std::invalid_argument naming it), as a dict literal would silently keep
  // only the last and a checkpoint must not.
  TensorDict(std::initializer_list<Item> items);
  // From a std::map: its (sorted) order.
  TensorDict(const std::map<std::string, Tensor>& items);  // NOLINT(google-explicit-constructor): a dict is a dict

  // Python's `d[key] = value`: a new key goes at the end, an existing key keeps its place.
  void insert_or_assign(const std::string& key, const Tensor& value);
  // Removes the key (false when absent); the others keep their order.
  bool erase(std::string_view key);

  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Tensor* find(std::string_view key) const;  // nullptr when absent
  // Throws std::out_of_range naming the key when absent.
  const Tensor& at(std::string_view key) const;
  const Tensor& operator[](std::string_view key) const { return at(key); }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  const std::vector<Item>& items() const { return items_; }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in items_
};

}  // namespace bytegrad

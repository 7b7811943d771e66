#include "bytegrad/tensor/tensor_dict.h"

#include <fmt/format.h>

#include <stdexcept>

namespace bytegrad {

TensorDict::TensorDict(std::initializer_list<Item> items) {
  for (const auto& [key, value] : items) {
    if (contains(key)) throw std::invalid_argument(fmt::format("TensorDict: the name '{}' is given twice", key));
    insert_or_assign(key, value);
  }
}

TensorDict::TensorDict(const std::map<std::string, Tensor>& items) {
  for (const auto& [key, value] : items) insert_or_assign(key, value);
}

void TensorDict::insert_or_assign(const std::string& key, const Tensor& value) {
  if (auto it = index_.find(key); it != index_.end()) {
    items_[it->second].second = value;
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, value);
}

bool TensorDict::erase(std::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const Tensor* TensorDict::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& TensorDict::at(std::string_view key) const {
  if (const Tensor* t = find(key)) return *t;
  throw std::out_of_range(fmt::format("TensorDict: no tensor named '{}'", key));
}

std::vector<std::string> TensorDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [key, value] : items_) out.push_back(key);
  return out;
}

}  // namespace bytegrad

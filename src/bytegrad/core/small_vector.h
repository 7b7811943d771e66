// SmallVector<T, N>: the subset of std::vector's interface that shapes use, with room for N elements inside
// the object, so that a tensor's sizes and strides (rarely more than 5 dimensions) need no heap allocation.
// Past N elements it moves to the heap as std::vector does. Only for trivially copyable T (shapes are int64).
// Converts to and from std::vector<T> implicitly, so that code written with std::vector keeps working.
// Kept plain C++20 (no constexpr members, no concepts): every CUDA kernel file includes it through Shape.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace bytegrad {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector copies its elements with memcpy");
  static_assert(N > 0, "SmallVector needs inline room");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept = default;  // NOLINT(cppcoreguidelines-pro-type-member-init): inline_ is read only up to size_
  explicit SmallVector(size_t count) { resize(count); }
  SmallVector(size_t count, const T& value) { assign(count, value); }
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <typename InputIt, typename = std::enable_if_t<std::is_base_of_v<
                                  std::input_iterator_tag, typename std::iterator_traits<InputIt>::iterator_category>>>
  SmallVector(InputIt first, InputIt last) {
    assign(first, last);
  }
  SmallVector(const std::vector<T>& values) { assign(values.begin(), values.end()); }  // NOLINT: implicit by design

  SmallVector(const SmallVector& other) {
    if (other.size_ <= N) {
      // The whole inline room, a copy of fixed size the compiler writes as a few moves: shapes are copied
      // with every tensor and view made, and a call to memcpy per copy cost more than the copy itself.
      // `other` holds at least N readable elements (inline room, or a heap block past N).
      std::memcpy(static_cast<void*>(inline_), other.data_, sizeof(inline_));
      size_ = other.size_;
    } else {
      assign(other.begin(), other.end());
    }
  }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  SmallVector& operator=(const std::vector<T>& values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~SmallVector() { release(); }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  // Whether the elements live inside the object (no heap allocation).
  bool is_inline() const noexcept { return data_ == inline_; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  T& operator[](size_t i) noexcept { return data_[i]; }
  const T& operator[](size_t i) const noexcept { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at: index out of range");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at: index out of range");
    return data_[i];
  }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t wanted) {
    if (wanted <= capacity_) return;
    T* grown = static_cast<T*>(::operator new(wanted * sizeof(T)));
    if (size_ != 0) std::memcpy(static_cast<void*>(grown), data_, size_ * sizeof(T));
    release();
    data_ = grown;
    capacity_ = wanted;
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_t count) { resize(count, T()); }
  void resize(size_t count, const T& value) {
    if (count > size_) {
      grow_for(count);
      std::fill(data_ + size_, data_ + count, value);
    }
    size_ = count;
  }
  void assign(size_t count, const T& value) {
    size_ = 0;
    resize(count, value);
  }
  template <typename InputIt, typename = std::enable_if_t<std::is_base_of_v<
                                  std::input_iterator_tag, typename std::iterator_traits<InputIt>::iterator_category>>>
  void assign(InputIt first, InputIt last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag,
                                    typename std::iterator_traits<InputIt>::iterator_category>) {
      const auto count = static_cast<size_t>(std::distance(first, last));
      if (count > capacity_) {
        // `first` may point into this vector only when count <= size_ <= capacity_, so growing is safe here.
        size_ = 0;
        grow_for(count);
      }
      std::copy(first, last, data_);  // overlapping only when assigning a vector its own elements
      size_ = count;
    } else {
      size_ = 0;
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<T> values) { assign(values.begin(), values.end()); }

  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may be an element of this vector
      grow_for(size_ + 1);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = value;
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t count, const T& value) {
    const size_t at = static_cast<size_t>(pos - data_);
    const T copy = value;  // `value` may be an element of this vector
    grow_for(size_ + count);
    std::memmove(static_cast<void*>(data_ + at + count), data_ + at, (size_ - at) * sizeof(T));
    std::fill(data_ + at, data_ + at + count, copy);
    size_ += count;
    return data_ + at;
  }
  template <typename InputIt, typename = std::enable_if_t<std::is_base_of_v<
                                  std::input_iterator_tag, typename std::iterator_traits<InputIt>::iterator_category>>>
  iterator insert(const_iterator pos, InputIt first, InputIt last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const std::vector<T> values(first, last);  // the range may lie in this vector
    grow_for(size_ + values.size());
    std::memmove(static_cast<void*>(data_ + at + values.size()), data_ + at, (size_ - at) * sizeof(T));
    if (!values.empty()) std::memcpy(static_cast<void*>(data_ + at), values.data(), values.size() * sizeof(T));
    size_ += values.size();
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_);
    const size_t count = static_cast<size_t>(last - first);
    std::memmove(static_cast<void*>(data_ + at), data_ + at + count, (size_ - at - count) * sizeof(T));
    size_ -= count;
    return data_ + at;
  }

  void swap(SmallVector& other) noexcept {
    SmallVector moved(std::move(other));
    other = std::move(*this);
    *this = std::move(moved);
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator>(const SmallVector& a, const SmallVector& b) { return b < a; }
  friend bool operator<=(const SmallVector& a, const SmallVector& b) { return !(b < a); }
  friend bool operator>=(const SmallVector& a, const SmallVector& b) { return !(a < b); }

 private:
  // Room for at least `count` elements, doubling as std::vector does.
  void grow_for(size_t count) {
    if (count > capacity_) reserve(std::max(count, 2 * capacity_));
  }
  void release() noexcept {
    if (data_ != inline_) ::operator delete(data_);
    data_ = inline_;
    capacity_ = N;
  }
  // Takes `other`'s elements (its heap block when it has one), leaving it empty and inline. Expects this
  // vector inline.
  void take(SmallVector& other) noexcept {
    if (other.data_ == other.inline_) {
      std::memcpy(static_cast<void*>(inline_), other.inline_, sizeof(inline_));  // fixed size: see the copy
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = N;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
  T inline_[N];
};

}  // namespace bytegrad

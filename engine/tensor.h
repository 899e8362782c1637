// A 2-D row-major activation array (rows = tokens) owned by a backend: host
// memory for the cpu backend, device memory for cuda. Rows may be strided
// (ld >= cols) so a column range of a fused projection is a view, not a copy.
#ifndef SPAR_ENGINE_TENSOR_H_
#define SPAR_ENGINE_TENSOR_H_

#include <cstdint>
#include <memory>

#include "base/dtype.h"

namespace spar {

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, int64_t rows, int64_t cols, std::shared_ptr<void> storage, void* data, int64_t ld)
      : dtype_(dtype), rows_(rows), cols_(cols), ld_(ld), storage_(std::move(storage)), data_(data) {}

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t ld() const { return ld_; }  // elements between row starts
  bool empty() const { return data_ == nullptr; }
  bool contiguous() const { return ld_ == cols_; }
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

  // Columns [begin, end) of every row, sharing storage.
  Tensor Cols(int64_t begin, int64_t end) const {
    return Tensor(dtype_, rows_, end - begin, storage_, static_cast<char*>(data_) + begin * DTypeSize(dtype_), ld_);
  }
  // Rows [begin, end), sharing storage.
  Tensor Rows(int64_t begin, int64_t end) const {
    return Tensor(dtype_, end - begin, cols_, storage_, static_cast<char*>(data_) + begin * ld_ * DTypeSize(dtype_),
                  ld_);
  }

 private:
  DType dtype_ = DType::kF32;
  int64_t rows_ = 0, cols_ = 0, ld_ = 0;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

}  // namespace spar

#endif  // SPAR_ENGINE_TENSOR_H_

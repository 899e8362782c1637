// A cudaMalloc'd buffer: weights, caches and fixed workspaces (activations
// come from the stream-ordered pool instead, StepContext::NewTensor).
#ifndef SPAR_ENGINE_CUDA_DEVICE_BUFFER_H_
#define SPAR_ENGINE_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  absl::Status Allocate(size_t bytes) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = bytes;
    if (bytes == 0) return absl::OkStatus();
    SPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    return absl::OkStatus();
  }
  // With a stream the copy is ordered on it (the backend's stream is
  // non-blocking, so a plain cudaMemcpy would race with its kernels: a
  // pageable copy may return before its DMA lands). Without one the copy has
  // completed on return.
  absl::Status Upload(const void* host, size_t bytes, cudaStream_t stream = nullptr) {
    SPAR_RETURN_IF_ERROR(Allocate(bytes));
    if (bytes == 0) return absl::OkStatus();
    if (stream != nullptr) {
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream));
    } else {
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
      SPAR_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    }
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_DEVICE_BUFFER_H_

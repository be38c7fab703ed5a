#pragma once
// A CPU backend that runs its graphs on a thread pool of its own. The engine's
// forward pass, the trainer and fit's probes each hold one.

#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include <memory>

namespace graft {

class CpuBackend {
 public:
  explicit CpuBackend(int n_threads);
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  ggml_backend_t get() const { return backend_.get(); }
  int n_threads() const { return n_threads_; }

 private:
  struct ThreadpoolFree {
    void operator()(ggml_threadpool* pool) const { ggml_threadpool_free(pool); }
  };
  int n_threads_;
  // Declared in the order they depend on each other (destroyed in reverse).
  std::unique_ptr<ggml_threadpool, ThreadpoolFree> pool_;
  ggml_backend_ptr backend_;  // runs on pool_
};

}  // namespace graft

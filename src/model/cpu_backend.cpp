#include "model/cpu_backend.h"

#include <algorithm>

namespace graft {

CpuBackend::CpuBackend(int n_threads) : n_threads_(std::max(1, n_threads)) {
  ggml_threadpool_params params = ggml_threadpool_params_default(n_threads_);
  pool_.reset(ggml_threadpool_new(&params));
  backend_.reset(ggml_backend_cpu_init());
  ggml_backend_cpu_set_n_threads(backend_.get(), n_threads_);
  ggml_backend_cpu_set_threadpool(backend_.get(), pool_.get());
}

}  // namespace graft

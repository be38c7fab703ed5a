// WeightsLoader: creates a model's weight tensors from the GGUF directory,
// checking names, shapes and types, and gives them memory: in place in the
// file's memory map, or — for matrices ggml's CPU backend multiplies faster
// repacked — a copy in a repack buffer (model/cpu_repack.h), after which the
// mapped pages of the original are released.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ggml-cpp.h>

#include "io/gguf_file.h"
#include "io/mmap.h"
#include "util/result.h"

namespace graft {

struct ModelConfig;

struct LoadedWeights {
  ggml_context_ptr ctx;  // the tensor headers
  std::vector<ggml_backend_buffer_ptr> buffers;
  size_t weight_bytes = 0;
  size_t repacked_bytes = 0;
};

class WeightsLoader {
 public:
  WeightsLoader(const GgufFile& gguf, const MappedFile& file, const ModelConfig& config, bool repack);
  WeightsLoader(const WeightsLoader&) = delete;
  WeightsLoader& operator=(const WeightsLoader&) = delete;

  // A matrix read by rows (the token embedding); ne1 < 0 accepts any row count.
  Result<ggml_tensor*> input(const std::string& name, std::array<int64_t, 2> ne);
  // A matrix multiplied with (every linear layer and the output).
  Result<ggml_tensor*> matrix(const std::string& name, std::array<int64_t, 2> ne);
  // The same data as `source`, used as a multiplied matrix (tied output).
  Result<ggml_tensor*> matrix_copy_of(ggml_tensor* source, const std::string& name);
  // An F32 vector (norm weights, biases, rope factors).
  Result<ggml_tensor*> vector(const std::string& name, int64_t n);
  // An F32 matrix used element by element (a convolution kernel).
  Result<ggml_tensor*> f32_matrix(const std::string& name, std::array<int64_t, 2> ne);

  // Whether the file has a tensor of this name (optional tensors).
  bool has(const std::string& name) const;

  // Allocates and fills everything; the loader gives up ownership. Errors:
  // "out_of_memory" (the repacked copies), "io_error" (placing a tensor).
  Result<LoadedWeights> finish();
  // Gives every tensor a buffer of the kind finish() would (mapped or
  // repacked) but no memory and no data: a model to build graphs with and
  // measure, not to compute. The file need not be mapped.
  Result<LoadedWeights> finish_layout();

 private:
  struct Entry {
    ggml_tensor* tensor;
    size_t offset;  // in the file
    size_t size;
    bool repack;
  };
  Result<const GgufTensorInfo*> find(const std::string& name, int n_dims, const int64_t* ne) const;
  ggml_tensor* create(const GgufTensorInfo& info, const std::string& name);
  bool repackable(const ggml_tensor* t);

  const GgufFile& gguf_;
  const MappedFile& file_;
  bool repack_;
  ggml_context_ptr ctx_;
  ggml_backend_buffer_type_t repack_type_ = nullptr;
  std::vector<Entry> entries_;
};

}  // namespace graft

// WeightsLoader: creates a model's weight tensors from the GGUF directory,
// checking names, shapes and types, and gives them memory: for matrices
// ggml's CPU backend multiplies faster repacked, a copy in a repack buffer
// (model/cpu_repack.h); for the other multiplied matrices, norms and
// biases (unless told to keep them in place), a copy in memory backed by
// huge pages; the token embedding, read by rows, in place in the file's
// memory map. The mapped pages of what was copied are released. (Newer
// kernels map a large page-cache folio whole on a fault, so a norm read
// in place would make megabytes of the file around it resident.)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ggml-cpp.h>

#include "io/gguf_file.h"
#include "io/mmap.h"
#include "io/reserved_memory.h"
#include "util/result.h"

namespace graft {

struct ModelConfig;
struct ModelLoadOptions;

struct LoadedWeights {
  ggml_context_ptr ctx;                          // the tensor headers
  std::vector<ReservedMemory> memory;            // what the copies live in
  std::vector<ggml_backend_buffer_ptr> buffers;  // over the mapping, the copies and the repacked copies
  size_t weight_bytes = 0;
  size_t repacked_bytes = 0;
  size_t copied_bytes = 0;  // copied as they are (not repacked) into huge-page memory
};

class WeightsLoader {
 public:
  WeightsLoader(const GgufFile& gguf, const MappedFile& file, const ModelConfig& config,
                const ModelLoadOptions& options);
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
  // "out_of_memory" (the copies), "io_error" (placing a tensor).
  Result<LoadedWeights> finish();
  // Gives every tensor a buffer of the kind finish() would (mapped, copied
  // or repacked) but no memory and no data: a model to build graphs with and
  // measure, not to compute. The file need not be mapped.
  Result<LoadedWeights> finish_layout();

 private:
  struct Entry {
    ggml_tensor* tensor;
    size_t offset;  // in the file
    size_t size;
    bool repack;
    bool copy = false;  // copied as it is into huge-page memory
  };
  Result<const GgufTensorInfo*> find(const std::string& name, int n_dims, const int64_t* ne) const;
  ggml_tensor* create(const GgufTensorInfo& info, const std::string& name);
  bool repackable(const ggml_tensor* t);
  // Adds a multiplied matrix: repacked, copied or in place.
  void add_matrix(ggml_tensor* t, const GgufTensorInfo& info);
  // Whether a tensor read in place from the mapping shares [offset, offset + size).
  bool read_in_place(size_t offset) const;
  Status copy_in(LoadedWeights& out);
  Status repack_in(LoadedWeights& out);

  const GgufFile& gguf_;
  const MappedFile& file_;
  bool repack_;
  bool copy_;
  ggml_context_ptr ctx_;
  ggml_backend_buffer_type_t repack_type_ = nullptr;
  std::vector<Entry> entries_;
};

}  // namespace graft

#include "model/weights_loader.h"

#include <cstring>

#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "model/cpu_repack.h"
#include "model/model.h"
#include "util/log.h"

namespace graft {

namespace {

std::string shape_text(int n_dims, const int64_t* ne) {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

}  // namespace

WeightsLoader::WeightsLoader(const GgufFile& gguf, const MappedFile& file, const ModelConfig&, bool repack)
    : gguf_(gguf), file_(file), repack_(repack) {
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (gguf.tensors().size() + 8);
  params.no_alloc = true;
  ctx_.reset(ggml_init(params));
  if (repack_) repack_type_ = repack_buffer_type();
  // Once per process: whether ggml lays repacked Q4_0 out as graft's readers
  // of it expect (cpu_repack.h); if not, they leave it to ggml's kernels.
  static const bool warned = [&] {
    if (!repack_type_ || q4x8_layout_is_ggmls()) return false;
    GRAFT_LOG_WARN(
        "ggml {} repacks Q4_0 weights in a layout other than the one graft reads (ggml {}); graft's own Q4_0 "
        "kernels are off and ggml's multiply them",
        ggml_version(), kRepackGgmlVersion);
    return true;
  }();
  (void)warned;
}

Result<const GgufTensorInfo*> WeightsLoader::find(const std::string& name, int n_dims,
                                                  const int64_t* ne) const {
  const GgufTensorInfo* info = gguf_.find_tensor(name);
  if (!info) return errorf("invalid_model", "{}: missing tensor '{}'", gguf_.path(), name);
  bool ok = true;
  for (int d = 0; d < GGML_MAX_DIMS; ++d) {
    const int64_t want = d < n_dims ? ne[d] : 1;
    if (want >= 0 && info->ne[d] != want) ok = false;
  }
  if (!ok) {
    return errorf("invalid_model", "{}: tensor '{}' has shape {}, expected {}", gguf_.path(), name,
                  shape_text(info->n_dims, info->ne), shape_text(n_dims, ne));
  }
  return info;
}

ggml_tensor* WeightsLoader::create(const GgufTensorInfo& info, const std::string& name) {
  ggml_tensor* t = ggml_new_tensor(ctx_.get(), info.type, GGML_MAX_DIMS, info.ne);
  ggml_set_name(t, name.c_str());
  return t;
}

bool WeightsLoader::repackable(const ggml_tensor* t) {
  return repacks(repack_type_, t);
}

Result<ggml_tensor*> WeightsLoader::input(const std::string& name, std::array<int64_t, 2> ne) {
  GRAFT_TRY(const GgufTensorInfo* info, find(name, 2, ne.data()));
  if (info->type != GGML_TYPE_F32 && !ggml_get_type_traits(info->type)->to_float) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, which graft cannot read", gguf_.path(),
                  name, ggml_type_name(info->type));
  }
  ggml_tensor* t = create(*info, name);
  entries_.push_back({t, info->offset, info->size, false});
  return t;
}

Result<ggml_tensor*> WeightsLoader::matrix(const std::string& name, std::array<int64_t, 2> ne) {
  GRAFT_TRY(const GgufTensorInfo* info, find(name, 2, ne.data()));
  const auto* traits = ggml_get_type_traits_cpu(info->type);
  if (!traits || !traits->vec_dot) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, which graft cannot multiply on the CPU",
                  gguf_.path(), name, ggml_type_name(info->type));
  }
  ggml_tensor* t = create(*info, name);
  entries_.push_back({t, info->offset, info->size, repackable(t)});
  return t;
}

Result<ggml_tensor*> WeightsLoader::matrix_copy_of(ggml_tensor* source, const std::string& name) {
  const GgufTensorInfo* info = gguf_.find_tensor(name);
  if (!info) return errorf("invalid_model", "{}: missing tensor '{}'", gguf_.path(), name);
  const auto* traits = ggml_get_type_traits_cpu(info->type);
  if (!traits || !traits->vec_dot) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, which graft cannot multiply on the CPU",
                  gguf_.path(), name, ggml_type_name(info->type));
  }
  if (!repackable(source)) return source;
  ggml_tensor* t = create(*info, name + " (output)");
  entries_.push_back({t, info->offset, info->size, true});
  return t;
}

bool WeightsLoader::has(const std::string& name) const {
  return gguf_.find_tensor(name) != nullptr;
}

Result<ggml_tensor*> WeightsLoader::vector(const std::string& name, int64_t n) {
  GRAFT_TRY(const GgufTensorInfo* info, find(name, 1, &n));
  if (info->type != GGML_TYPE_F32) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, expected f32", gguf_.path(), name,
                  ggml_type_name(info->type));
  }
  ggml_tensor* t = create(*info, name);
  entries_.push_back({t, info->offset, info->size, false});
  return t;
}

Result<ggml_tensor*> WeightsLoader::f32_matrix(const std::string& name, std::array<int64_t, 2> ne) {
  GRAFT_TRY(const GgufTensorInfo* info, find(name, 2, ne.data()));
  if (info->type != GGML_TYPE_F32) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, expected f32", gguf_.path(), name,
                  ggml_type_name(info->type));
  }
  ggml_tensor* t = create(*info, name);
  entries_.push_back({t, info->offset, info->size, false});
  return t;
}

Result<LoadedWeights> WeightsLoader::finish() {
  LoadedWeights out;
  uint8_t* base = const_cast<uint8_t*>(file_.data());

  // In place: one CPU buffer over the whole read-only mapping.
  ggml_backend_buffer_ptr mapped(ggml_backend_cpu_buffer_from_ptr(base, file_.size()));
  if (!mapped) return errorf("io_error", "{}: cannot wrap the file mapping", gguf_.path());
  for (const Entry& e : entries_) {
    if (e.repack) continue;
    if (ggml_backend_tensor_alloc(mapped.get(), e.tensor, base + e.offset) != GGML_STATUS_SUCCESS) {
      return errorf("io_error", "{}: cannot place tensor '{}'", gguf_.path(), ggml_get_name(e.tensor));
    }
    out.weight_bytes += e.size;
  }
  out.buffers.push_back(std::move(mapped));

  // Repacked copies.
  size_t total = 0;
  const size_t align = repack_type_ ? ggml_backend_buft_get_alignment(repack_type_) : 1;
  std::vector<size_t> at(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].repack) continue;
    total = (total + align - 1) / align * align;
    at[i] = total;
    total += ggml_backend_buft_get_alloc_size(repack_type_, entries_[i].tensor);
  }
  if (total > 0) {
    ggml_backend_buffer_ptr packed(ggml_backend_buft_alloc_buffer(repack_type_, total));
    if (!packed) {
      return errorf("out_of_memory", "{}: cannot allocate {} MiB for repacked weights", gguf_.path(),
                    total >> 20);
    }
    ggml_backend_buffer_set_usage(packed.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    uint8_t* packed_base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(packed.get()));
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.repack) continue;
      if (ggml_backend_tensor_alloc(packed.get(), e.tensor, packed_base + at[i]) != GGML_STATUS_SUCCESS) {
        return errorf("out_of_memory", "{}: cannot place tensor '{}' in the repacked weights", gguf_.path(),
                      ggml_get_name(e.tensor));
      }
      ggml_backend_tensor_set(e.tensor, base + e.offset, 0, e.size);
      out.weight_bytes += e.size;
      out.repacked_bytes += e.size;
      // Release the mapped pages just copied (so resident memory never holds
      // both), unless a tensor still reads them in place (a tied embedding).
      bool shared = false;
      for (const Entry& other : entries_) shared = shared || (!other.repack && other.offset == e.offset);
      if (!shared) file_.release(e.offset, e.size);
    }
    out.buffers.push_back(std::move(packed));
  }
  out.ctx = std::move(ctx_);
  return out;
}

Result<LoadedWeights> WeightsLoader::finish_layout() {
  LoadedWeights out;
  // A zero-size buffer marks the in-place tensors as placed. Repacked ones
  // need a real (tiny) buffer of the repack type: its init_tensor tags them
  // with their repacked layout, which the graph builders look at.
  ggml_backend_buffer_ptr mapped(ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 0));
  if (!mapped) return errorf("out_of_memory", "{}: cannot create a CPU buffer", gguf_.path());
  ggml_backend_buffer_ptr packed;
  for (const Entry& e : entries_) {
    out.weight_bytes += e.size;
    if (!e.repack) {
      e.tensor->buffer = mapped.get();
      continue;
    }
    if (!packed) {
      packed.reset(
          ggml_backend_buft_alloc_buffer(repack_type_, ggml_backend_buft_get_alignment(repack_type_)));
      if (!packed) return errorf("out_of_memory", "{}: cannot create a repack buffer", gguf_.path());
    }
    e.tensor->buffer = packed.get();
    ggml_backend_buffer_init_tensor(packed.get(), e.tensor);
    out.repacked_bytes += e.size;
  }
  out.buffers.push_back(std::move(mapped));
  if (packed) out.buffers.push_back(std::move(packed));
  out.ctx = std::move(ctx_);
  return out;
}

}  // namespace graft

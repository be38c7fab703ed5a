#include "model/weights_loader.h"

#include <cstring>

#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "model/model.h"

namespace graft {

namespace {

std::string shape_text(int n_dims, const int64_t* ne) {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

}  // namespace

ggml_backend_buffer_type_t repack_buffer_type() {
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) return nullptr;
  auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
      ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
  if (!get_extra) return nullptr;
  for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b) {
    if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
  }
  return nullptr;
}

WeightsLoader::WeightsLoader(const GgufFile& gguf, const MappedFile& file, const ModelConfig&, bool repack)
    : gguf_(gguf), file_(file), repack_(repack) {
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (gguf.tensors().size() + 8);
  params.no_alloc = true;
  ctx_ = ggml_init(params);
  if (repack_) repack_type_ = repack_buffer_type();
}

WeightsLoader::~WeightsLoader() {
  if (ctx_) ggml_free(ctx_);
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
  ggml_tensor* t = ggml_new_tensor(ctx_, info.type, GGML_MAX_DIMS, info.ne);
  ggml_set_name(t, name.c_str());
  return t;
}

bool WeightsLoader::repackable(const ggml_tensor* t) {
  if (!repack_type_) return false;
  // Ask the CPU device, as for a real multiplication with this weight.
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * 4;
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_backend_buffer_ptr dummy(ggml_backend_buft_alloc_buffer(repack_type_, 0));
  ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), t->type, t->ne[0], t->ne[1]);
  w->buffer = dummy.get();
  ggml_tensor* x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, t->ne[0], 512);
  ggml_tensor* op = ggml_mul_mat(ctx.get(), w, x);
  const bool ok = ggml_backend_dev_supports_op(ggml_backend_buft_get_device(repack_type_), op);
  w->buffer = nullptr;
  return ok;
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
  ggml_backend_buffer_t mapped = ggml_backend_cpu_buffer_from_ptr(base, file_.size());
  if (!mapped) return errorf("io_error", "{}: cannot wrap the file mapping", gguf_.path());
  out.buffers.push_back(mapped);
  for (const Entry& e : entries_) {
    if (e.repack) continue;
    if (ggml_backend_tensor_alloc(mapped, e.tensor, base + e.offset) != GGML_STATUS_SUCCESS) {
      for (auto* b : out.buffers) ggml_backend_buffer_free(b);
      return errorf("io_error", "{}: cannot place tensor '{}'", gguf_.path(), ggml_get_name(e.tensor));
    }
    out.weight_bytes += e.size;
  }

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
    ggml_backend_buffer_t packed = ggml_backend_buft_alloc_buffer(repack_type_, total);
    if (!packed) {
      for (auto* b : out.buffers) ggml_backend_buffer_free(b);
      return errorf("out_of_memory", "{}: cannot allocate {} MiB for repacked weights", gguf_.path(),
                    total >> 20);
    }
    out.buffers.push_back(packed);
    ggml_backend_buffer_set_usage(packed, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    uint8_t* packed_base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(packed));
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.repack) continue;
      ggml_backend_tensor_alloc(packed, e.tensor, packed_base + at[i]);
      ggml_backend_tensor_set(e.tensor, base + e.offset, 0, e.size);
      out.weight_bytes += e.size;
      out.repacked_bytes += e.size;
      // Release the mapped pages just copied (so resident memory never holds
      // both), unless a tensor still reads them in place (a tied embedding).
      bool shared = false;
      for (const Entry& other : entries_) shared = shared || (!other.repack && other.offset == e.offset);
      if (!shared) file_.release(e.offset, e.size);
    }
  }
  out.ctx = ctx_;
  ctx_ = nullptr;
  return out;
}

Result<LoadedWeights> WeightsLoader::finish_layout() {
  LoadedWeights out;
  // A zero-size buffer marks the in-place tensors as placed. Repacked ones
  // need a real (tiny) buffer of the repack type: its init_tensor tags them
  // with their repacked layout, which the graph builders look at.
  ggml_backend_buffer_t mapped = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 0);
  out.buffers.push_back(mapped);
  ggml_backend_buffer_t packed = nullptr;
  for (const Entry& e : entries_) {
    out.weight_bytes += e.size;
    if (!e.repack) {
      e.tensor->buffer = mapped;
      continue;
    }
    if (!packed) {
      packed = ggml_backend_buft_alloc_buffer(repack_type_, ggml_backend_buft_get_alignment(repack_type_));
      if (!packed) return errorf("out_of_memory", "{}: cannot create a repack buffer", gguf_.path());
      out.buffers.push_back(packed);
    }
    e.tensor->buffer = packed;
    ggml_backend_buffer_init_tensor(packed, e.tensor);
    out.repacked_bytes += e.size;
  }
  out.ctx = ctx_;
  ctx_ = nullptr;
  return out;
}

}  // namespace graft

#include "model/weights_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

WeightsLoader::WeightsLoader(const GgufFile& gguf, const MappedFile& file, const ModelConfig&,
                             const ModelLoadOptions& options)
    : gguf_(gguf), file_(file), repack_(options.repack), copy_(options.copy_weights) {
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
  add_matrix(t, *info);
  return t;
}

void WeightsLoader::add_matrix(ggml_tensor* t, const GgufTensorInfo& info) {
  const bool repack = repackable(t);
  entries_.push_back({t, info.offset, info.size, repack, !repack && copy_});
}

Result<ggml_tensor*> WeightsLoader::matrix_copy_of(ggml_tensor* source, const std::string& name) {
  const GgufTensorInfo* info = gguf_.find_tensor(name);
  if (!info) return errorf("invalid_model", "{}: missing tensor '{}'", gguf_.path(), name);
  const auto* traits = ggml_get_type_traits_cpu(info->type);
  if (!traits || !traits->vec_dot) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, which graft cannot multiply on the CPU",
                  gguf_.path(), name, ggml_type_name(info->type));
  }
  if (!repackable(source)) {
    // Multiplied as it is: the source itself, copied if matrices are.
    for (Entry& e : entries_) e.copy = e.copy || (e.tensor == source && copy_);
    return source;
  }
  ggml_tensor* t = create(*info, name + " (output)");
  add_matrix(t, *info);
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
  entries_.push_back({t, info->offset, info->size, false, copy_});
  return t;
}

Result<ggml_tensor*> WeightsLoader::f32_matrix(const std::string& name, std::array<int64_t, 2> ne) {
  GRAFT_TRY(const GgufTensorInfo* info, find(name, 2, ne.data()));
  if (info->type != GGML_TYPE_F32) {
    return errorf("unsupported_model", "{}: tensor '{}' has type {}, expected f32", gguf_.path(), name,
                  ggml_type_name(info->type));
  }
  ggml_tensor* t = create(*info, name);
  entries_.push_back({t, info->offset, info->size, false, copy_});
  return t;
}

bool WeightsLoader::read_in_place(size_t offset) const {
  for (const Entry& e : entries_) {
    if (!e.repack && !e.copy && e.offset == offset) return true;
  }
  return false;
}

Result<LoadedWeights> WeightsLoader::finish() {
  LoadedWeights out;
  uint8_t* base = const_cast<uint8_t*>(file_.data());

  // In place: one CPU buffer over the whole read-only mapping.
  ggml_backend_buffer_ptr mapped(ggml_backend_cpu_buffer_from_ptr(base, file_.size()));
  if (!mapped) return errorf("io_error", "{}: cannot wrap the file mapping", gguf_.path());
  for (const Entry& e : entries_) {
    if (e.repack || e.copy) continue;
    if (ggml_backend_tensor_alloc(mapped.get(), e.tensor, base + e.offset) != GGML_STATUS_SUCCESS) {
      return errorf("io_error", "{}: cannot place tensor '{}'", gguf_.path(), ggml_get_name(e.tensor));
    }
    out.weight_bytes += e.size;
  }
  out.buffers.push_back(std::move(mapped));
  GRAFT_TRY_STATUS(copy_in(out));
  GRAFT_TRY_STATUS(repack_in(out));
  out.ctx = std::move(ctx_);
  return out;
}

namespace {

// Reads [offset, offset + size) of the file into `to` (read from the page
// cache, not through the mapping: no page faults, nothing of the mapping
// made resident).
Status read_at(int fd, const std::string& path, size_t offset, size_t size, uint8_t* to) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, to, size, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return errorf("io_error", "{}: cannot read weights at offset {}: {}", path, offset,
                    n < 0 ? std::strerror(errno) : "unexpected end of file");
    }
    to += n;
    offset += size_t(n);
    size -= size_t(n);
  }
  return {};
}

}  // namespace

// Copies: one block of huge-page memory for all of them. Products read the
// file's mapping through 4 KiB pages, whose TLB misses made them 10-40 %
// slower than over the same bytes in huge pages (measured on a 1B model).
Status WeightsLoader::copy_in(LoadedWeights& out) {
  constexpr size_t kAlign = 64;
  size_t total = 0;
  for (const Entry& e : entries_) {
    if (e.copy) total = (total + kAlign - 1) / kAlign * kAlign + e.size;
  }
  if (total == 0) return {};
  auto memory = ReservedMemory::reserve(total);
  if (!memory) {
    return errorf("out_of_memory", "{}: cannot allocate {} MiB for the weights: {}", gguf_.path(),
                  total >> 20, memory.error().message);
  }
  ggml_backend_buffer_ptr copies(ggml_backend_cpu_buffer_from_ptr(memory->data(), total));
  if (!copies) return errorf("io_error", "{}: cannot wrap the weights' memory", gguf_.path());
  ggml_backend_buffer_set_usage(copies.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  const int fd = ::open(gguf_.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errorf("io_error", "cannot open {}: {}", gguf_.path(), std::strerror(errno));
  Status status;
  size_t at = 0;
  for (const Entry& e : entries_) {
    if (!e.copy) continue;
    at = (at + kAlign - 1) / kAlign * kAlign;
    if (ggml_backend_tensor_alloc(copies.get(), e.tensor, memory->data() + at) != GGML_STATUS_SUCCESS) {
      status = errorf("io_error", "{}: cannot place tensor '{}'", gguf_.path(), ggml_get_name(e.tensor));
      break;
    }
    status = read_at(fd, gguf_.path(), e.offset, e.size, memory->data() + at);
    if (!status.ok()) break;
    at += e.size;
    out.weight_bytes += e.size;
    out.copied_bytes += e.size;
  }
  ::close(fd);
  if (!status.ok()) return status;
  out.memory.push_back(std::move(*memory));
  out.buffers.push_back(std::move(copies));
  return {};
}

Status WeightsLoader::repack_in(LoadedWeights& out) {
  uint8_t* base = const_cast<uint8_t*>(file_.data());
  size_t total = 0;
  const size_t align = repack_type_ ? ggml_backend_buft_get_alignment(repack_type_) : 1;
  std::vector<size_t> at(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].repack) continue;
    total = (total + align - 1) / align * align;
    at[i] = total;
    total += ggml_backend_buft_get_alloc_size(repack_type_, entries_[i].tensor);
  }
  if (total == 0) return {};
  ggml_backend_buffer_ptr packed(ggml_backend_buft_alloc_buffer(repack_type_, total));
  if (!packed) {
    return errorf("out_of_memory", "{}: cannot allocate {} MiB for repacked weights", gguf_.path(),
                  total >> 20);
  }
  ggml_backend_buffer_set_usage(packed.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  uint8_t* packed_base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(packed.get()));
  advise_huge_pages(packed_base, total);
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
    if (!read_in_place(e.offset)) file_.release(e.offset, e.size);
  }
  out.buffers.push_back(std::move(packed));
  return {};
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
      if (e.copy) out.copied_bytes += e.size;
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

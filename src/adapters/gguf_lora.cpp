#include "adapters/gguf_lora.h"

#include <fcntl.h>
#include <ggml-cpp.h>
#include <ggml.h>
#include <gguf.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "adapters/targets.h"
#include "io/gguf_file.h"
#include "io/mmap.h"
#include "io/prefault.h"
#include "util/log.h"

namespace graft {

namespace {

struct GgufLoraScan {
  AdapterDescription description;
  std::optional<GgufFile> file;
  std::map<std::pair<int, LoraTarget>, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> tensors;
};

// "blk.N.<target>.weight" -> (N, target)
std::optional<std::pair<int, LoraTarget>> parse_base_name(const std::string& base) {
  if (!base.starts_with("blk.") || !base.ends_with(".weight")) return std::nullopt;
  const std::string middle = base.substr(4, base.size() - 4 - 7);  // "N.<target>"
  const size_t dot = middle.find('.');
  if (dot == std::string::npos || dot == 0) return std::nullopt;
  int layer = 0;
  for (char c : middle.substr(0, dot)) {
    if (c < '0' || c > '9' || layer > 1000000) return std::nullopt;
    layer = layer * 10 + (c - '0');
  }
  auto target = target_from_gguf_name(middle.substr(dot + 1));
  if (!target) return std::nullopt;
  return std::make_pair(layer, *target);
}

Result<GgufLoraScan> scan_gguf_lora(const fs::path& path) {
  const std::string where = path.string();
  auto opened = GgufFile::open(where);
  if (!opened) return make_error("invalid_adapter", opened.error().message);
  GgufLoraScan scan;
  scan.file = std::move(opened).value();
  const GgufFile& file = *scan.file;
  const std::string type = file.find_string("general.type").value_or("");
  if (type != "adapter") {
    return errorf("invalid_adapter", "{}: not an adapter (general.type is '{}', expected 'adapter')", where,
                  type);
  }
  const std::string adapter_type = file.find_string("adapter.type").value_or("");
  if (adapter_type != "lora") {
    return errorf("invalid_adapter", "{}: adapter.type is '{}'; only 'lora' adapters are supported", where,
                  adapter_type);
  }
  if (file.has("adapter.alora.invocation_tokens")) {
    return errorf("invalid_adapter", "{}: activated LoRA (aLoRA) adapters are not supported", where);
  }
  AdapterDescription& d = scan.description;
  d.format = AdapterFormat::gguf;
  d.weights_path = path;
  d.size_bytes = file.file_size();
  d.architecture = file.find_string("general.architecture").value_or("");
  if (file.has("adapter.lora.alpha")) {
    auto alpha = file.get_float("adapter.lora.alpha");
    if (!alpha) return make_error("invalid_adapter", alpha.error().message);
    d.scaling.alpha = float(*alpha);
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    const bool is_a = t.name.ends_with(".lora_a");
    const bool is_b = t.name.ends_with(".lora_b");
    if (!is_a && !is_b) {
      if (t.name.ends_with("_norm.weight")) {
        GRAFT_LOG_WARN("{}: ignoring tensor '{}' (adapters of norm weights are not applied)", where, t.name);
        continue;
      }
      return errorf("invalid_adapter", "{}: tensor '{}' is neither a .lora_a nor a .lora_b weight", where,
                    t.name);
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);
    auto key = parse_base_name(base);
    if (!key) {
      return errorf(
          "invalid_adapter",
          "{}: tensor '{}' does not adapt a decoder layer projection graft supports (attn_q, attn_k, "
          "attn_v, attn_output, ffn_gate, ffn_up, ffn_down; qwen35: attn_qkv, attn_gate, ssm_alpha, "
          "ssm_beta, "
          "ssm_out)",
          where, t.name);
    }
    if (t.n_dims > 2) {
      return errorf("invalid_adapter", "{}: tensor '{}' has {} dimensions, expected 2", where, t.name,
                    t.n_dims);
    }
    if (t.type != GGML_TYPE_F32 && !ggml_get_type_traits(t.type)->to_float) {
      return errorf("invalid_adapter", "{}: tensor '{}' has type {}, which cannot be read", where, t.name,
                    ggml_type_name(t.type));
    }
    auto& slot = scan.tensors[*key];
    (is_b ? slot.second : slot.first) = &t;
  }
  for (const auto& [key, pair] : scan.tensors) {
    const auto [layer, target] = key;
    const GgufTensorInfo* a = pair.first;
    const GgufTensorInfo* b = pair.second;
    if (!a || !b) {
      return errorf("invalid_adapter", "{}: {} has {} but no {}", where, base_tensor_name(layer, target),
                    a ? "lora_a" : "lora_b", a ? "lora_b" : "lora_a");
    }
    // lora_a: ne [n_in, rank]; lora_b: ne [rank, n_out].
    if (a->ne[1] != b->ne[0]) {
      return errorf("invalid_adapter",
                    "{}: {}: lora_a has rank {} but lora_b has rank {} (is lora_a transposed?)", where,
                    base_tensor_name(layer, target), a->ne[1], b->ne[0]);
    }
    d.modules.push_back({layer, target, int(a->ne[1]), a->ne[0], b->ne[1]});
  }
  GRAFT_TRY_STATUS(finish_description(d, where));
  return scan;
}

Result<LoraMatrix> matrix_of(const std::shared_ptr<const MappedFile>& map, const GgufTensorInfo& t) {
  if (t.offset + t.size > map->size()) {
    return errorf("invalid_adapter", "tensor '{}' lies outside the file", t.name);
  }
  return LoraMatrix{map->data() + t.offset, t.type, t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3], map};
}

}  // namespace

bool is_gguf_adapter(const fs::path& path) {
  auto file = GgufFile::open(path.string());
  return file && file->find_string("general.type").value_or("") == "adapter";
}

Result<AdapterDescription> describe_gguf_lora(const fs::path& path) {
  GRAFT_TRY(GgufLoraScan scan, scan_gguf_lora(path));
  return std::move(scan.description);
}

Result<LoraAdapter> read_gguf_lora(const fs::path& path) {
  GRAFT_TRY(GgufLoraScan scan, scan_gguf_lora(path));
  auto opened = MappedFile::open(path.string());
  if (!opened) return make_error("invalid_adapter", opened.error().message);
  auto map = std::make_shared<const MappedFile>(std::move(opened).value());
  if (map->size() != scan.file->file_size()) {
    return errorf("invalid_adapter", "{}: the file changed while it was read", path.string());
  }
  LoraAdapter adapter;
  adapter.scaling = scan.description.scaling;
  prefault_readable(map->data(), map->size());
  for (const LoraModule& m : scan.description.modules) {
    const auto& [a, b] = scan.tensors.at({m.layer, m.target});
    LoraPair pair;
    pair.layer = m.layer;
    pair.target = m.target;
    pair.rank = m.rank;
    GRAFT_TRY(pair.a, matrix_of(map, *a));
    GRAFT_TRY(pair.b, matrix_of(map, *b));
    adapter.pairs.push_back(std::move(pair));
  }
  return adapter;
}

Status write_gguf_lora(const fs::path& path, const LoraAdapter& adapter,
                       const GgufLoraWriteOptions& options) {
  if (adapter.pairs.empty()) return errorf("invalid_argument", "an adapter needs at least one LoRA pair");
  ggml_type type;
  if (options.type == "f32") {
    type = GGML_TYPE_F32;
  } else if (options.type == "f16") {
    type = GGML_TYPE_F16;
  } else if (options.type == "bf16") {
    type = GGML_TYPE_BF16;
  } else {
    return errorf("invalid_argument", "unsupported adapter tensor type '{}' (f32, f16, bf16)", options.type);
  }
  // GGUF has no rsLoRA key: store the alpha that gives the same scale at the nominal rank.
  float alpha = adapter.scaling.alpha;
  if (adapter.scaling.rslora) {
    for (const LoraPair& p : adapter.pairs) {
      if (p.rank != adapter.scaling.rank) {
        return errorf("invalid_argument", "an rsLoRA adapter with mixed ranks cannot be written as GGUF");
      }
    }
    alpha = adapter.scaling.alpha * std::sqrt(float(adapter.scaling.rank));
  }

  gguf_context_ptr meta(gguf_init_empty());
  gguf_set_val_str(meta.get(), "general.architecture", options.architecture.c_str());
  gguf_set_val_str(meta.get(), "general.type", "adapter");
  if (!options.name.empty()) gguf_set_val_str(meta.get(), "general.name", options.name.c_str());
  gguf_set_val_str(meta.get(), "adapter.type", "lora");
  gguf_set_val_f32(meta.get(), "adapter.lora.alpha", alpha);

  size_t bytes = 0;
  for (const LoraPair& p : adapter.pairs) {
    bytes += ggml_row_size(type, p.a.n) + ggml_row_size(type, p.b.n);
  }
  ggml_init_params params{};
  params.mem_size =
      bytes + ggml_tensor_overhead() * (2 * adapter.pairs.size() + 1) + 64 * adapter.pairs.size();
  params.no_alloc = false;
  ggml_context_ptr ctx(ggml_init(params));
  if (!ctx) return errorf("io_error", "cannot allocate {} bytes for the adapter", bytes);
  auto add = [&](const std::string& name, int64_t ne0, int64_t ne1, const LoraMatrix& m) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx.get(), type, ne0, ne1);
    ggml_set_name(t, name.c_str());
    if (m.type == type) {
      std::memcpy(t->data, m.data, ggml_nbytes(t));
      gguf_add_tensor(meta.get(), t);
      return;
    }
    const std::vector<float> values = m.floats();
    if (type == GGML_TYPE_F32) {
      std::memcpy(t->data, values.data(), values.size() * sizeof(float));
    } else if (type == GGML_TYPE_F16) {
      ggml_fp32_to_fp16_row(values.data(), static_cast<ggml_fp16_t*>(t->data), int64_t(values.size()));
    } else {
      ggml_fp32_to_bf16_row(values.data(), static_cast<ggml_bf16_t*>(t->data), int64_t(values.size()));
    }
    gguf_add_tensor(meta.get(), t);
  };
  for (const LoraPair& p : adapter.pairs) {
    if (p.rank <= 0 || p.a.n % p.rank != 0 || p.b.n % p.rank != 0) {
      return errorf("invalid_argument", "layer {} {}: sizes of a and b do not fit rank {}", p.layer,
                    gguf_target_name(p.target), p.rank);
    }
    const std::string base = base_tensor_name(p.layer, p.target);
    add(base + ".lora_a", p.a.n / p.rank, p.rank, p.a);
    add(base + ".lora_b", p.rank, p.b.n / p.rank, p.b);
  }
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  errno = 0;
  if (!gguf_write_to_file(meta.get(), tmp.c_str(), /*only_meta=*/false)) {
    const int err = errno;
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot write {}{}", tmp, err ? std::string(": ") + std::strerror(err) : "");
  }
  // Flush before the rename, so a crash leaves the old file or the whole new one.
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot rename {} to {}", tmp, path.string());
  }
  return {};
}

}  // namespace graft

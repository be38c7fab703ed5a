#include "adapters/base_model.h"

#include <gguf.h>

#include <algorithm>

#include "adapters/targets.h"
#include "util/hash.h"

namespace graft {

namespace {

// A metadata value as stable text: scalars printed, arrays element by element.
void hash_value(Sha256& hash, gguf_context* ctx, int64_t id) {
  auto size_of = [](gguf_type type) -> size_t {
    switch (type) {
      case GGUF_TYPE_UINT8:
      case GGUF_TYPE_INT8:
      case GGUF_TYPE_BOOL:
        return 1;
      case GGUF_TYPE_UINT16:
      case GGUF_TYPE_INT16:
        return 2;
      case GGUF_TYPE_UINT32:
      case GGUF_TYPE_INT32:
      case GGUF_TYPE_FLOAT32:
        return 4;
      default:
        return 8;
    }
  };
  auto scalar = [&](gguf_type type, const void* p) {
    switch (type) {
      case GGUF_TYPE_UINT8:
        return std::to_string(*static_cast<const uint8_t*>(p));
      case GGUF_TYPE_INT8:
        return std::to_string(*static_cast<const int8_t*>(p));
      case GGUF_TYPE_UINT16:
        return std::to_string(*static_cast<const uint16_t*>(p));
      case GGUF_TYPE_INT16:
        return std::to_string(*static_cast<const int16_t*>(p));
      case GGUF_TYPE_UINT32:
        return std::to_string(*static_cast<const uint32_t*>(p));
      case GGUF_TYPE_INT32:
        return std::to_string(*static_cast<const int32_t*>(p));
      case GGUF_TYPE_UINT64:
        return std::to_string(*static_cast<const uint64_t*>(p));
      case GGUF_TYPE_INT64:
        return std::to_string(*static_cast<const int64_t*>(p));
      case GGUF_TYPE_FLOAT32:
        return fmt::format("{}", *static_cast<const float*>(p));
      case GGUF_TYPE_FLOAT64:
        return fmt::format("{}", *static_cast<const double*>(p));
      case GGUF_TYPE_BOOL:
        return std::string(*static_cast<const bool*>(p) ? "true" : "false");
      default:
        return std::string("?");
    }
  };
  const gguf_type type = gguf_get_kv_type(ctx, id);
  if (type == GGUF_TYPE_STRING) {
    hash.update(gguf_get_val_str(ctx, id));
  } else if (type == GGUF_TYPE_ARRAY) {
    const gguf_type element = gguf_get_arr_type(ctx, id);
    const size_t n = gguf_get_arr_n(ctx, id);
    hash.update(fmt::format("[{}]", n));
    for (size_t i = 0; i < n; ++i) {
      if (element == GGUF_TYPE_STRING) {
        hash.update(gguf_get_arr_str(ctx, id, i));
      } else {
        const auto* data = static_cast<const uint8_t*>(gguf_get_arr_data(ctx, id));
        hash.update(scalar(element, data + i * size_of(element)));
      }
      hash.update("\x1f", 1);
    }
  } else {
    hash.update(scalar(type, gguf_get_val_data(ctx, id)));
  }
}

std::string strip_prefix(std::string text, std::string_view prefix) {
  if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());
  return text;
}

}  // namespace

std::string model_fingerprint(const GgufFile& file) {
  gguf_context* ctx = file.raw();
  Sha256 hash;
  hash.update("graft-base-fingerprint/1\n");
  const std::string arch = file.find_string("general.architecture").value_or("");
  hash.update("arch=" + arch + "\n");
  std::vector<std::string> keys;
  for (const std::string& key : file.keys()) {
    if (key.rfind(arch + ".", 0) == 0 || key == "tokenizer.ggml.model" || key == "tokenizer.ggml.tokens") {
      keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    hash.update(key + "=");
    hash_value(hash, ctx, gguf_find_key(ctx, key.c_str()));
    hash.update("\n");
  }
  std::vector<const GgufTensorInfo*> tensors;
  for (const auto& t : file.tensors()) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const GgufTensorInfo* t : tensors) {
    hash.update(fmt::format("{}:{},{},{},{}\n", t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]));
  }
  return "sha256:" + hash.hex_digest();
}

std::string short_fingerprint(const std::string& fingerprint) {
  return strip_prefix(fingerprint, "sha256:").substr(0, 12);
}

Result<BaseModel> BaseModel::from_gguf(const GgufFile& file) {
  BaseModel base;
  GRAFT_TRY(base.architecture, file.get_string("general.architecture"));
  if (file.find_string("general.type").value_or("model") == "adapter") {
    return errorf("invalid_argument", "{} is an adapter, not a base model", file.path());
  }
  GRAFT_TRY(int64_t n_layer, file.get_int(base.architecture + ".block_count"));
  base.n_layer = int(n_layer);
  base.name = file.find_string("general.name").value_or("");
  if (auto repo = file.find_string("general.source.huggingface.repository")) {
    base.repo = *repo;
  } else if (auto url = file.find_string("general.source.repo_url")) {
    base.repo = strip_prefix(*url, "https://huggingface.co/");
  } else if (auto own = file.find_string("general.repo_url")) {
    base.repo = strip_prefix(*own, "https://huggingface.co/");
  }
  base.fingerprint = model_fingerprint(file);
  if (base.architecture == "qwen35") {
    const std::string a = base.architecture + ".ssm.";
    base.ssm_k_heads = int(file.find_int(a + "group_count").value_or(0));
    base.ssm_v_heads = int(file.find_int(a + "time_step_rank").value_or(0));
    base.ssm_head_dim = int(file.find_int(a + "state_size").value_or(0));
  }
  for (int layer = 0; layer < base.n_layer; ++layer) {
    for (LoraTarget target : kAllLoraTargets) {
      if (const GgufTensorInfo* t = file.find_tensor(base_tensor_name(layer, target))) {
        base.shapes[{layer, target}] = {t->ne[0], t->ne[1]};
      }
    }
  }
  return base;
}

Result<BaseModel> BaseModel::open(const std::string& path) {
  GRAFT_TRY(GgufFile file, GgufFile::open(path));
  return from_gguf(file);
}

std::string BaseModel::label() const {
  if (!repo.empty()) return repo;
  if (!name.empty()) return name;
  return short_fingerprint(fingerprint);
}

Status check_adapter_fits(const AdapterDescription& adapter, const BaseModel& base) {
  const std::string where = adapter.weights_path.string();
  if (!lora_architecture_supported(base.architecture)) {
    return errorf("incompatible_adapter", "graft does not apply adapters to '{}' models", base.architecture);
  }
  if (!adapter.architecture.empty() && adapter.architecture != base.architecture) {
    return errorf("incompatible_adapter", "{}: made for a '{}' model, the base model is '{}'", where,
                  adapter.architecture, base.architecture);
  }
  for (const LoraModule& m : adapter.modules) {
    if (m.layer >= base.n_layer) {
      return errorf("incompatible_adapter", "{}: adapts layer {}, the base model has {} layers", where,
                    m.layer, base.n_layer);
    }
    auto it = base.shapes.find({m.layer, m.target});
    if (it == base.shapes.end()) {
      return errorf("incompatible_adapter", "{}: the base model has no {}", where,
                    base_tensor_name(m.layer, m.target));
    }
    const auto [n_in, n_out] = it->second;
    if (m.n_in != n_in || m.n_out != n_out) {
      return errorf("incompatible_adapter",
                    "{}: {} is {} -> {} in the adapter but {} -> {} in the base model", where,
                    base_tensor_name(m.layer, m.target), m.n_in, m.n_out, n_in, n_out);
    }
  }
  return {};
}

}  // namespace graft

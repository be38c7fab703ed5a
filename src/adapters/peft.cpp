#include "adapters/peft.h"

#include <charconv>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "adapters/targets.h"
#include "util/files.h"
#include "util/strings.h"

namespace graft {

namespace {

using json = nlohmann::json;

struct PeftTensorName {
  int layer;
  LoraTarget target;
  bool lora_b;
};

// Maps a tensor name to its layer, target and side, or says why it cannot.
Result<PeftTensorName> parse_tensor_name(const std::string& name, const std::string& where) {
  if (name.find("lora_magnitude_vector") != std::string::npos) {
    return errorf("invalid_adapter", "{}: tensor '{}': DoRA adapters are not supported", where, name);
  }
  if (name.find("lora_embedding_") != std::string::npos || name.find("embed_tokens") != std::string::npos ||
      name.find("lm_head") != std::string::npos) {
    return errorf("invalid_adapter",
                  "{}: tensor '{}': adapters of the embedding or output layer are not supported (only the "
                  "q/k/v/o/gate/up/down projections of decoder layers)",
                  where, name);
  }
  // layers . N . block . module . lora_X [. adapter_name] . weight, or
  // layers . N . module . lora_X [. adapter_name] . weight for a module on
  // the layer itself (gemma4's per-layer-input projections).
  auto parts = split_layer_tensor_name(name);
  if (parts && !parts->tail.empty()) {
    const auto on_layer = target_from_peft_name(parts->tail[0]);
    if (on_layer && peft_block_name(*on_layer).empty()) parts->tail.insert(parts->tail.begin(), "");
  }
  if (!parts || parts->tail.size() < 4 || parts->tail.size() > 5 || parts->tail.back() != "weight") {
    return errorf("invalid_adapter",
                  "{}: tensor '{}' is not a LoRA weight of a decoder layer projection (expected names like "
                  "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')",
                  where, name);
  }
  const std::string& side = parts->tail[2];
  auto target = projection_target(parts->tail[0], parts->tail[1], name, where);
  if (!target) return target.error();
  if (side != "lora_A" && side != "lora_B") {
    return errorf("invalid_adapter", "{}: tensor '{}' is neither lora_A nor lora_B", where, name);
  }
  return PeftTensorName{parts->layer, *target, side == "lora_B"};
}

struct PeftScan {
  AdapterDescription description;
  std::optional<SafetensorsFile> file;
  std::map<std::pair<int, LoraTarget>, std::pair<const SafetensorsTensor*, const SafetensorsTensor*>> tensors;
};

Result<PeftScan> scan_peft(const fs::path& dir) {
  const fs::path config_path = dir / kPeftConfigFile;
  const fs::path weights_path = dir / kPeftWeightsFile;
  std::error_code ec;
  if (!fs::is_regular_file(weights_path, ec)) {
    if (fs::exists(dir / "adapter_model.bin", ec)) {
      return errorf(
          "invalid_adapter",
          "{}: adapter_model.bin (a PyTorch pickle) is not supported; save the adapter as safetensors",
          dir.string());
    }
    return errorf("invalid_adapter", "{}: missing {}", dir.string(), kPeftWeightsFile);
  }
  if (!fs::is_regular_file(config_path, ec)) {
    return errorf("invalid_adapter", "{}: missing {}", dir.string(), kPeftConfigFile);
  }
  GRAFT_TRY(std::string config_text, read_file(config_path));
  GRAFT_TRY(PeftConfig config, parse_peft_config(config_text, config_path.string()));
  auto file = SafetensorsFile::open(weights_path.string());
  if (!file) return make_error("invalid_adapter", file.error().message);

  PeftScan scan;
  scan.file = std::move(file).value();
  const std::string where = weights_path.string();
  for (const SafetensorsTensor& t : scan.file->tensors()) {
    GRAFT_TRY(PeftTensorName n, parse_tensor_name(t.name, where));
    GRAFT_TRY_STATUS(check_lora_matrix_tensor(t, where));
    auto& slot = scan.tensors[{n.layer, n.target}];
    (n.lora_b ? slot.second : slot.first) = &t;
  }
  AdapterDescription& d = scan.description;
  d.format = AdapterFormat::peft;
  d.weights_path = weights_path;
  d.base_model = config.base_model_name_or_path;
  d.scaling = {config.lora_alpha, config.r, config.use_rslora};
  d.size_bytes = scan.file->file_size();
  for (const auto& [key, pair] : scan.tensors) {
    const auto [layer, target] = key;
    const SafetensorsTensor* a = pair.first;
    const SafetensorsTensor* b = pair.second;
    if (!a || !b) {
      return errorf("invalid_adapter", "{}: layer {} {} has lora_{} but no lora_{}", where, layer,
                    peft_target_name(target), a ? "A" : "B", a ? "B" : "A");
    }
    // lora_A: [rank, n_in]; lora_B: [n_out, rank].
    if (a->shape[0] != b->shape[1]) {
      return errorf("invalid_adapter", "{}: layer {} {}: lora_A has rank {} but lora_B has rank {}", where,
                    layer, peft_target_name(target), a->shape[0], b->shape[1]);
    }
    d.modules.push_back({layer, target, int(a->shape[0]), a->shape[1], b->shape[0]});
  }
  GRAFT_TRY_STATUS(finish_description(d, where));
  return scan;
}

std::vector<int> int_list(const json& j) {
  std::vector<int> out;
  if (j.is_number_integer()) out.push_back(j.get<int>());
  if (j.is_array()) {
    for (const auto& x : j) {
      if (x.is_number_integer()) out.push_back(x.get<int>());
    }
  }
  return out;
}

}  // namespace

Result<PeftConfig> parse_peft_config(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return errorf("invalid_adapter", "{}: not a JSON object", where);
  }
  auto bad = [&](const std::string& why) { return errorf("invalid_adapter", "{}: {}", where, why); };
  if (j.contains("peft_type") && j["peft_type"] != "LORA") {
    return bad("peft_type is " + j["peft_type"].dump() + "; only LORA adapters are supported");
  }
  PeftConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int>() <= 0) {
    return bad("'r' (the LoRA rank) must be a positive integer");
  }
  c.r = j["r"].get<int>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number()) return bad("'lora_alpha' must be a number");
  c.lora_alpha = j["lora_alpha"].get<float>();
  if (j.contains("use_rslora") && j["use_rslora"].is_boolean()) c.use_rslora = j["use_rslora"].get<bool>();
  if (j.value("use_dora", false) == true) return bad("DoRA adapters (use_dora) are not supported");
  if (j.value("fan_in_fan_out", false) == true) return bad("fan_in_fan_out adapters are not supported");
  if (j.contains("bias") && j["bias"].is_string() && j["bias"] != "none") {
    return bad("adapters with trained biases (bias = " + j["bias"].dump() + ") are not supported");
  }
  if (j.contains("alpha_pattern") && j["alpha_pattern"].is_object() && !j["alpha_pattern"].empty()) {
    return bad("per-module alpha (alpha_pattern) is not supported");
  }
  if (j.contains("target_modules")) {
    const json& t = j["target_modules"];
    if (t.is_string()) c.target_modules.push_back(t.get<std::string>());
    if (t.is_array()) {
      for (const auto& x : t) {
        if (x.is_string()) c.target_modules.push_back(x.get<std::string>());
      }
    }
  }
  if (j.contains("layers_to_transform")) c.layers_to_transform = int_list(j["layers_to_transform"]);
  if (j.contains("rank_pattern") && j["rank_pattern"].is_object()) {
    for (const auto& [key, value] : j["rank_pattern"].items()) {
      if (value.is_number_integer()) c.rank_pattern[key] = value.get<int>();
    }
  }
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  }
  return c;
}

std::string peft_config_json(const PeftConfig& c) {
  json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path",
       c.base_model_name_or_path.empty() ? json(nullptr) : json(c.base_model_name_or_path)},
      {"r", c.r},
      {"lora_alpha", c.lora_alpha},
      {"lora_dropout", 0.0},
      {"use_rslora", c.use_rslora},
      {"use_dora", false},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"target_modules", c.target_modules},
      {"layers_to_transform", c.layers_to_transform.empty() ? json(nullptr) : json(c.layers_to_transform)},
      {"modules_to_save", nullptr},
      {"rank_pattern", c.rank_pattern.empty() ? json::object() : json(c.rank_pattern)},
      {"alpha_pattern", json::object()},
  };
  return j.dump(2) + "\n";
}

bool is_peft_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kPeftConfigFile, ec) || fs::exists(dir / kPeftWeightsFile, ec) ||
         fs::exists(dir / "adapter_model.bin", ec);
}

std::optional<LayerTensorName> split_layer_tensor_name(const std::string& name) {
  const std::vector<std::string_view> parts = split(name, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] != "layers") continue;
    int layer = 0;
    const std::string_view n = parts[i + 1];
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), layer);
    if (ec != std::errc() || end != n.data() + n.size() || layer < 0) continue;
    LayerTensorName out{layer, {}};
    for (size_t j = i + 2; j < parts.size(); ++j) out.tail.emplace_back(parts[j]);
    return out;
  }
  return std::nullopt;
}

Status check_lora_matrix_tensor(const SafetensorsTensor& t, const std::string& where) {
  if (t.shape.size() != 2) {
    return errorf("invalid_adapter", "{}: tensor '{}' has {} dimensions, expected 2", where, t.name,
                  t.shape.size());
  }
  if (t.float_dtype() == SafetensorsDtype::other) {
    return errorf("invalid_adapter", "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 are supported",
                  where, t.name, t.dtype);
  }
  return {};
}

Result<LoraTarget> projection_target(const std::string& block, const std::string& module,
                                     const std::string& name, const std::string& where) {
  auto target = target_from_peft_name(module);
  if (!target) {
    return errorf(
        "invalid_adapter",
        "{}: tensor '{}': unknown module '{}' (graft adapts q_proj, k_proj, v_proj, o_proj, gate_proj, "
        "up_proj and down_proj, qwen35's in_proj_qkv, in_proj_z, in_proj_a, in_proj_b and out_proj, and "
        "gemma4's per_layer_input_gate and per_layer_projection)",
        where, name, module);
  }
  if (block != peft_block_name(*target)) {
    if (peft_block_name(*target).empty()) {
      return errorf("invalid_adapter",
                    "{}: tensor '{}': module '{}' belongs on the layer itself, not in '{}'", where, name,
                    module, block);
    }
    return errorf("invalid_adapter", "{}: tensor '{}': module '{}' belongs in '{}', not '{}'", where, name,
                  module, peft_block_name(*target), block.empty() ? "the layer itself" : block);
  }
  return *target;
}

std::string peft_tensor_name(int layer, LoraTarget target, bool lora_b) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + peft_module_path(target) +
         (lora_b ? ".lora_B.weight" : ".lora_A.weight");
}

Result<AdapterDescription> describe_peft(const fs::path& dir) {
  GRAFT_TRY(PeftScan scan, scan_peft(dir));
  return std::move(scan.description);
}

namespace {

Result<LoraMatrix> matrix_of(const SafetensorsFile& file, const SafetensorsTensor& tensor) {
  ggml_type type = GGML_TYPE_F32;
  switch (tensor.float_dtype()) {
    case SafetensorsDtype::f32:
      type = GGML_TYPE_F32;
      break;
    case SafetensorsDtype::f16:
      type = GGML_TYPE_F16;
      break;
    case SafetensorsDtype::bf16:
      type = GGML_TYPE_BF16;
      break;
    default:
      return errorf("invalid_file", "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 are supported",
                    file.path(), tensor.name, tensor.dtype);
  }
  return LoraMatrix{file.bytes(tensor).data(), type, tensor.numel(), file.mapping()};
}

}  // namespace

Result<LoraAdapter> read_peft(const fs::path& dir) {
  GRAFT_TRY(PeftScan scan, scan_peft(dir));
  LoraAdapter adapter;
  adapter.scaling = scan.description.scaling;
  scan.file->prefault();
  for (const LoraModule& m : scan.description.modules) {
    const auto& [a, b] = scan.tensors.at({m.layer, m.target});
    LoraPair pair;
    pair.layer = m.layer;
    pair.target = m.target;
    pair.rank = m.rank;
    GRAFT_TRY(pair.a, matrix_of(*scan.file, *a));
    GRAFT_TRY(pair.b, matrix_of(*scan.file, *b));
    adapter.pairs.push_back(std::move(pair));
  }
  return adapter;
}

Status write_peft(const fs::path& dir, const LoraAdapter& adapter, const PeftWriteOptions& options) {
  if (adapter.pairs.empty()) return errorf("invalid_argument", "an adapter needs at least one LoRA pair");
  if (adapter.scaling.rank <= 0) return errorf("invalid_argument", "an adapter needs a positive rank");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", dir.string(), ec.message());
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  PeftConfig config;
  config.r = adapter.scaling.rank;
  config.lora_alpha = adapter.scaling.alpha;
  config.use_rslora = adapter.scaling.rslora;
  config.base_model_name_or_path = options.base_model_name_or_path;
  std::set<LoraTarget> targets;
  std::set<int> layers;
  for (const LoraPair& p : adapter.pairs) {
    if (p.rank <= 0 || p.a.n % p.rank != 0 || p.b.n % p.rank != 0) {
      return errorf("invalid_argument", "layer {} {}: sizes of a and b do not fit rank {}", p.layer,
                    peft_target_name(p.target), p.rank);
    }
    const int64_t n_in = p.a.n / p.rank;
    const int64_t n_out = p.b.n / p.rank;
    GRAFT_TRY_STATUS(
        writer.add(peft_tensor_name(p.layer, p.target, false), {p.rank, n_in}, p.a.floats(), options.dtype));
    GRAFT_TRY_STATUS(
        writer.add(peft_tensor_name(p.layer, p.target, true), {n_out, p.rank}, p.b.floats(), options.dtype));
    targets.insert(p.target);
    layers.insert(p.layer);
    if (p.rank != config.r) {
      config.rank_pattern["model.layers." + std::to_string(p.layer) + "." +
                          std::string(peft_block_name(p.target)) + "." +
                          std::string(peft_target_name(p.target))] = p.rank;
    }
  }
  for (LoraTarget t : targets) config.target_modules.emplace_back(peft_target_name(t));
  config.layers_to_transform.assign(layers.begin(), layers.end());
  GRAFT_TRY_STATUS(writer.write((dir / kPeftWeightsFile).string()));
  return write_file_atomic(dir / kPeftConfigFile, peft_config_json(config));
}

}  // namespace graft

namespace graft {

namespace {

// For each GGUF value-head position, the Hugging Face head it holds.
std::vector<int> gguf_heads_from_peft(int k_heads, int v_heads) {
  const int per_key = v_heads / k_heads;
  std::vector<int> from(static_cast<size_t>(v_heads), 0);
  for (int j = 0; j < per_key; ++j) {
    for (int k = 0; k < k_heads; ++k) from[size_t(j * k_heads + k)] = k * per_key + j;
  }
  return from;
}

// Moves blocks of `block` floats, n_heads of them starting at `first`, every
// `stride` floats (rows) for `repeat` rows, from one head order to the other.
void move_heads(std::vector<float>& data, const std::vector<int>& from, HeadOrder direction, size_t first,
                size_t block, size_t stride, size_t repeat) {
  std::vector<float> copy(from.size() * block);
  for (size_t row = 0; row < repeat; ++row) {
    float* heads = data.data() + row * stride + first;
    std::copy(heads, heads + copy.size(), copy.begin());
    for (size_t i = 0; i < from.size(); ++i) {
      const size_t dst = direction == HeadOrder::peft_to_gguf ? i : size_t(from[i]);
      const size_t src = direction == HeadOrder::peft_to_gguf ? size_t(from[i]) : i;
      std::copy_n(copy.begin() + std::ptrdiff_t(src * block), block, heads + dst * block);
    }
  }
}

}  // namespace

void reorder_value_heads(LoraAdapter& adapter, const BaseModel& base, HeadOrder direction) {
  const int k_heads = base.ssm_k_heads, v_heads = base.ssm_v_heads;
  if (k_heads <= 0 || v_heads <= k_heads || v_heads % k_heads != 0) return;
  const std::vector<int> from = gguf_heads_from_peft(k_heads, v_heads);
  const size_t hd = size_t(base.ssm_head_dim);
  for (LoraPair& p : adapter.pairs) {
    const size_t rank = size_t(p.rank);
    // Moves whole rows or columns, so the matrix keeps its type: F16 and
    // BF16 round back exactly; anything else becomes F32 (the type it is
    // mounted as anyway).
    auto reorder = [&](LoraMatrix& m, size_t first, size_t unit, size_t stride, size_t count) {
      std::vector<float> values = m.floats();
      move_heads(values, from, direction, first, unit, stride, count);
      const bool keep = m.type == GGML_TYPE_F16 || m.type == GGML_TYPE_BF16;
      m = LoraMatrix::of_floats(std::move(values), keep ? m.type : GGML_TYPE_F32);
    };
    switch (p.target) {
      case LoraTarget::attn_qkv:  // B: [2 * key_dim + value_dim, rank]; the v rows come last
        reorder(p.b, 2 * size_t(k_heads) * hd * rank, hd * rank, 0, 1);
        break;
      case LoraTarget::attn_gate:  // B: [value_dim, rank]
        reorder(p.b, 0, hd * rank, 0, 1);
        break;
      case LoraTarget::ssm_alpha:
      case LoraTarget::ssm_beta:  // B: [n_v_heads, rank]
        reorder(p.b, 0, rank, 0, 1);
        break;
      case LoraTarget::ssm_out:  // A: [rank, value_dim]
        reorder(p.a, 0, hd, size_t(v_heads) * hd, rank);
        break;
      default:
        break;
    }
  }
}

}  // namespace graft

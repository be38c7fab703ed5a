#include "adapters/mlx.h"

#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "adapters/peft.h"
#include "adapters/targets.h"
#include "util/files.h"

namespace graft {

namespace {

using json = nlohmann::json;

struct MlxTensorName {
  int layer;
  LoraTarget target;
  bool lora_b;
  std::string key;  // "self_attn.q_proj", as lora_parameters.keys names it
};

Result<MlxTensorName> parse_tensor_name(const std::string& name, const std::string& where) {
  auto parts = split_layer_tensor_name(name);
  // layers . N . block . module . lora_a|lora_b, or layers . N . module .
  // lora_a|lora_b for a module on the layer itself (gemma4's per-layer inputs)
  if (parts && !parts->tail.empty()) {
    const auto on_layer = target_from_peft_name(parts->tail[0]);
    if (on_layer && peft_block_name(*on_layer).empty()) parts->tail.insert(parts->tail.begin(), "");
  }
  if (!parts || parts->tail.size() != 3) {
    if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos) {
      return errorf("invalid_adapter",
                    "{}: tensor '{}': adapters of the embedding or output layer are not supported (only the "
                    "projections of decoder layers)",
                    where, name);
    }
    return errorf("invalid_adapter",
                  "{}: tensor '{}' is not a LoRA weight of a decoder layer projection (expected names like "
                  "'model.layers.0.self_attn.q_proj.lora_a')",
                  where, name);
  }
  const std::string& block = parts->tail[0];
  const std::string& module = parts->tail[1];
  const std::string& side = parts->tail[2];
  if (side == "m") {
    return errorf("invalid_adapter", "{}: tensor '{}': DoRA adapters are not supported", where, name);
  }
  if (side != "lora_a" && side != "lora_b") {
    return errorf(
        "invalid_adapter",
        "{}: tensor '{}' is neither lora_a nor lora_b (quantized mlx-lm adapters are not supported)", where,
        name);
  }
  auto target = projection_target(block, module, name, where);
  if (!target) return target.error();
  return MlxTensorName{parts->layer, *target, side == "lora_b", peft_module_path(*target)};
}

struct MlxScan {
  AdapterDescription description;
  std::optional<SafetensorsFile> file;
  std::map<std::pair<int, LoraTarget>, std::pair<const SafetensorsTensor*, const SafetensorsTensor*>> tensors;
};

Result<MlxScan> scan_mlx(const fs::path& dir) {
  const fs::path config_path = dir / kMlxConfigFile;
  const fs::path weights_path = dir / kMlxWeightsFile;
  std::error_code ec;
  if (!fs::is_regular_file(weights_path, ec)) {
    return errorf("invalid_adapter", "{}: missing {} (an mlx-lm adapter)", dir.string(), kMlxWeightsFile);
  }
  if (!fs::is_regular_file(config_path, ec)) {
    return errorf("invalid_adapter", "{}: missing {} (an mlx-lm adapter)", dir.string(), kMlxConfigFile);
  }
  GRAFT_TRY(std::string config_text, read_file(config_path));
  GRAFT_TRY(MlxConfig config, parse_mlx_config(config_text, config_path.string()));
  auto file = SafetensorsFile::open(weights_path.string());
  if (!file) return make_error("invalid_adapter", file.error().message);

  MlxScan scan;
  scan.file = std::move(file).value();
  const std::string where = weights_path.string();
  std::set<std::string> keys;
  if (config.keys) keys.insert(config.keys->begin(), config.keys->end());
  for (const SafetensorsTensor& t : scan.file->tensors()) {
    GRAFT_TRY(MlxTensorName n, parse_tensor_name(t.name, where));
    if (config.keys && !keys.contains(n.key)) {
      return errorf("invalid_adapter",
                    "{}: tensor '{}' adapts '{}', which 'lora_parameters.keys' does not list", where, t.name,
                    n.key);
    }
    GRAFT_TRY_STATUS(check_lora_matrix_tensor(t, where));
    auto& slot = scan.tensors[{n.layer, n.target}];
    (n.lora_b ? slot.second : slot.first) = &t;
  }
  AdapterDescription& d = scan.description;
  d.format = AdapterFormat::mlx;
  d.weights_path = weights_path;
  d.base_model = config.model;
  d.scaling = {config.scale * float(config.rank), config.rank, false};
  d.size_bytes = scan.file->file_size();
  for (const auto& [key, pair] : scan.tensors) {
    const auto [layer, target] = key;
    const SafetensorsTensor* a = pair.first;
    const SafetensorsTensor* b = pair.second;
    if (!a || !b) {
      return errorf("invalid_adapter", "{}: layer {} {} has lora_{} but no lora_{}", where, layer,
                    peft_target_name(target), a ? "a" : "b", a ? "b" : "a");
    }
    // lora_a: [n_in, rank]; lora_b: [rank, n_out].
    if (a->shape[1] != config.rank || b->shape[0] != config.rank) {
      return errorf("invalid_adapter",
                    "{}: layer {} {}: lora_a is {}x{} and lora_b {}x{}, but 'lora_parameters.rank' is {} "
                    "(mlx-lm stores lora_a as [in, rank] and lora_b as [rank, out])",
                    where, layer, peft_target_name(target), a->shape[0], a->shape[1], b->shape[0],
                    b->shape[1], config.rank);
    }
    d.modules.push_back({layer, target, config.rank, a->shape[0], b->shape[1]});
  }
  GRAFT_TRY_STATUS(finish_description(d, where));
  return scan;
}

// A [rows, cols] matrix of the file as [cols, rows], in its own type.
Result<LoraMatrix> transposed(const SafetensorsFile& file, const SafetensorsTensor& t) {
  GRAFT_TRY(std::vector<float> values, file.read_floats(t));
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = values[size_t(r * cols + c)];
  }
  const SafetensorsDtype dtype = t.float_dtype();
  const ggml_type type = dtype == SafetensorsDtype::f16    ? GGML_TYPE_F16
                         : dtype == SafetensorsDtype::bf16 ? GGML_TYPE_BF16
                                                           : GGML_TYPE_F32;
  return LoraMatrix::of_floats(std::move(out), type);  // F16 and BF16 round back exactly
}

}  // namespace

Result<MlxConfig> parse_mlx_config(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return errorf("invalid_adapter", "{}: not a JSON object", where);
  auto bad = [&](const std::string& why) { return errorf("invalid_adapter", "{}: {}", where, why); };
  MlxConfig c;
  if (j.contains("fine_tune_type")) {
    const json& t = j["fine_tune_type"];
    if (!t.is_string()) return bad("'fine_tune_type' must be a string (lora)");
    if (t == "dora") return bad("'fine_tune_type' is \"dora\": DoRA adapters are not supported");
    if (t == "full") return bad("'fine_tune_type' is \"full\": a full fine-tune is a model, not an adapter");
    if (t != "lora") return bad("'fine_tune_type' is " + t.dump() + "; only \"lora\" adapters are supported");
  }
  if (j.value("use_dora", false) == true) return bad("'use_dora' is true: DoRA adapters are not supported");
  if (!j.contains("lora_parameters") || !j["lora_parameters"].is_object()) {
    return bad("'lora_parameters' must be an object with \"rank\" and \"scale\"");
  }
  const json& p = j["lora_parameters"];
  if (!p.contains("rank") || !p["rank"].is_number_integer() || p["rank"].get<int64_t>() <= 0 ||
      p["rank"].get<int64_t>() > 65536) {
    return bad("'lora_parameters.rank' must be a positive integer");
  }
  c.rank = p["rank"].get<int>();
  if (!p.contains("scale") || !p["scale"].is_number() || !std::isfinite(p["scale"].get<double>()) ||
      p["scale"].get<double>() <= 0) {
    return bad("'lora_parameters.scale' must be a positive number (the multiplier of the LoRA delta)");
  }
  c.scale = p["scale"].get<float>();
  if (p.contains("dropout") && !p["dropout"].is_null()) {
    if (!p["dropout"].is_number() || p["dropout"].get<double>() < 0 || p["dropout"].get<double>() >= 1) {
      return bad("'lora_parameters.dropout' must be a number from 0 to below 1");
    }
    c.dropout = p["dropout"].get<float>();
  }
  if (p.contains("keys") && !p["keys"].is_null()) {
    if (!p["keys"].is_array()) return bad("'lora_parameters.keys' must be a list of module paths");
    std::vector<std::string> keys;
    for (const json& k : p["keys"]) {
      if (!k.is_string()) return bad("'lora_parameters.keys' must be a list of module paths (strings)");
      keys.push_back(k.get<std::string>());
    }
    c.keys = std::move(keys);
  }
  const char* layers_field = j.contains("num_layers") ? "num_layers" : "lora_layers";  // older mlx-lm
  if (j.contains(layers_field) && !j[layers_field].is_null()) {
    const json& n = j[layers_field];
    if (!n.is_number_integer() || (n.get<int64_t>() < 1 && n.get<int64_t>() != -1)) {
      return bad(fmt::format("'{}' must be a positive integer, or -1 for every layer", layers_field));
    }
    c.num_layers = n.get<int>();
  }
  if (j.contains("model") && j["model"].is_string()) c.model = j["model"].get<std::string>();
  return c;
}

std::string mlx_config_json(const MlxConfig& c) {
  json params = {{"rank", c.rank}, {"scale", c.scale}, {"dropout", c.dropout}};
  params["keys"] = c.keys ? json(*c.keys) : json(nullptr);
  json j = {{"fine_tune_type", "lora"}, {"num_layers", c.num_layers}, {"lora_parameters", params}};
  if (!c.model.empty()) j["model"] = c.model;
  return j.dump(4) + "\n";
}

bool is_mlx_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kMlxWeightsFile, ec)) return true;
  if (!fs::is_regular_file(dir / kMlxConfigFile, ec)) return false;
  auto text = read_file(dir / kMlxConfigFile);
  if (!text) return false;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("lora_parameters");
}

Result<AdapterDescription> describe_mlx(const fs::path& dir) {
  GRAFT_TRY(MlxScan scan, scan_mlx(dir));
  return std::move(scan.description);
}

Result<LoraAdapter> read_mlx(const fs::path& dir) {
  GRAFT_TRY(MlxScan scan, scan_mlx(dir));
  LoraAdapter adapter;
  adapter.scaling = scan.description.scaling;
  for (const LoraModule& m : scan.description.modules) {
    const auto& [a, b] = scan.tensors.at({m.layer, m.target});
    LoraPair pair;
    pair.layer = m.layer;
    pair.target = m.target;
    pair.rank = m.rank;
    GRAFT_TRY(pair.a, transposed(*scan.file, *a));
    GRAFT_TRY(pair.b, transposed(*scan.file, *b));
    adapter.pairs.push_back(std::move(pair));
  }
  return adapter;
}

std::string mlx_tensor_name(int layer, LoraTarget target, bool lora_b) {
  return "model.layers." + std::to_string(layer) + "." + peft_module_path(target) +
         (lora_b ? ".lora_b" : ".lora_a");
}

Status write_mlx(const fs::path& dir, const LoraAdapter& adapter, SafetensorsDtype dtype) {
  if (adapter.pairs.empty()) return errorf("invalid_argument", "an adapter needs at least one LoRA pair");
  const int rank = adapter.scaling.rank;
  if (rank <= 0) return errorf("invalid_argument", "an adapter needs a positive rank");
  if (adapter.scaling.rslora) return errorf("invalid_argument", "mlx-lm adapters have no rsLoRA scaling");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", dir.string(), ec.message());
  SafetensorsWriter writer;
  MlxConfig config;
  config.rank = rank;
  config.scale = adapter.scaling.scale();
  std::set<std::string> keys;
  for (const LoraPair& p : adapter.pairs) {
    if (p.rank != rank) {
      return errorf("invalid_argument",
                    "layer {} {}: rank {} differs from the adapter's {} (mlx-lm has one rank)", p.layer,
                    peft_target_name(p.target), p.rank, rank);
    }
    if (p.a.n % rank != 0 || p.b.n % rank != 0) {
      return errorf("invalid_argument", "layer {} {}: sizes of a and b do not fit rank {}", p.layer,
                    peft_target_name(p.target), rank);
    }
    const int64_t n_in = p.a.n / rank, n_out = p.b.n / rank;
    // a: [rank, n_in] → [n_in, rank]; b: [n_out, rank] → [rank, n_out].
    auto transpose = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
      std::vector<float> out(v.size());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = v[size_t(r * cols + c)];
      }
      return out;
    };
    GRAFT_TRY_STATUS(writer.add(mlx_tensor_name(p.layer, p.target, false), {n_in, rank},
                                transpose(p.a.floats(), rank, n_in), dtype));
    GRAFT_TRY_STATUS(writer.add(mlx_tensor_name(p.layer, p.target, true), {rank, n_out},
                                transpose(p.b.floats(), n_out, rank), dtype));
    keys.insert(peft_module_path(p.target));
  }
  config.keys = std::vector<std::string>(keys.begin(), keys.end());
  GRAFT_TRY_STATUS(writer.write((dir / kMlxWeightsFile).string()));
  return write_file_atomic(dir / kMlxConfigFile, mlx_config_json(config));
}

}  // namespace graft

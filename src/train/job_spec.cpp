#include "train/job_spec.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace graft {

namespace {

// TrainConfig's names that a job sets through its own fields.
const char* const kSetElsewhere[] = {"model", "data", "valid", "adapter_id", "seed", "batch_size", "epochs"};

// Other names "lora" takes for a setting: the CLI's (--warmup) and the short
// forms the web page and the issue use.
const std::pair<const char*, const char*> kAliases[] = {{"warmup", "warmup_steps"},
                                                        {"grad_accum", "grad_accumulation"}};

// The TrainConfig name of a "lora" field (itself unless an alias).
std::string canonical(const std::string& name) {
  for (const auto& [alias, setting] : kAliases) {
    if (name == alias) return setting;
  }
  return name;
}

// Every setting of a default TrainConfig: its JSON name and the type of its value.
const json& defaults() {
  static const json d = to_json(TrainConfig{});
  return d;
}

std::string value_text(const json& value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

bool integral(const json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   v.get<double>() == std::floor(v.get<double>()));
}

// Why a "lora" value has the wrong type for its setting, or "".
std::string type_problem(const std::string& name, const json& value) {
  const json& like = name == "mask_prompt" ? json(true) : defaults().at(canonical(name));
  if (like.is_boolean() && !value.is_boolean()) return "must be true or false";
  if (like.is_number_integer() && (!value.is_number() || !integral(value))) return "must be an integer";
  if (like.is_number_float() && !value.is_number()) return "must be a number";
  if (like.is_string() && !value.is_string()) return "must be a string";
  if (like.is_array()) {
    if (!value.is_array() || value.empty()) return "must be a non-empty list";
    for (const json& item : value) {
      if (!item.is_string()) return "must be a list of names";
    }
  }
  return "";
}

// The API field a `graft train` option stands for ("--rank" → "lora.rank").
std::string param_of_flag(const std::string& flag, const JobSpec& spec) {
  std::string name = flag.substr(2);
  std::replace(name.begin(), name.end(), '-', '_');
  if (name == "epochs") return "hyperparameters.n_epochs";
  if (name == "batch_size") return "hyperparameters.batch_size";
  if (name == "learning_rate" && !spec.lora.contains("learning_rate") && spec.learning_rate_multiplier) {
    return "hyperparameters.learning_rate_multiplier";
  }
  // The field as the request named it (an alias or the setting's own name).
  const std::string setting = canonical(name);
  for (auto it = spec.lora.begin(); it != spec.lora.end(); ++it) {
    if (canonical(it.key()) == setting) return "lora." + it.key();
  }
  return "lora." + setting;
}

std::string number_text(double value) {
  return fmt::format("{}", value);
}

}  // namespace

const std::vector<std::string>& lora_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> names;
    for (auto it = defaults().begin(); it != defaults().end(); ++it) {
      if (std::find(std::begin(kSetElsewhere), std::end(kSetElsewhere), it.key()) ==
          std::end(kSetElsewhere)) {
        names.push_back(it.key());
      }
    }
    for (const auto& [alias, setting] : kAliases) names.push_back(alias);
    return names;
  }();
  return fields;
}

Result<TrainConfig> job_train_config(const JobSpec& spec, const ModelConfig* model, std::string* param) {
  auto refuse = [&](const std::string& field, std::string message) -> Error {
    if (param) *param = field;
    return make_error("invalid_argument", std::move(message));
  };
  const auto& known = lora_fields();
  json settings = json::object();
  for (auto it = spec.lora.begin(); it != spec.lora.end(); ++it) {
    const std::string& name = it.key();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      if (name == "batch_size" || name == "epochs") {
        return refuse("lora." + name, fmt::format("'lora.{}': give it as hyperparameters.{}", name,
                                                  name == "epochs" ? "n_epochs" : name));
      }
      return refuse("lora." + name, fmt::format("unknown training setting 'lora.{}' (known: {})", name,
                                                fmt::join(known, ", ")));
    }
    if (std::string why = type_problem(name, it.value()); !why.empty()) {
      return refuse("lora." + name, fmt::format("'lora.{}' {} (got {})", name, why, value_text(it.value())));
    }
    if (name == "alpha") continue;
    const std::string setting = canonical(name);
    if (settings.contains(setting)) {
      return refuse("lora." + name,
                    fmt::format("'lora.{}' sets '{}', which another field of 'lora' sets too: give one", name,
                                setting));
    }
    if (auto alone = train_config_from_json(json{{setting, it.value()}}); !alone) {
      return refuse("lora." + name, fmt::format("'lora.{}': {}", name, alone.error().message));
    }
    settings[setting] = it.value();
  }
  if (spec.lora.contains("alpha") && spec.lora.contains("scale")) {
    return refuse("lora.scale", "give 'lora.alpha' or 'lora.scale', not both (scale = alpha / rank)");
  }
  if (spec.lora.contains("iters") && spec.n_epochs) {
    return refuse("lora.iters",
                  "give the length of training once: 'lora.iters' or 'hyperparameters.n_epochs'");
  }
  auto parsed = train_config_from_json(settings);
  if (!parsed) return refuse("lora", parsed.error().message);
  TrainConfig c = std::move(*parsed);
  if (spec.lora.contains("alpha")) c.scale = spec.lora["alpha"].get<double>() / std::max(1, c.rank);
  if (spec.n_epochs) c.epochs = static_cast<int>(*spec.n_epochs);
  if (spec.batch_size) c.batch_size = static_cast<int>(*spec.batch_size);
  if (spec.learning_rate_multiplier) c.learning_rate *= *spec.learning_rate_multiplier;
  c.seed = static_cast<uint64_t>(spec.seed);
  if (model) {
    if (Status valid = c.validate(*model); !valid) {
      std::string message = valid.error().message;
      std::string field = "lora";
      if (message.rfind("--", 0) == 0) {
        const std::string flag = message.substr(0, message.find_first_of(" :"));
        field = param_of_flag(flag, spec);
        message = field + message.substr(flag.size());
      }
      return refuse(field, message);
    }
  }
  return c;
}

json to_json(const JobSpec& spec) {
  json j = {{"model", spec.model},
            {"model_path", spec.model_path.string()},
            {"training_file", spec.training_file},
            {"validation_file", spec.validation_file},
            {"training_path", spec.training_path.string()},
            {"validation_path", spec.validation_path.string()},
            {"suffix", spec.suffix},
            {"seed", spec.seed},
            {"lora", spec.lora},
            {"auto_load", spec.auto_load},
            {"metadata", spec.metadata}};
  j["n_epochs"] = spec.n_epochs ? json(*spec.n_epochs) : json(nullptr);
  j["batch_size"] = spec.batch_size ? json(*spec.batch_size) : json(nullptr);
  j["learning_rate_multiplier"] =
      spec.learning_rate_multiplier ? json(*spec.learning_rate_multiplier) : json(nullptr);
  return j;
}

Result<JobSpec> job_spec_from_json(const json& j) {
  try {
    JobSpec spec;
    spec.model = j.at("model").get<std::string>();
    spec.model_path = j.at("model_path").get<std::string>();
    spec.training_file = j.at("training_file").get<std::string>();
    spec.validation_file = j.at("validation_file").get<std::string>();
    spec.training_path = j.at("training_path").get<std::string>();
    spec.validation_path = j.at("validation_path").get<std::string>();
    spec.suffix = j.at("suffix").get<std::string>();
    spec.seed = j.at("seed").get<int64_t>();
    spec.lora = j.at("lora");
    spec.auto_load = j.at("auto_load").get<bool>();
    spec.metadata = j.at("metadata");
    if (!j.at("n_epochs").is_null()) spec.n_epochs = j["n_epochs"].get<int64_t>();
    if (!j.at("batch_size").is_null()) spec.batch_size = j["batch_size"].get<int64_t>();
    if (!j.at("learning_rate_multiplier").is_null()) {
      spec.learning_rate_multiplier = j["learning_rate_multiplier"].get<double>();
    }
    return spec;
  } catch (const json::exception& e) {
    return errorf("invalid_argument", "a stored job's parameters cannot be read: {}", e.what());
  }
}

std::vector<std::string> fresh_run_arguments(const JobSpec& spec, const std::string& adapter_id,
                                             const fs::path& store_dir, const fs::path& job_dir) {
  std::vector<std::string> args = {spec.model_path.string(),
                                   "--data",
                                   spec.training_path.string(),
                                   "--id",
                                   adapter_id,
                                   "--store",
                                   store_dir.string(),
                                   "--job-dir",
                                   job_dir.string(),
                                   "--seed",
                                   std::to_string(spec.seed)};
  auto option = [&](std::string flag, std::string value) {
    args.push_back(std::move(flag));
    args.push_back(std::move(value));
  };
  if (!spec.validation_path.empty()) option("--valid", spec.validation_path.string());
  if (spec.n_epochs) option("--epochs", std::to_string(*spec.n_epochs));
  if (spec.batch_size) option("--batch-size", std::to_string(*spec.batch_size));
  for (auto it = spec.lora.begin(); it != spec.lora.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    std::string flag = "--" + name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (canonical(name) == "warmup_steps") flag = "--warmup";
    if (canonical(name) == "grad_accumulation") flag = "--grad-accumulation";
    if (name == "learning_rate" && spec.learning_rate_multiplier) continue;  // written below
    if (v.is_boolean()) {
      if (name == "mask_prompt") {
        args.push_back(v.get<bool>() ? "--mask-prompt" : "--no-mask-prompt");
      } else if (v.get<bool>()) {
        args.push_back(flag);
      }
    } else if (v.is_array()) {
      option(flag, fmt::format("{}", fmt::join(v.get<std::vector<std::string>>(), ",")));
    } else if (v.is_string()) {
      option(flag, v.get<std::string>());
    } else if (integral(v) && defaults().at(canonical(name)).is_number_integer()) {
      option(flag, std::to_string(static_cast<int64_t>(v.get<double>())));
    } else {
      option(flag, number_text(v.get<double>()));
    }
  }
  if (spec.learning_rate_multiplier) {
    const double base = spec.lora.contains("learning_rate") ? spec.lora["learning_rate"].get<double>()
                                                            : TrainConfig{}.learning_rate;
    option("--learning-rate", number_text(base * *spec.learning_rate_multiplier));
  }
  return args;
}

std::vector<std::string> resume_arguments(const fs::path& job_dir) {
  return {"--resume", job_dir.string()};
}

}  // namespace graft

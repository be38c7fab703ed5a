#include "train/job_spec.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace graft {

namespace {

// The trainer's learning rate when a job names none (learning_rate_multiplier scales it).
constexpr double kDefaultLearningRate = 1e-5;

using Kind = TrainerParam::Kind;

std::string number_text(double value) {
  return fmt::format("{}", value);
}

std::string value_text(const json& value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "…" : text;
}

}  // namespace

const std::vector<TrainerParam>& trainer_params() {
  static const std::vector<TrainerParam> params = {
      {"rank", "--rank", Kind::integer, 1, 1024, {}, "LoRA rank"},
      {"alpha", "--alpha", Kind::number, 1e-6, 1e6, {}, "LoRA alpha (scale = alpha / rank)"},
      {"scale", "--scale", Kind::number, 1e-6, 1e6, {}, "LoRA scale (instead of alpha)"},
      {"dropout", "--dropout", Kind::number, 0, 0.99, {}, "dropout on the LoRA input"},
      {"num_layers", "--num-layers", Kind::integer, -1, 4096, {}, "train the last N layers (-1: all)"},
      {"targets",
       "--targets",
       Kind::list,
       0,
       0,
       {"q", "k", "v", "o", "gate", "up", "down"},
       "projections that get LoRA"},
      {"learning_rate", "--learning-rate", Kind::number, 1e-12, 1, {}, "peak learning rate"},
      {"lr_schedule", "--lr-schedule", Kind::choice, 0, 0, {"constant", "cosine"}, "learning-rate schedule"},
      {"warmup", "--warmup", Kind::integer, 0, 1e9, {}, "warm-up steps"},
      {"weight_decay", "--weight-decay", Kind::number, 0, 1, {}, "AdamW weight decay"},
      {"beta1", "--beta1", Kind::number, 0, 0.999999, {}, "AdamW beta1"},
      {"beta2", "--beta2", Kind::number, 0, 0.999999, {}, "AdamW beta2"},
      {"grad_clip", "--grad-clip", Kind::number, 0, 1e6, {}, "clip the gradient norm (0: off)"},
      {"iters", "--iters", Kind::integer, 1, 1e9, {}, "optimizer steps (instead of n_epochs)"},
      {"grad_accum", "--grad-accum", Kind::integer, 1, 1024, {}, "batches per optimizer step"},
      {"max_seq_length", "--max-seq-length", Kind::integer, 8, 1 << 20, {}, "longer examples are truncated"},
      {"save_every", "--save-every", Kind::integer, 1, 1e9, {}, "checkpoint every N steps"},
      {"val_every", "--val-every", Kind::integer, 1, 1e9, {}, "validate every N steps"},
      {"val_batches", "--val-batches", Kind::integer, -1, 1e9, {}, "batches per validation (-1: all)"},
      {"grad_checkpoint", "--grad-checkpoint", Kind::boolean, 0, 0, {}, "recompute activations in backward"},
      {"mask_prompt", "--mask-prompt", Kind::boolean, 0, 0, {}, "loss on the answer only"},
  };
  return params;
}

std::optional<std::string> check_trainer_param(std::string_view name, const json& value) {
  const auto& params = trainer_params();
  auto it = std::find_if(params.begin(), params.end(), [&](const TrainerParam& p) { return p.name == name; });
  if (it == params.end()) {
    std::string known;
    for (const TrainerParam& p : params) known += (known.empty() ? "" : ", ") + p.name;
    return fmt::format("unknown training parameter '{}' (known: {})", name, known);
  }
  const TrainerParam& p = *it;
  switch (p.kind) {
    case Kind::integer:
    case Kind::number: {
      const bool integral =
          value.is_number_integer() || (value.is_number_float() && std::isfinite(value.get<double>()) &&
                                        std::floor(value.get<double>()) == value.get<double>());
      if (!value.is_number() || (p.kind == Kind::integer && !integral)) {
        return fmt::format("'{}' must be {} (got {})", name,
                           p.kind == Kind::integer ? "an integer" : "a number", value_text(value));
      }
      const double x = value.get<double>();
      if (!std::isfinite(x) || x < p.min || x > p.max) {
        return fmt::format("'{}' must be between {} and {} (got {})", name, number_text(p.min),
                           number_text(p.max), value_text(value));
      }
      return std::nullopt;
    }
    case Kind::boolean:
      if (!value.is_boolean())
        return fmt::format("'{}' must be true or false (got {})", name, value_text(value));
      return std::nullopt;
    case Kind::choice: {
      const bool ok = value.is_string() && std::find(p.choices.begin(), p.choices.end(),
                                                     value.get<std::string>()) != p.choices.end();
      if (!ok)
        return fmt::format("'{}' must be one of {} (got {})", name, fmt::join(p.choices, ", "),
                           value_text(value));
      return std::nullopt;
    }
    case Kind::list: {
      if (!value.is_array() || value.empty()) {
        return fmt::format("'{}' must be a non-empty list of {} (got {})", name, fmt::join(p.choices, ", "),
                           value_text(value));
      }
      for (const json& item : value) {
        if (!item.is_string() ||
            std::find(p.choices.begin(), p.choices.end(), item.get<std::string>()) == p.choices.end()) {
          return fmt::format("'{}' has an unknown item {}: the items are {}", name, value_text(item),
                             fmt::join(p.choices, ", "));
        }
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
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
  if (!spec.validation_path.empty()) {
    args.push_back("--valid");
    args.push_back(spec.validation_path.string());
  }
  if (spec.n_epochs) {
    args.push_back("--epochs");
    args.push_back(std::to_string(*spec.n_epochs));
  }
  if (spec.batch_size) {
    args.push_back("--batch-size");
    args.push_back(std::to_string(*spec.batch_size));
  }
  for (const TrainerParam& p : trainer_params()) {
    auto it = spec.lora.find(p.name);
    if (it == spec.lora.end()) continue;
    const json& v = *it;
    switch (p.kind) {
      case Kind::integer:
        args.push_back(p.flag);
        args.push_back(std::to_string(static_cast<int64_t>(v.get<double>())));
        break;
      case Kind::number:
        if (p.name == "learning_rate" && spec.learning_rate_multiplier) break;  // written below
        args.push_back(p.flag);
        args.push_back(number_text(v.get<double>()));
        break;
      case Kind::boolean:
        if (p.name == "mask_prompt") {
          args.push_back(v.get<bool>() ? "--mask-prompt" : "--no-mask-prompt");
        } else if (v.get<bool>()) {
          args.push_back(p.flag);
        }
        break;
      case Kind::choice:
        args.push_back(p.flag);
        args.push_back(v.get<std::string>());
        break;
      case Kind::list: {
        std::vector<std::string> items = v.get<std::vector<std::string>>();
        args.push_back(p.flag);
        args.push_back(fmt::format("{}", fmt::join(items, ",")));
        break;
      }
    }
  }
  if (spec.learning_rate_multiplier) {
    const double base =
        spec.lora.contains("learning_rate") ? spec.lora["learning_rate"].get<double>() : kDefaultLearningRate;
    args.push_back("--learning-rate");
    args.push_back(number_text(base * *spec.learning_rate_multiplier));
  }
  return args;
}

std::vector<std::string> resume_arguments(const fs::path& job_dir) {
  return {"--resume", job_dir.string()};
}

}  // namespace graft

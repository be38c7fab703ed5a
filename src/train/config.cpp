#include "train/config.h"

#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>

#include "adapters/targets.h"

namespace graft {

Status TrainConfig::validate(const ModelConfig& m) const {
  auto bad = [](std::string what) { return Status(make_error("invalid_argument", std::move(what))); };
  if (rank < 1 || rank > m.n_embd) {
    return bad(fmt::format("--rank {} is out of range: use 1 to {} (the model's width)", rank, m.n_embd));
  }
  if (!(scale > 0.0) || !std::isfinite(scale))
    return bad(fmt::format("--scale must be positive (got {})", scale));
  if (!(dropout >= 0.0 && dropout < 1.0))
    return bad(fmt::format("--dropout must be in [0, 1) (got {})", dropout));
  if (num_layers == 0 || num_layers < -1) {
    return bad(fmt::format(
        "--num-layers {} is out of range: use 1 or more (the last N layers), or -1 for all", num_layers));
  }
  if (!(learning_rate > 0.0) || !std::isfinite(learning_rate)) {
    return bad(fmt::format("--learning-rate must be positive (got {})", learning_rate));
  }
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    return bad(fmt::format("--lr-schedule '{}' is not known: use constant or cosine", lr_schedule));
  }
  if (warmup_steps < 0) return bad("--warmup must not be negative");
  if (!(min_lr >= 0.0) || min_lr > learning_rate) return bad("--min-lr must be in [0, --learning-rate]");
  if (!(beta1 >= 0.0 && beta1 < 1.0f) || !(beta2 >= 0.0 && beta2 < 1.0f)) {
    return bad("--beta1 and --beta2 must be in [0, 1)");
  }
  if (!(adam_eps > 0.0)) return bad("--adam-eps must be positive");
  if (!(weight_decay >= 0.0)) return bad("--weight-decay must not be negative");
  if (!(grad_clip >= 0.0)) return bad("--grad-clip must not be negative (0 turns it off)");
  if (batch_size < 1) return bad("--batch-size must be at least 1");
  if (grad_accumulation < 1) return bad("--grad-accumulation must be at least 1");
  if (epochs < 0) return bad("--epochs must not be negative");
  if (epochs == 0 && iters < 1) return bad("--iters must be at least 1 (or give --epochs)");
  if (val_every < 1) return bad("--val-every must be at least 1");
  if (val_batches == 0 || val_batches < -1)
    return bad("--val-batches must be at least 1, or -1 for the whole set");
  if (save_every < 0) return bad("--save-every must not be negative");
  if (max_seq_length < 2) return bad("--max-seq-length must be at least 2");
  return {};
}

int TrainConfig::seq_limit(const ModelConfig& m) const {
  return m.n_ctx_train > 0 ? std::min(max_seq_length, m.n_ctx_train) : max_seq_length;
}

std::vector<int> TrainConfig::layers(const ModelConfig& m) const {
  const int n = num_layers < 0 ? m.n_layer : std::min(num_layers, m.n_layer);
  std::vector<int> out;
  for (int l = m.n_layer - n; l < m.n_layer; ++l) out.push_back(l);
  return out;
}

std::vector<LoraTarget> TrainConfig::target_list() const {
  if (!targets.empty()) return targets;
  return {kAllLoraTargets.begin(), kAllLoraTargets.end()};
}

double TrainConfig::lr_at(int step, int total) const {
  if (warmup_steps > 0 && step <= warmup_steps) return learning_rate * double(step) / double(warmup_steps);
  if (lr_schedule == "constant") return learning_rate;
  const int span = std::max(1, total - warmup_steps);
  const double progress = std::clamp(double(step - warmup_steps) / double(span), 0.0, 1.0);
  return min_lr + 0.5 * (learning_rate - min_lr) * (1.0 + std::cos(M_PI * progress));
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json targets = nlohmann::json::array();
  for (LoraTarget t : c.target_list()) targets.push_back(std::string(peft_target_name(t)));
  nlohmann::json j = {
      {"model", c.model},
      {"data", c.data},
      {"valid", c.valid},
      {"adapter_id", c.adapter_id},
      {"mask_prompt", c.mask_prompt ? nlohmann::json(*c.mask_prompt) : nlohmann::json()},
      {"max_seq_length", c.max_seq_length},
      {"rank", c.rank},
      {"scale", c.scale},
      {"alpha", c.scale * c.rank},
      {"dropout", c.dropout},
      {"num_layers", c.num_layers},
      {"targets", targets},
      {"learning_rate", c.learning_rate},
      {"lr_schedule", c.lr_schedule},
      {"warmup_steps", c.warmup_steps},
      {"min_lr", c.min_lr},
      {"beta1", c.beta1},
      {"beta2", c.beta2},
      {"adam_eps", c.adam_eps},
      {"weight_decay", c.weight_decay},
      {"grad_clip", c.grad_clip},
      {"batch_size", c.batch_size},
      {"grad_accumulation", c.grad_accumulation},
      {"iters", c.iters},
      {"epochs", c.epochs},
      {"val_every", c.val_every},
      {"val_batches", c.val_batches},
      {"save_every", c.save_every},
      {"seed", c.seed},
      {"grad_checkpoint", c.grad_checkpoint},
  };
  return j;
}

namespace {

using Setter = std::function<void(TrainConfig&, const nlohmann::json&)>;

template <typename T>
Setter field(T TrainConfig::*member) {
  return [member](TrainConfig& c, const nlohmann::json& v) { c.*member = v.get<T>(); };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> map = {
      {"model", field(&TrainConfig::model)},
      {"data", field(&TrainConfig::data)},
      {"valid", field(&TrainConfig::valid)},
      {"adapter_id", field(&TrainConfig::adapter_id)},
      {"mask_prompt",
       [](TrainConfig& c, const nlohmann::json& v) {
         c.mask_prompt = v.is_null() ? std::nullopt : std::optional<bool>(v.get<bool>());
       }},
      {"max_seq_length", field(&TrainConfig::max_seq_length)},
      {"rank", field(&TrainConfig::rank)},
      {"scale", field(&TrainConfig::scale)},
      {"alpha", [](TrainConfig&, const nlohmann::json&) {}},  // scale * rank, written for readers
      {"dropout", field(&TrainConfig::dropout)},
      {"num_layers", field(&TrainConfig::num_layers)},
      {"targets",
       [](TrainConfig& c, const nlohmann::json& v) {
         c.targets.clear();
         for (const auto& t : v) {
           auto target = parse_target(t.get<std::string>());
           if (!target) throw std::invalid_argument("unknown target '" + t.get<std::string>() + "'");
           c.targets.push_back(*target);
         }
       }},
      {"learning_rate", field(&TrainConfig::learning_rate)},
      {"lr_schedule", field(&TrainConfig::lr_schedule)},
      {"warmup_steps", field(&TrainConfig::warmup_steps)},
      {"min_lr", field(&TrainConfig::min_lr)},
      {"beta1", field(&TrainConfig::beta1)},
      {"beta2", field(&TrainConfig::beta2)},
      {"adam_eps", field(&TrainConfig::adam_eps)},
      {"weight_decay", field(&TrainConfig::weight_decay)},
      {"grad_clip", field(&TrainConfig::grad_clip)},
      {"batch_size", field(&TrainConfig::batch_size)},
      {"grad_accumulation", field(&TrainConfig::grad_accumulation)},
      {"iters", field(&TrainConfig::iters)},
      {"epochs", field(&TrainConfig::epochs)},
      {"val_every", field(&TrainConfig::val_every)},
      {"val_batches", field(&TrainConfig::val_batches)},
      {"save_every", field(&TrainConfig::save_every)},
      {"seed", field(&TrainConfig::seed)},
      {"grad_checkpoint", field(&TrainConfig::grad_checkpoint)},
  };
  return map;
}

}  // namespace

Result<TrainConfig> train_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return errorf("invalid_config", "the training config is not a JSON object");
  TrainConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto setter = setters().find(it.key());
    if (setter == setters().end()) return errorf("invalid_config", "unknown training setting '{}'", it.key());
    try {
      setter->second(c, it.value());
    } catch (const std::exception& e) {
      return errorf("invalid_config", "bad value for '{}' in the training config: {}", it.key(), e.what());
    }
  }
  return c;
}

}  // namespace graft

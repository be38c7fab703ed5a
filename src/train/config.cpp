#include "train/config.h"

#include <cmath>

#include "adapters/targets.h"

namespace graft {

Status TrainConfig::validate(const ModelConfig& m) const {
  auto bad = [](std::string what) { return Status(make_error("invalid_argument", std::move(what))); };
  if (rank < 1 || rank > m.n_embd) {
    return bad(fmt::format("--rank {} is out of range: use 1 to {} (the model's width)", rank, m.n_embd));
  }
  if (!(scale > 0.0f) || !std::isfinite(scale)) return bad(fmt::format("--scale must be positive (got {})", scale));
  if (!(dropout >= 0.0f && dropout < 1.0f)) return bad(fmt::format("--dropout must be in [0, 1) (got {})", dropout));
  if (num_layers == 0 || num_layers < -1 || num_layers > m.n_layer) {
    return bad(fmt::format("--num-layers {} is out of range: use 1 to {}, or -1 for all", num_layers, m.n_layer));
  }
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    return bad(fmt::format("--learning-rate must be positive (got {})", learning_rate));
  }
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    return bad(fmt::format("--lr-schedule '{}' is not known: use constant or cosine", lr_schedule));
  }
  if (warmup_steps < 0) return bad("--warmup must not be negative");
  if (!(min_lr >= 0.0f) || min_lr > learning_rate) return bad("--min-lr must be in [0, --learning-rate]");
  if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f)) {
    return bad("--beta1 and --beta2 must be in [0, 1)");
  }
  if (!(adam_eps > 0.0f)) return bad("--adam-eps must be positive");
  if (!(weight_decay >= 0.0f)) return bad("--weight-decay must not be negative");
  if (!(grad_clip >= 0.0f)) return bad("--grad-clip must not be negative (0 turns it off)");
  if (batch_size < 1) return bad("--batch-size must be at least 1");
  if (grad_accumulation < 1) return bad("--grad-accumulation must be at least 1");
  if (epochs < 0) return bad("--epochs must not be negative");
  if (epochs == 0 && iters < 1) return bad("--iters must be at least 1 (or give --epochs)");
  if (val_every < 1) return bad("--val-every must be at least 1");
  if (val_batches == 0 || val_batches < -1) return bad("--val-batches must be at least 1, or -1 for the whole set");
  if (save_every < 0) return bad("--save-every must not be negative");
  if (max_seq_length < 2) return bad("--max-seq-length must be at least 2");
  if (m.n_ctx_train > 0 && max_seq_length > m.n_ctx_train) {
    return bad(fmt::format("--max-seq-length {} is beyond the model's context of {} tokens", max_seq_length,
                           m.n_ctx_train));
  }
  return {};
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

float TrainConfig::lr_at(int step, int total) const {
  if (warmup_steps > 0 && step <= warmup_steps) return learning_rate * float(step) / float(warmup_steps);
  if (lr_schedule == "constant") return learning_rate;
  const int span = std::max(1, total - warmup_steps);
  const double progress = std::clamp(double(step - warmup_steps) / double(span), 0.0, 1.0);
  return float(min_lr + 0.5 * (learning_rate - min_lr) * (1.0 + std::cos(M_PI * progress)));
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
      {"alpha", c.scale * float(c.rank)},
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

Result<TrainConfig> train_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return errorf("invalid_config", "the training config is not a JSON object");
  TrainConfig c;
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const nlohmann::json& v = it.value();
      if (k == "model") c.model = v.get<std::string>();
      else if (k == "data") c.data = v.get<std::string>();
      else if (k == "valid") c.valid = v.get<std::string>();
      else if (k == "adapter_id") c.adapter_id = v.get<std::string>();
      else if (k == "mask_prompt") c.mask_prompt = v.is_null() ? std::nullopt : std::optional<bool>(v.get<bool>());
      else if (k == "max_seq_length") c.max_seq_length = v.get<int>();
      else if (k == "rank") c.rank = v.get<int>();
      else if (k == "scale") c.scale = v.get<float>();
      else if (k == "alpha") continue;  // scale * rank, written for readers
      else if (k == "dropout") c.dropout = v.get<float>();
      else if (k == "num_layers") c.num_layers = v.get<int>();
      else if (k == "targets") {
        c.targets.clear();
        for (const auto& t : v) {
          auto target = parse_target(t.get<std::string>());
          if (!target) return errorf("invalid_config", "unknown target '{}'", t.get<std::string>());
          c.targets.push_back(*target);
        }
      } else if (k == "learning_rate") c.learning_rate = v.get<float>();
      else if (k == "lr_schedule") c.lr_schedule = v.get<std::string>();
      else if (k == "warmup_steps") c.warmup_steps = v.get<int>();
      else if (k == "min_lr") c.min_lr = v.get<float>();
      else if (k == "beta1") c.beta1 = v.get<float>();
      else if (k == "beta2") c.beta2 = v.get<float>();
      else if (k == "adam_eps") c.adam_eps = v.get<float>();
      else if (k == "weight_decay") c.weight_decay = v.get<float>();
      else if (k == "grad_clip") c.grad_clip = v.get<float>();
      else if (k == "batch_size") c.batch_size = v.get<int>();
      else if (k == "grad_accumulation") c.grad_accumulation = v.get<int>();
      else if (k == "iters") c.iters = v.get<int>();
      else if (k == "epochs") c.epochs = v.get<int>();
      else if (k == "val_every") c.val_every = v.get<int>();
      else if (k == "val_batches") c.val_batches = v.get<int>();
      else if (k == "save_every") c.save_every = v.get<int>();
      else if (k == "seed") c.seed = v.get<uint64_t>();
      else if (k == "grad_checkpoint") c.grad_checkpoint = v.get<bool>();
      else return errorf("invalid_config", "unknown training setting '{}'", k);
    }
  } catch (const nlohmann::json::exception& e) {
    return errorf("invalid_config", "bad value in the training config: {}", e.what());
  }
  return c;
}

}  // namespace graft

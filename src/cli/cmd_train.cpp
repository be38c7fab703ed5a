// `graft train MODEL --data PATH`: trains a LoRA adapter and lands it in the
// adapter store. With --json, stdout carries one JSON event per line and
// nothing else (docs/training.md has the shapes); otherwise a live line per
// step and a summary go to stderr. SIGTERM or SIGINT finishes the current
// step, writes a checkpoint and exits 0; `--resume DIR` continues from it.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "adapters/targets.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace graft::cli {

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int sig) {
  if (g_stop.exchange(true)) {
    // A second signal: stop now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

struct TrainCliOptions {
  TrainRequest request;
  TrainConfig& c = request.config;
  std::string store, job_dir, resume, targets;
  double alpha = 0.0;
  bool mask_prompt = false, no_mask_prompt = false;
  bool json = false;
  int nice = 0;
};

std::string format_duration(double seconds) {
  const int64_t s = int64_t(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

class JsonEvents : public TrainEvents {
 public:
  void event(const nlohmann::json& e) override {
    std::fputs((e.dump() + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  void note(const std::string& line) override { std::fprintf(stderr, "%s\n", line.c_str()); }
};

class TerminalEvents : public TrainEvents {
 public:
  TerminalEvents() : live_(::isatty(STDERR_FILENO) != 0) {}
  void event(const nlohmann::json& e) override {
    const std::string type = e["type"];
    if (type == "start") {
      line(fmt::format("training on {} examples ({} tokens{}), {} steps{}; run folder {}",
                       e["train_examples"].get<int64_t>(), e["train_tokens"].get<int64_t>(),
                       e["truncated"].get<int64_t>() > 0
                           ? fmt::format(", {} truncated", e["truncated"].get<int64_t>())
                           : "",
                       e["total_steps"].get<int>(),
                       e["resumed_from"].get<int>() > 0
                           ? fmt::format(", resuming after step {}", e["resumed_from"].get<int>())
                           : "",
                       e["job_dir"].get<std::string>()));
    } else if (type == "step") {
      const std::string text =
          fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  {:.1f} tok/s  ETA {}", e["step"].get<int>(),
                      e["total_steps"].get<int>(), e["train_loss"].get<double>(), e["lr"].get<double>(),
                      e["tokens_per_s"].get<double>(), format_duration(e["eta_s"].get<double>()));
      if (live_) {
        std::fprintf(stderr, "\r\033[K%s", text.c_str());
        std::fflush(stderr);
        pending_ = true;
      } else {
        line(text);
      }
    } else if (type == "val") {
      line(fmt::format("step {}: val loss {:.4f}", e["step"].get<int>(), e["val_loss"].get<double>()));
    } else if (type == "checkpoint") {
      line(fmt::format("step {}: checkpoint {}", e["step"].get<int>(), e["path"].get<std::string>()));
    } else if (type == "stopped") {
      line(fmt::format("stopped after step {}; continue with: graft train --resume <run folder>",
                       e["step"].get<int>()));
    } else if (type == "done") {
      line(fmt::format(
          "done: adapter '{}' in {}\n  train loss {:.4f}{}, {} tokens in {}",
          e["adapter_id"].get<std::string>(), e["adapter_path"].get<std::string>(),
          e["train_loss"].get<double>(),
          e["val_loss"].is_null() ? "" : fmt::format(", val loss {:.4f}", e["val_loss"].get<double>()),
          e["tokens"].get<int64_t>(), format_duration(e["wall_s"].get<double>())));
    }
  }
  void note(const std::string& text) override { line(text); }

 private:
  void line(const std::string& text) {
    if (pending_) std::fputc('\n', stderr);
    pending_ = false;
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  bool live_;
  bool pending_ = false;
};

[[noreturn]] void fail(bool json, const Error& error, const DataLocation& where) {
  if (json) {
    nlohmann::json e = {{"type", "error"},
                        {"code", error.code},
                        {"message", error.message},
                        {"file", where.file.empty() ? nlohmann::json() : nlohmann::json(where.file)},
                        {"line", where.line > 0 ? nlohmann::json(where.line) : nlohmann::json()}};
    std::fputs((e.dump() + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  std::fprintf(stderr, "graft: %s\n", error.message.c_str());
  throw CLI::RuntimeError(1);
}

// Options that only a fresh run takes (refused with --resume).
const char* const kRunOptions[] = {"--data",
                                   "--valid",
                                   "--id",
                                   "--store",
                                   "--job-dir",
                                   "--mask-prompt",
                                   "--no-mask-prompt",
                                   "--max-seq-length",
                                   "--rank",
                                   "--alpha",
                                   "--scale",
                                   "--dropout",
                                   "--num-layers",
                                   "--targets",
                                   "--learning-rate",
                                   "--lr-schedule",
                                   "--warmup",
                                   "--min-lr",
                                   "--beta1",
                                   "--beta2",
                                   "--adam-eps",
                                   "--weight-decay",
                                   "--grad-clip",
                                   "--batch-size",
                                   "--grad-accumulation",
                                   "--iters",
                                   "--epochs",
                                   "--val-every",
                                   "--val-batches",
                                   "--save-every",
                                   "--seed",
                                   "--grad-checkpoint",
                                   "--save-init"};

void run_train(CLI::App* cmd, TrainCliOptions& o) {
  DataLocation where;
  auto refuse = [&](const std::string& message) {
    fail(o.json, make_error("invalid_argument", message), {});
  };
  if (!o.resume.empty()) {
    for (const char* name : kRunOptions) {
      if (cmd->count(name) > 0)
        refuse(fmt::format("{} cannot be changed when resuming: the run keeps its own config", name));
    }
    if (!o.c.model.empty())
      refuse("the model comes from the run's config when resuming: give only --resume DIR");
    o.request.resume = o.resume;
  } else {
    if (o.c.model.empty()) refuse("give the base model: graft train MODEL --data PATH");
    if (o.c.data.empty()) refuse("--data is required: a .jsonl file or a folder with train.jsonl");
    if (o.mask_prompt && o.no_mask_prompt) refuse("--mask-prompt and --no-mask-prompt contradict each other");
    if (o.mask_prompt) o.c.mask_prompt = true;
    if (o.no_mask_prompt) o.c.mask_prompt = false;
    if (cmd->count("--alpha") > 0) {
      if (cmd->count("--scale") > 0) refuse("give --alpha or --scale, not both (scale = alpha / rank)");
      o.c.scale = o.alpha / double(std::max(1, o.c.rank));
    }
    if (!o.targets.empty()) {
      auto targets = parse_target_list(o.targets);
      if (!targets) fail(o.json, targets.error(), {});
      o.c.targets = *targets;
    }
    o.request.store = o.store;
    o.request.run_dir = o.job_dir;
  }
  if (o.nice != 0 && ::setpriority(PRIO_PROCESS, 0, o.nice) != 0)
    refuse("--nice: cannot change the priority");

  auto trainer = Trainer::prepare(o.request, &where);
  if (!trainer) fail(o.json, trainer.error(), where);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::unique_ptr<TrainEvents> events;
  if (o.json) {
    events = std::make_unique<JsonEvents>();
  } else {
    events = std::make_unique<TerminalEvents>();
  }
  Status status = (*trainer)->run(*events, g_stop);
  if (!status) fail(o.json, status.error(), {});
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainCliOptions>();
  TrainConfig& c = o->c;
  auto* cmd = app.add_subcommand(
      "train", "Train a LoRA adapter on a frozen base model and add it to the adapter store");
  cmd->add_option("model", c.model, "Base model (GGUF: F32, F16, BF16, Q8_0, Q4_0, ...)");
  cmd->add_option("--data", c.data,
                  "Training data: a .jsonl file, or a folder with train.jsonl (+ valid.jsonl, test.jsonl)");
  cmd->add_option("--valid", c.valid, "Validation .jsonl (default: the data folder's valid.jsonl)");
  cmd->add_option("--id", c.adapter_id, "Adapter id in the store (default: <model>-lora-<date>-<time>)");
  cmd->add_option("--store", o->store, "Adapter store to add the adapter to (default: graft's user store)");
  cmd->add_option("--job-dir", o->job_dir,
                  "Run folder for config and checkpoints (default: under graft's data folder)");
  cmd->add_option("--resume", o->resume, "Continue the run in this folder from its last checkpoint");
  cmd->add_flag("--json", o->json, "Machine output: one JSON event per line on stdout");
  cmd->add_option("-t,--threads", o->request.threads, "Threads (default: all cores)");
  cmd->add_option("--nice", o->nice, "Run at this nice level (0-19)")->check(CLI::Range(0, 19));
  cmd->add_flag(
      "--save-init", o->request.save_init,
      "Write the initial weights and every step's batches into the run folder (for reference trainers)");

  cmd->add_flag("--mask-prompt", o->mask_prompt, "Loss on assistant turns / completions only (the default)");
  cmd->add_flag("--no-mask-prompt", o->no_mask_prompt, "Loss on every token, prompts included");
  cmd->add_option("--max-seq-length", c.max_seq_length, "Longer examples are truncated")
      ->capture_default_str();

  cmd->add_option("--rank", c.rank, "LoRA rank")->capture_default_str();
  cmd->add_option("--scale", c.scale, "LoRA scale (alpha / rank)")->capture_default_str();
  cmd->add_option("--alpha", o->alpha, "LoRA alpha (instead of --scale: scale = alpha / rank)");
  cmd->add_option("--dropout", c.dropout, "LoRA dropout")->capture_default_str();
  cmd->add_option("--num-layers", c.num_layers,
                  "Train the last N layers (all when the model has fewer; -1: all)")
      ->capture_default_str();
  cmd->add_option("--targets", o->targets,
                  "Projections to adapt: all, attn, mlp, or a list of q,k,v,o,gate,up,down (default: all)");

  cmd->add_option("--learning-rate,--lr", c.learning_rate, "Peak learning rate")->capture_default_str();
  cmd->add_option("--lr-schedule", c.lr_schedule, "constant or cosine (decays to --min-lr)")
      ->capture_default_str();
  cmd->add_option("--warmup", c.warmup_steps, "Linear warmup steps")->capture_default_str();
  cmd->add_option("--min-lr", c.min_lr, "Final learning rate of the cosine schedule")->capture_default_str();
  cmd->add_option("--beta1", c.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--adam-eps", c.adam_eps, "AdamW epsilon")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--grad-clip", c.grad_clip, "Clip the gradient's global norm to this (0: off)")
      ->capture_default_str();

  cmd->add_option("--batch-size", c.batch_size, "Examples per micro-batch")->capture_default_str();
  cmd->add_option("--grad-accumulation", c.grad_accumulation, "Micro-batches per optimizer step")
      ->capture_default_str();
  cmd->add_option("--iters", c.iters, "Optimizer steps")->capture_default_str();
  cmd->add_option("--epochs", c.epochs, "Train for this many passes over the data instead of --iters")
      ->capture_default_str();
  cmd->add_option("--val-every,--steps-per-eval", c.val_every, "Validate every N steps")
      ->capture_default_str();
  cmd->add_option("--val-batches", c.val_batches, "Validation batches (-1: the whole set)")
      ->capture_default_str();
  cmd->add_option("--save-every", c.save_every, "Checkpoint every N steps (0: only at the end)")
      ->capture_default_str();
  cmd->add_option("--seed", c.seed, "Random seed (init, data order, dropout)")->capture_default_str();
  cmd->add_flag("--grad-checkpoint", c.grad_checkpoint,
                "Recompute each layer in the backward pass (less memory)");
  cmd->callback([cmd, o] { run_train(cmd, *o); });
}

}  // namespace graft::cli

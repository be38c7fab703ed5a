#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "adapters/base_model.h"
#include "adapters/store.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/batches.h"
#include "train/lora_params.h"
#include "train/publish.h"
#include "train/reference_dump.h"
#include "train/run_folder.h"
#include "train/train_graph.h"
#include "train/train_ops.h"

namespace graft {

struct Trainer::State {
  TrainConfig config;
  fs::path store;
  RunFolder run{""};
  int threads = 1;
  bool save_init = false;
  std::unique_ptr<Model> model;
  BaseModel base;
  Dataset train, valid, test;
  bool has_valid = false, has_test = false;
  std::unique_ptr<LoraParams> params;
  std::unique_ptr<BatchPlan> plan;
  int total_steps = 0;
  CheckpointState resumed;  // step 0 for a fresh run
  nlohmann::json data_json;
};

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A test hook (GRAFT_TRAIN_HOLD_AT_STEP=N): a fresh run that reaches step N
// waits there until it is asked to stop, so that a test can pause a job
// mid-run however fast this machine trains. A run resumed from a checkpoint
// never holds: one paused before step N would otherwise wait at N again with
// nothing to stop it. 0 (unset) holds nowhere.
int hold_at_step() {
  const char* v = std::getenv("GRAFT_TRAIN_HOLD_AT_STEP");
  return v ? std::atoi(v) : 0;
}

std::string default_adapter_id(const std::string& model_path) {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  std::string stem = fs::path(model_path).stem().string();
  std::string id;
  for (char c : stem)
    id += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '-';
  while (!id.empty() && !std::isalnum(static_cast<unsigned char>(id.front()))) id.erase(id.begin());
  if (id.size() > 96) id.resize(96);
  return (id.empty() ? std::string("adapter") : id) + "-lora-" + stamp;
}

// Loads the base so that graft's backward can read every weight: repacked
// Q4_0 is read as it is; weights repacked into layouts frozen_dx does not
// read make it load again without repacking.
Result<std::unique_ptr<Model>> load_base(const std::string& path) {
  for (bool repack : {true, false}) {
    ModelLoadOptions options;
    options.repack = repack;
    GRAFT_TRY(std::unique_ptr<Model> model, Model::load(path, options));
    if (model->config().has_recurrent_layers()) {
      return errorf("unsupported_model",
                    "{}: graft cannot train models with linear-attention (recurrent) layers such as {}", path,
                    model->config().arch);
    }
    if (model->config().arch == "gemma3" || model->config().arch == "gemma4") {
      return errorf("unsupported_model",
                    "{}: graft cannot train {} models yet (its GELU-gated MLP has no backward pass)", path,
                    model->config().arch);
    }
    const ModelWeights& w = model->weights();
    const ggml_tensor* bad = frozen_dx_supported(w.output) ? nullptr : w.output;
    for (const LayerWeights& l : w.layers) {
      for (const ggml_tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) {
        if (!bad && !frozen_dx_supported(t)) bad = t;
      }
    }
    if (!bad) return model;
    if (!repack) {
      return errorf("unsupported_model", "{}: graft cannot train on weights of type {} ('{}')", path,
                    ggml_type_name(bad->type), ggml_get_name(bad));
    }
  }
  return errorf("unsupported_model", "{}: cannot load for training", path);
}

nlohmann::json stats_json(const DatasetStats& s) {
  return {{"file", fs::path(s.path).filename().string()},
          {"path", s.path},
          {"sha256", s.sha256},
          {"examples", s.lines},
          {"used", s.lines - s.dropped},
          {"chat", s.chat},
          {"completion", s.completion},
          {"text", s.text},
          {"truncated", s.truncated},
          {"dropped", s.dropped},
          {"tokens", s.tokens},
          {"targets", s.targets}};
}

Result<std::shared_ptr<const ChatTemplate>> chat_template_of(const Model& model) {
  auto source = model.gguf().find_string("tokenizer.chat_template");
  if (source) {
    auto parsed = ChatTemplate::parse(*source);
    if (parsed) return std::make_shared<const ChatTemplate>(std::move(*parsed));
  }
  GRAFT_TRY(ChatTemplate chatml, ChatTemplate::parse(kChatMlTemplate));
  return std::make_shared<const ChatTemplate>(std::move(chatml));
}

}  // namespace

Trainer::Trainer(std::unique_ptr<State> state) : s_(std::move(state)) {}
Trainer::~Trainer() = default;
const fs::path& Trainer::run_dir() const {
  return s_->run.path();
}
const TrainConfig& Trainer::config() const {
  return s_->config;
}

Result<std::unique_ptr<Trainer>> Trainer::prepare(const TrainRequest& request, DataLocation* where) {
  auto s = std::make_unique<State>();
  nlohmann::json saved;
  if (!request.resume.empty()) {
    s->run = RunFolder(fs::absolute(request.resume).lexically_normal());
    GRAFT_TRY(saved, s->run.read_config());
    if (!saved.contains("train") || !saved.contains("store")) {
      return errorf("invalid_checkpoint", "{}: config.json is not a graft training run's",
                    request.resume.string());
    }
    GRAFT_TRY(s->config, train_config_from_json(saved["train"]));
    s->store = saved["store"].get<std::string>();
  } else {
    s->config = request.config;
    s->store =
        fs::absolute(request.store.empty() ? AdapterStore::user_store() : request.store).lexically_normal();
    // The run folder records absolute paths, so --resume works from anywhere.
    auto absolute = [](const std::string& p) { return fs::absolute(p).lexically_normal().string(); };
    s->config.model = absolute(s->config.model);
    s->config.data = absolute(s->config.data);
    if (!s->config.valid.empty()) s->config.valid = absolute(s->config.valid);
  }
  TrainConfig& c = s->config;
  s->threads = request.threads > 0 ? request.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  s->save_init = request.save_init;

  GRAFT_TRY(s->model, load_base(c.model));
  const ModelConfig& mc = s->model->config();
  GRAFT_TRY_STATUS(c.validate(mc));
  GRAFT_TRY(s->base, BaseModel::from_gguf(s->model->gguf()));
  if (c.adapter_id.empty()) c.adapter_id = default_adapter_id(c.model);
  GRAFT_TRY_STATUS(validate_adapter_id(c.adapter_id));
  std::error_code ec;
  if (fs::exists(s->store / c.adapter_id, ec)) {
    return errorf("already_exists", "an adapter '{}' is already in the store {}: choose another --id",
                  c.adapter_id, s->store.string());
  }

  GRAFT_TRY(std::shared_ptr<const Tokenizer> tokenizer, Tokenizer::from_gguf(s->model->gguf()));
  GRAFT_TRY(auto chat_template, chat_template_of(*s->model));
  EncodeOptions encode;
  encode.max_seq_length = c.seq_limit(mc);
  encode.mask_prompt = c.mask_prompt.value_or(true);
  const ExampleEncoder encoder(tokenizer, chat_template, encode);
  GRAFT_TRY(
      DataFiles files,
      resolve_data_files(c.data, c.valid.empty() ? std::nullopt : std::optional<fs::path>(c.valid), where));
  GRAFT_TRY(s->train, encoder.load(files.train, where));
  if (files.valid) {
    GRAFT_TRY(s->valid, encoder.load(*files.valid, where));
    s->has_valid = true;
  }
  if (files.test) {
    GRAFT_TRY(s->test, encoder.load(*files.test, where));
    s->has_test = true;
  }
  *where = DataLocation{};
  s->data_json = {{"train", stats_json(s->train.stats)}};
  if (s->has_valid) s->data_json["valid"] = stats_json(s->valid.stats);
  if (s->has_test) s->data_json["test"] = stats_json(s->test.stats);
  if (!request.resume.empty() && saved.contains("data")) {
    const nlohmann::json& before = saved["data"];
    for (const char* part : {"train", "valid", "test"}) {
      const bool had = before.contains(part), has = s->data_json.contains(part);
      if (had != has || (had && before[part]["sha256"] != s->data_json[part]["sha256"])) {
        return errorf("invalid_checkpoint",
                      "the {} data changed since the run began: resume needs the same files", part);
      }
    }
  }

  s->plan = std::make_unique<BatchPlan>(s->train.examples, c.batch_size, c.seed);
  const int per_epoch = s->plan->batches_per_epoch();
  s->total_steps =
      c.epochs > 0 ? (c.epochs * per_epoch + c.grad_accumulation - 1) / c.grad_accumulation : c.iters;

  GRAFT_TRY(s->params, LoraParams::create(mc, c.rank, c.layers(mc), c.target_list()));
  s->params->init(c.seed);
  if (!request.resume.empty()) {
    GRAFT_TRY(auto state, s->run.load_latest(*s->params));
    if (state) s->resumed = *state;
  } else {
    const fs::path dir =
        fs::absolute(request.run_dir.empty() ? RunFolder::default_path(c.adapter_id) : request.run_dir)
            .lexically_normal();
    GRAFT_TRY(s->run, RunFolder::create(dir));
    nlohmann::json config = {{"train", to_json(c)}, {"store", s->store.string()}, {"data", s->data_json}};
    GRAFT_TRY_STATUS(s->run.write_config(config));
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(s)));
}

Status Trainer::run(TrainEvents& events, const std::atomic<bool>& stop) {
  State& s = *s_;
  const TrainConfig& c = s.config;
  TrainGraphOptions options;
  options.lora_scale = c.scale;
  options.dropout = c.dropout;
  options.grad_checkpoint = c.grad_checkpoint;
  options.n_threads = s.threads;
  TrainGraph graph(*s.model, *s.params, options);
  const std::vector<TrainExample>& examples = s.train.examples;

  auto evaluate = [&](const Dataset& data) -> Result<double> {
    const BatchPlan plan(data.examples, c.batch_size, 0);
    double sum = 0.0;
    int64_t n = 0;
    for (const std::vector<int>& ids : plan.in_order(c.val_batches)) {
      GRAFT_TRY(BatchLosses losses, graph.evaluate(make_micro_batch(data.examples, ids, 1.0f)));
      for (double l : losses.loss) sum += l;
      n += int64_t(losses.loss.size());
    }
    return n > 0 ? sum / double(n) : 0.0;
  };
  auto micro_batch_ids = [&](int step, int j) {
    return s.plan->batch(int64_t(step - 1) * c.grad_accumulation + j);
  };

  CheckpointState state = s.resumed;
  state.total_steps = s.total_steps;
  events.event({{"type", "start"},
                {"total_steps", s.total_steps},
                {"train_examples", int64_t(examples.size())},
                {"valid_examples", s.has_valid ? int64_t(s.valid.examples.size()) : 0},
                {"truncated", s.train.stats.truncated + s.valid.stats.truncated},
                {"train_tokens", s.train.stats.tokens},
                {"resumed_from", state.step},
                {"job_dir", s.run.path().string()}});
  if (state.step == 0 && s.save_init)
    GRAFT_TRY_STATUS(write_init(s.run, *s.params, examples, *s.plan, c, s.total_steps));
  if (state.step == 0 && s.has_valid) {
    GRAFT_TRY(double val, evaluate(s.valid));
    state.val_loss = val;
    events.event({{"type", "val"}, {"step", 0}, {"val_loss", val}});
  }

  const double session_start = now_seconds();
  const double wall_before = state.wall_s;
  int64_t session_tokens = 0;
  int session_steps = 0;
  auto checkpoint = [&]() -> Status {
    state.wall_s = wall_before + (now_seconds() - session_start);
    GRAFT_TRY(fs::path dir, s.run.save_checkpoint(*s.params, state));
    events.event({{"type", "checkpoint"}, {"step", state.step}, {"path", dir.string()}});
    return {};
  };

  const int hold_step = s.resumed.step == 0 ? hold_at_step() : 0;
  while (state.step < s.total_steps) {
    const int step = state.step + 1;
    int64_t targets = 0;
    for (int j = 0; j < c.grad_accumulation; ++j)
      targets += count_targets(examples, micro_batch_ids(step, j));
    const float weight = targets > 0 ? float(1.0 / double(targets)) : 0.0f;
    double loss_sum = 0.0;
    int64_t step_tokens = 0;
    for (int j = 0; j < c.grad_accumulation; ++j) {
      const MicroBatch batch = make_micro_batch(examples, micro_batch_ids(step, j), weight);
      const uint64_t key = c.seed * 0x100000001b3ULL + uint64_t(step) * 1024 + uint64_t(j);
      GRAFT_TRY(BatchLosses losses, graph.accumulate(batch, key));
      for (double l : losses.loss) loss_sum += l;
      step_tokens += batch.n_tokens;
    }
    if (c.grad_clip > 0.0) {
      // As PyTorch's clip_grad_norm_ scales.
      const double factor = c.grad_clip / (s.params->grad_norm() + 1e-6);
      if (factor < 1.0) s.params->scale_grads(float(factor));
    }
    const double lr = c.lr_at(step, s.total_steps);
    AdamWStep adam;
    adam.lr = float(lr);
    adam.beta1 = c.beta1;
    adam.beta2 = c.beta2;
    adam.eps = c.adam_eps;
    adam.weight_decay = c.weight_decay;
    adam.t = step;
    GRAFT_TRY_STATUS(graph.adamw(adam));
    s.params->zero_grads();

    state.step = step;
    state.tokens += step_tokens;
    state.train_loss = targets > 0 ? loss_sum / double(targets) : 0.0;
    session_tokens += step_tokens;
    ++session_steps;
    const double elapsed = now_seconds() - session_start;
    events.event({{"type", "step"},
                  {"step", step},
                  {"total_steps", s.total_steps},
                  {"train_loss", state.train_loss},
                  {"lr", lr},
                  {"tokens", state.tokens},
                  {"tokens_per_s", elapsed > 0 ? double(session_tokens) / elapsed : 0.0},
                  {"eta_s", elapsed / session_steps * (s.total_steps - step)}});
    if (s.has_valid && (step % c.val_every == 0 || step == s.total_steps)) {
      GRAFT_TRY(double val, evaluate(s.valid));
      state.val_loss = val;
      events.event({{"type", "val"}, {"step", step}, {"val_loss", val}});
    }
    while (step == hold_step && !stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const bool stopping = stop.load();
    if ((c.save_every > 0 && step % c.save_every == 0) || step == s.total_steps || stopping) {
      GRAFT_TRY_STATUS(checkpoint());
    }
    if (stopping && step < s.total_steps) {
      events.event({{"type", "stopped"}, {"step", step}});
      return {};
    }
  }

  std::optional<double> test_loss;
  if (s.has_test) {
    GRAFT_TRY(test_loss, evaluate(s.test));
  }
  state.wall_s = wall_before + (now_seconds() - session_start);
  PublishInfo info;
  info.id = c.adapter_id;
  info.store = s.store;
  info.config = to_json(c);
  info.data = s.data_json;
  info.train_loss = state.train_loss;
  info.val_loss = state.val_loss;
  info.test_loss = test_loss;
  info.tokens = state.tokens;
  info.steps = state.step;
  info.wall_s = state.wall_s;
  GRAFT_TRY(fs::path path, publish_adapter(*s.params, c.scale, s.base, info));
  nlohmann::json done = {{"type", "done"},
                         {"adapter_id", c.adapter_id},
                         {"adapter_path", path.string()},
                         {"train_loss", state.train_loss},
                         {"val_loss", nullptr},
                         {"tokens", state.tokens},
                         {"wall_s", state.wall_s}};
  if (state.val_loss) done["val_loss"] = *state.val_loss;
  if (test_loss) done["test_loss"] = *test_loss;
  events.event(done);
  return {};
}

}  // namespace graft

#include "server/routes_jobs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include "server/fine_tuning_request.h"
#include "server/routes_metrics.h"
#include "util/log.h"

namespace graft::server {

namespace {

json optional_json(const std::optional<int64_t>& x) {
  return x ? json(*x) : json(nullptr);
}

json hyperparameters_json(const JobSpec& spec) {
  return json{{"n_epochs", spec.n_epochs ? json(*spec.n_epochs) : json("auto")},
              {"batch_size", spec.batch_size ? json(*spec.batch_size) : json("auto")},
              {"learning_rate_multiplier",
               spec.learning_rate_multiplier ? json(*spec.learning_rate_multiplier) : json("auto")}};
}

json job_json(const JobRecord& j) {
  const json hyper = hyperparameters_json(j.spec);
  json error = nullptr;
  if (j.error) {
    error = {{"code", j.error->code},
             {"message", j.error->message},
             {"param", j.error->param.empty() ? json(nullptr) : json(j.error->param)}};
  }
  return json{
      {"object", "fine_tuning.job"},
      {"id", j.id},
      {"model", j.spec.model},
      {"created_at", j.created_at},
      {"finished_at", optional_json(j.finished_at)},
      {"fine_tuned_model", j.fine_tuned_model ? json(*j.fine_tuned_model) : json(nullptr)},
      {"organization_id", "graft"},
      {"result_files", json::array()},
      {"status", std::string(status_name(j.status))},
      {"training_file", j.spec.training_file},
      {"validation_file", j.spec.validation_file.empty() ? json(nullptr) : json(j.spec.validation_file)},
      {"hyperparameters", hyper},
      {"method", {{"type", "supervised"}, {"supervised", {{"hyperparameters", hyper}}}}},
      {"trained_tokens", j.trained_tokens},
      {"error", error},
      {"seed", j.spec.seed},
      {"estimated_finish", optional_json(j.estimated_finish)},
      {"integrations", json::array()},
      {"user_provided_suffix", j.spec.suffix.empty() ? json(nullptr) : json(j.spec.suffix)},
      {"metadata", j.spec.metadata},
      // graft's own
      {"adapter_id", j.adapter_id},
      {"lora", j.spec.lora},
      {"auto_load", j.spec.auto_load},
      {"progress",
       {{"step", j.last_step},
        {"total_steps", j.total_steps},
        {"checkpoint_step", j.checkpoint_step},
        {"train_loss", j.train_loss ? json(*j.train_loss) : json(nullptr)},
        {"valid_loss", j.valid_loss ? json(*j.valid_loss) : json(nullptr)}}}};
}

std::string event_id(int64_t seq) {
  return fmt::format("ftevent-{}", seq);
}

json event_json(const JobEvent& e) {
  return json{{"object", "fine_tuning.job.event"},
              {"id", event_id(e.seq)},
              {"created_at", e.created_at},
              {"level", e.level},
              {"message", e.message},
              {"type", e.type},
              {"data", e.data.is_null() ? json::object() : e.data}};
}

json checkpoint_json(const CheckpointRecord& c, const JobRecord& job) {
  return json{{"object", "fine_tuning.job.checkpoint"},
              {"id", fmt::format("ftckpt-{}", c.seq)},
              {"created_at", c.created_at},
              {"fine_tuned_model_checkpoint", fmt::format("{}:ckpt-step-{}", job.adapter_id, c.step)},
              {"step_number", c.step},
              {"metrics", c.metrics},
              {"fine_tuning_job_id", job.id},
              {"path", c.path}};
}

// "ftevent-12" or "12" → 12.
std::optional<int64_t> parse_event_id(std::string text) {
  if (text.rfind("ftevent-", 0) == 0) text = text.substr(8);
  try {
    size_t used = 0;
    const int64_t seq = std::stoll(text, &used);
    if (used == text.size() && seq >= 0) return seq;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

json list_json(json data, bool has_more) {
  return json{{"object", "list"}, {"data", std::move(data)}, {"has_more", has_more}};
}

}  // namespace

TrainingService::TrainingService(ServedModel& model, TrainingOptions options, AdapterService* adapters)
    : model_(model),
      options_(std::move(options)),
      adapters_(adapters),
      worker_(std::make_unique<Worker>("job route")),
      inspect_worker_(std::make_unique<Worker>("dataset inspection")) {}

Result<std::unique_ptr<TrainingService>> TrainingService::create(ServedModel& model, TrainingOptions options,
                                                                 AdapterService* adapters) {
  if (options.data_dir.empty()) options.data_dir = data_dir();
  if (options.adapter_store.empty()) options.adapter_store = AdapterStore::user_store();
  std::unique_ptr<TrainingService> service(new TrainingService(model, std::move(options), adapters));
  TrainingOptions& o = service->options_;
  if (!model.has_model() || service->options_.model_path.empty()) {
    service->unavailable_ = "training needs a served model file";
    return service;
  }
  std::error_code ec;
  fs::create_directories(o.data_dir, ec);
  if (ec)
    return errorf("io_error", "cannot create graft's data folder {}: {}", o.data_dir.string(), ec.message());

  // One server runs a data folder's jobs; the lock goes with the process, however it ends.
  const fs::path lock_path = o.data_dir / "jobs.lock";
  service->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (service->lock_fd_ < 0)
    return errorf("io_error", "cannot open {}: {}", lock_path.string(), std::strerror(errno));
  if (::flock(service->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    auto text = read_file(lock_path);
    std::string holder = text ? *text : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    service->unavailable_ = fmt::format(
        "another graft serve ({}) runs the training jobs of {}; stop it, or give this server another data "
        "folder (XDG_DATA_HOME)",
        holder.empty() ? "another process" : "pid " + holder, o.data_dir.string());
    GRAFT_LOG_WARN("{}", service->unavailable_);
    return service;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(service->lock_fd_, 0) != 0 || ::pwrite(service->lock_fd_, pid.data(), pid.size(), 0) < 0) {
    GRAFT_LOG_WARN("cannot write {}: {}", lock_path.string(), std::strerror(errno));
  }

  GRAFT_TRY(service->store_, JobStore::open(o.data_dir / "jobs.sqlite"));
  service->files_ = std::make_unique<FileStore>(*service->store_, o.data_dir / "files");
  RunnerOptions runner;
  runner.trainer = o.trainer;
  runner.jobs_dir = o.data_dir / "jobs";
  runner.store_dir = o.adapter_store;
  runner.max_running = o.max_jobs;
  runner.priority = o.priority;
  runner.threads = o.threads;
  runner.max_retries = o.max_retries;
  runner.stop_grace = o.stop_grace;
  TrainingService* self = service.get();
  runner.on_succeeded = [self](const JobRecord& job) { self->auto_load(job); };
  runner.check_data = [self](const fs::path& path, DataLocation* where) -> Status {
    EncodeOptions encode;
    encode.max_seq_length = TrainConfig{}.seq_limit(self->model_.model().config());
    auto dataset = self->read_dataset(path, encode, where);
    if (!dataset) return dataset.error();
    return {};
  };
  GRAFT_TRY(service->runner_, JobRunner::start(*service->store_, std::move(runner)));
  return service;
}

TrainingService::~TrainingService() {
  if (store_) store_->unsubscribe_all();
  runner_.reset();  // running jobs pause (and resume at the next start)
  if (store_) store_->unsubscribe_all();
  inspect_worker_.reset();
  worker_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<Dataset> TrainingService::read_dataset(const fs::path& path, const EncodeOptions& options,
                                              DataLocation* where) const {
  // The served model's template is the trainer's: the model's own, else ChatML.
  std::shared_ptr<const ChatTemplate> chat_template(std::shared_ptr<const ChatTemplate>(),
                                                    &model_.chat_template());
  const ExampleEncoder encoder(model_.tokenizer(), chat_template, options);
  return encoder.load(path, where);
}

void TrainingService::auto_load(const JobRecord& job) {
  if (!job.spec.auto_load || !adapters_ || !job.fine_tuned_model) return;
  const std::string id = *job.fine_tuned_model;
  JobStore* store = store_.get();
  adapters_->load_in_background(id, [store, job_id = job.id, id](const Status& status) {
    JobEvent e;
    e.level = status ? "info" : "warn";
    e.message = status ? fmt::format("Adapter {} is loaded in the server", id)
                       : fmt::format("Adapter {} could not be loaded: {}", id, status.error().message);
    auto added = store->update_job(job_id, [&](JobRecord&, JobChanges& changes) -> Status {
      changes.events.push_back(e);
      return {};
    });
    if (!added) GRAFT_LOG_ERROR("job {}: {}", job_id, added.error().message);
  });
}

void TrainingService::install(Server& server) {
  Router& router = server.router();
  if (!unavailable_.empty()) {
    const std::string why = unavailable_;
    auto refuse = [why](HttpRequest&, std::shared_ptr<Exchange> exchange) {
      exchange->send_error(api_error(ApiCode::kUnavailable, why));
    };
    for (const char* route : {"/v1/files", "/v1/files/{id}", "/v1/files/inspect", "/v1/files/{id}/content",
                              "/v1/fine_tuning/jobs", "/v1/fine_tuning/jobs/{id}",
                              "/v1/fine_tuning/jobs/{id}/events", "/v1/fine_tuning/jobs/{id}/checkpoints"}) {
      router.add("GET", route, refuse);
      router.add("POST", route, refuse);
      router.add("DELETE", route, refuse);
    }
    for (const char* action : {"cancel", "pause", "resume"}) {
      router.add("POST", fmt::format("/v1/fine_tuning/jobs/{{id}}/{}", action), refuse);
    }
    return;
  }
  add_file_routes(router);
  add_job_routes(router);
  server.add_metrics_hook([this](PromText& metrics) {
    std::map<std::string, int64_t> by_state;
    for (JobStatus status :
         {JobStatus::validating_files, JobStatus::queued, JobStatus::running, JobStatus::paused,
          JobStatus::succeeded, JobStatus::failed, JobStatus::cancelled}) {
      by_state[std::string(status_name(status))] =
          static_cast<int64_t>(store_->jobs_with_status(status).size());
    }
    write_training_jobs(metrics, by_state);
  });
}

void TrainingService::create_job(HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  auto body = std::make_shared<RequestJson>();
  if (auto error = parse_body(http.body, *body)) return exchange->send_error(*error);
  worker_->post(exchange, [this, exchange, body] {
    FineTuningContext context;
    context.served_model = model_.id();
    context.model_path = options_.model_path;
    context.model_config = &model_.model().config();
    context.find_file = [this](const std::string& id) { return store_->file(id); };
    context.adapter_exists = [this](const std::string& id) {
      // Anything by that name where the adapter would land, or an adapter the server knows.
      std::error_code ec;
      const fs::path& store = options_.adapter_store;
      if (fs::exists(store / id, ec) || fs::exists(store / (id + ".gguf"), ec)) return true;
      return adapters_ && adapters_->store().find(id).ok();
    };
    JobSpec spec;
    if (auto error = read_fine_tuning_request(*body, context, spec)) return exchange->send_error(*error);
    std::string adapter_id = spec.suffix;
    auto created = runner_->create(std::move(spec), adapter_id);
    if (!created) return exchange->send_error(api_error(created.error(), "suffix"));
    GRAFT_LOG_INFO("job {}: created, training adapter {}", created->id, created->adapter_id);
    exchange->send_json(200, job_json(*created));
  });
}

void TrainingService::add_job_routes(Router& router) {
  TrainingService* self = this;
  router.add("POST", "/v1/fine_tuning/jobs", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->create_job(http, exchange);
  });

  router.add("GET", "/v1/fine_tuning/jobs", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    const auto query = parse_query(http.query);
    if (auto error = check_query_names(query, {"after", "limit", "metadata"}))
      return exchange->send_error(*error);
    int limit = 0;
    if (auto error = read_query_limit(query, 100, 20, limit)) return exchange->send_error(*error);
    if (query.count("metadata")) {
      return exchange->send_error(bad_request("graft does not filter jobs by metadata", "metadata"));
    }
    const std::string after = query.count("after") ? query.at("after") : "";
    self->worker_->post(exchange, [self, exchange, limit, after] {
      auto page = self->store_->list_jobs(after, limit);
      if (!page) return exchange->send_error(api_error(page.error(), "after"));
      json data = json::array();
      for (const JobRecord& j : page->items) data.push_back(job_json(j));
      exchange->send_json(200, list_json(std::move(data), page->has_more));
    });
  });

  router.add("GET", "/v1/fine_tuning/jobs/{id}",
             [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
               self->worker_->post(exchange, [self, exchange, id = http.params["id"]] {
                 auto job = self->store_->job(id);
                 if (!job) return exchange->send_error(api_error(job.error(), "fine_tuning_job_id"));
                 exchange->send_json(200, job_json(*job));
               });
             });

  using Action = Result<JobRecord> (JobRunner::*)(const std::string&);
  for (auto [name, action] : {std::pair<const char*, Action>{"cancel", &JobRunner::cancel},
                              std::pair<const char*, Action>{"pause", &JobRunner::pause},
                              std::pair<const char*, Action>{"resume", &JobRunner::resume}}) {
    router.add("POST", fmt::format("/v1/fine_tuning/jobs/{{id}}/{}", name),
               [self, action](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
                 self->worker_->post(exchange, [self, exchange, action, id = http.params["id"]] {
                   auto job = ((*self->runner_).*action)(id);
                   if (!job) return exchange->send_error(api_error(job.error(), "fine_tuning_job_id"));
                   exchange->send_json(200, job_json(*job));
                 });
               });
  }

  router.add(
      "GET", "/v1/fine_tuning/jobs/{id}/events",
      [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
        const auto query = parse_query(http.query);
        if (auto error = check_query_names(query, {"after", "limit", "stream"}))
          return exchange->send_error(*error);
        const std::string stream = query.count("stream") ? query.at("stream") : "false";
        if (stream != "true" && stream != "false") {
          return exchange->send_error(bad_request("'stream' must be true or false", "stream"));
        }
        if (stream == "true") return self->stream_events(http, exchange);
        int limit = 0;
        if (auto error = read_query_limit(query, 10000, 20, limit)) return exchange->send_error(*error);
        std::optional<int64_t> after;
        if (query.count("after")) {
          after = parse_event_id(query.at("after"));
          if (!after)
            return exchange->send_error(bad_request("'after' must be an event id (ftevent-N)", "after"));
        }
        self->worker_->post(exchange, [self, exchange, id = http.params["id"], after, limit] {
          auto page = self->store_->list_events(id, after, limit);
          if (!page) return exchange->send_error(api_error(page.error(), "fine_tuning_job_id"));
          json data = json::array();
          for (const JobEvent& e : page->items) data.push_back(event_json(e));
          exchange->send_json(200, list_json(std::move(data), page->has_more));
        });
      });

  router.add(
      "GET", "/v1/fine_tuning/jobs/{id}/checkpoints",
      [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
        const auto query = parse_query(http.query);
        if (auto error = check_query_names(query, {"after", "limit"})) return exchange->send_error(*error);
        int limit = 0;
        if (auto error = read_query_limit(query, 100, 10, limit)) return exchange->send_error(*error);
        std::optional<int64_t> after;
        if (query.count("after")) {
          std::string text = query.at("after");
          if (text.rfind("ftckpt-", 0) == 0) text = text.substr(7);
          after = parse_event_id(text);
          if (!after)
            return exchange->send_error(bad_request("'after' must be a checkpoint id (ftckpt-N)", "after"));
        }
        self->worker_->post(exchange, [self, exchange, id = http.params["id"], after, limit] {
          auto job = self->store_->job(id);
          if (!job) return exchange->send_error(api_error(job.error(), "fine_tuning_job_id"));
          auto page = self->store_->list_checkpoints(id, after, limit);
          if (!page) return exchange->send_error(api_error(page.error(), "after"));
          json data = json::array();
          for (const CheckpointRecord& c : page->items) data.push_back(checkpoint_json(c, *job));
          json body = list_json(data, page->has_more);
          body["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
          body["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
          exchange->send_json(200, body);
        });
      });
}

// A live stream of one job's events: what the store holds after the client's
// last id, then each new one as it is committed, until the job is over.
class TrainingService::EventStream : public std::enable_shared_from_this<EventStream> {
 public:
  EventStream(TrainingService& service, std::shared_ptr<Exchange> exchange, std::string job_id, int64_t after)
      : service_(service), exchange_(std::move(exchange)), job_id_(std::move(job_id)), last_(after) {}

  void start() {
    auto self = shared_from_this();
    token_ = service_.store_->subscribe(job_id_, [self] { self->schedule(); });
    exchange_->on_disconnect([self] { self->close(); });
    schedule();
  }

 private:
  // Reads on the route worker, one pass at a time.
  void schedule() {
    {
      std::lock_guard lock(mutex_);
      if (closed_ || scheduled_) return;
      scheduled_ = true;
    }
    service_.worker_->post([self = shared_from_this()] { self->pump(); });
  }

  void pump() {
    {
      std::lock_guard lock(mutex_);
      scheduled_ = false;
      if (closed_) return;
    }
    for (;;) {
      auto batch = service_.store_->events_since(job_id_, last_, 500);
      if (!batch) {
        exchange_->send_event(dump_json(api_error(batch.error()).to_json()));
        return finish();
      }
      for (const JobEvent& e : batch->events) {
        exchange_->send_event_with_id(event_id(e.seq), dump_json(event_json(e)));
        last_ = e.seq;
      }
      if (batch->more) continue;
      if (is_final(batch->status)) return finish();
      return;
    }
  }

  void finish() {
    exchange_->end_events();
    close();
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
    }
    service_.store_->unsubscribe(token_);
  }

  TrainingService& service_;
  std::shared_ptr<Exchange> exchange_;
  std::string job_id_;
  int64_t last_;  // the last event sent (only pump, on the worker, touches it)
  int64_t token_ = 0;
  std::mutex mutex_;
  bool closed_ = false;
  bool scheduled_ = false;
};

void TrainingService::stream_events(HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  int64_t after = 0;
  const std::string last = http.header("last-event-id");
  if (!last.empty()) {
    auto seq = parse_event_id(last);
    if (!seq)
      return exchange->send_error(
          bad_request("Last-Event-ID must be an event id (ftevent-N)", "Last-Event-ID"));
    after = *seq;
  }
  worker_->post(exchange, [this, exchange, id = http.params["id"], after] {
    auto job = store_->job(id);
    if (!job) return exchange->send_error(api_error(job.error(), "fine_tuning_job_id"));
    exchange->start_events();
    std::make_shared<EventStream>(*this, exchange, id, after)->start();
  });
}

}  // namespace graft::server

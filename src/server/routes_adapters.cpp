#include "server/routes_adapters.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "adapters/load.h"
#include "adapters/targets.h"
#include "util/log.h"

namespace graft::server {

namespace {

// graft's error codes (util/result.h) as HTTP statuses.
int http_status(const std::string& code) {
  if (code == "not_found") return 404;
  if (code == "forbidden") return 403;
  if (code == "in_use" || code == "conflict") return 409;
  if (code == "invalid_argument" || code == "invalid_adapter" || code == "incompatible_adapter") return 400;
  return 500;
}

ApiError api_error(const Error& error, std::string param = {}) {
  ApiError e;
  e.status = http_status(error.code);
  e.message = error.message;
  e.param = std::move(param);
  e.code = error.code;
  if (e.status == 404) e.type = "not_found_error";
  if (e.status == 403) e.type = "permission_error";
  if (e.status == 409) e.type = "conflict_error";
  if (e.status >= 500) e.type = "server_error";
  return e;
}

json loaded_json(const LoadedAdapter& a, const AdapterSelection& default_selection) {
  bool is_default = false;
  for (const AdapterChoice& c : default_selection.stack) is_default = is_default || c.id == a.id;
  return json{{"id", a.id},
              {"object", "adapter"},
              {"path", a.path.string()},
              {"format", std::string(format_name(a.format))},
              {"rank", a.rank},
              {"alpha", a.alpha},
              {"scale", a.scale},
              {"size_bytes", a.size_bytes},
              {"layers", a.layers},
              {"targets", a.targets},
              {"in_use", a.users},
              {"default", is_default},
              {"load_ms", a.read_ms + a.mount_ms}};
}

json available_json(const AvailableAdapter& a, const Compatibility& c, bool loaded) {
  json j = {{"id", a.id}, {"object", "adapter"}, {"path", a.path.string()}};
  json base = nullptr;
  if (a.metadata && !a.metadata->base_repo.empty()) base = a.metadata->base_repo;
  if (base.is_null() && a.description && !a.description->base_model.empty()) base = a.description->base_model;
  j["base"] = base;
  j["stamped"] = a.metadata.has_value();
  if (a.description) {
    j["format"] = std::string(format_name(a.description->format));
    j["rank"] = a.description->scaling.rank;
    j["scale"] = a.description->scaling.scale();
    json targets = json::array();
    for (LoraTarget t : a.description->targets()) targets.push_back(std::string(peft_target_name(t)));
    j["targets"] = targets;
    j["size_bytes"] = a.description->size_bytes;
  } else {
    j["format"] = j["rank"] = j["scale"] = j["targets"] = j["size_bytes"] = nullptr;
  }
  j["compatible"] = c.compatible;
  if (!c.compatible) j["reason"] = c.reason;
  j["loaded"] = loaded;
  j["created"] = a.metadata && !a.metadata->created.empty() ? json(a.metadata->created) : json(nullptr);
  j["task"] = a.metadata && !a.metadata->task.empty() ? json(a.metadata->task) : json(nullptr);
  j["dataset"] = a.metadata && !a.metadata->dataset.empty() ? json(a.metadata->dataset) : json(nullptr);
  // The final losses graft train records in graft_adapter.json ("training").
  j["train_loss"] = j["valid_loss"] = nullptr;
  if (a.metadata && a.metadata->extra.contains("training") && a.metadata->extra["training"].is_object()) {
    const json& training = a.metadata->extra["training"];
    if (training.contains("train_loss") && training["train_loss"].is_number()) {
      j["train_loss"] = training["train_loss"];
    }
    if (training.contains("val_loss") && training["val_loss"].is_number()) {
      j["valid_loss"] = training["val_loss"];
    }
  }
  return j;
}

}  // namespace

// One background thread for the slow work (reading adapter files, waiting for
// the engine thread), so the HTTP threads never wait on it.
struct AdapterService::Worker {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread thread;

  Worker() : thread([this] { run(); }) {}
  ~Worker() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    thread.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex);
      jobs.push_back(std::move(job));
    }
    wake.notify_one();
  }
  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (jobs.empty()) return;  // stopping, and every job done
      auto job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      try {
        job();
      } catch (const std::exception& e) {
        GRAFT_LOG_ERROR("adapter job failed: {}", e.what());
      }
      lock.lock();
    }
  }
};

struct AdapterService::Counters {
  std::mutex mutex;
  struct PerAdapter {
    uint64_t loads = 0, unloads = 0, requests = 0;
  };
  std::map<std::string, PerAdapter> by_id;
  template <typename F>
  void add(const std::string& id, F field) {
    std::lock_guard lock(mutex);
    field(by_id[id])++;
  }
};

AdapterService::AdapterService(ServedModel& model, AdapterServiceOptions options, BaseModel base)
    : model_(model),
      options_(std::move(options)),
      store_(AdapterStore::with_user_store({options_.adapter_dirs.begin(), options_.adapter_dirs.end()})),
      mounted_(std::make_unique<MountedAdapters>(std::move(base))),
      counters_(std::make_unique<Counters>()),
      worker_(std::make_unique<Worker>()) {}

AdapterService::~AdapterService() {
  worker_.reset();
}

Result<std::unique_ptr<AdapterService>> AdapterService::create(ServedModel& model,
                                                               AdapterServiceOptions options) {
  if (!model.has_model()) return make_error("invalid_argument", "adapters need a loaded model");
  GRAFT_TRY(BaseModel base, BaseModel::from_gguf(model.model().gguf()));
  std::unique_ptr<AdapterService> service(new AdapterService(model, std::move(options), std::move(base)));
  if (!service->options_.force.empty()) {
    auto forced = force_adapter(service->options_.force, service->store_, *service->mounted_,
                                [&](const LoraWeights& w) { return service->mount(w); });
    if (!forced) return errorf(forced.error().code, "--force-adapter: {}", forced.error().message);
    for (const AdapterChoice& c : forced->stack)
      service->counters_->add(
          c.id, [](auto& a) -> auto& { return a.loads; });
    GRAFT_LOG_INFO("every request uses adapter {} unless it asks otherwise", forced->to_string());
  }
  return service;
}

Result<int> AdapterService::mount(const LoraWeights& weights) {
  // Between two engine steps; this (worker) thread waits, the HTTP threads do not.
  auto done = std::make_shared<std::promise<Result<int>>>();
  auto result = done->get_future();
  Model* model = &model_.model();
  model_.engine().run_on_engine_thread(
      [done, model, &weights] { done->set_value(model->mount_lora(weights)); });
  return result.get();
}

Status AdapterService::unmount(int slot) {
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  Model* model = &model_.model();
  Engine* engine = &model_.engine();
  engine->run_on_engine_thread([done, model, engine, slot] {
    if (engine->adapter_slot_in_use(slot)) {
      done->set_value(errorf("in_use", "a request still uses it"));
      return;
    }
    // Cached prompt prefixes computed with it must not serve a later adapter in this slot.
    engine->drop_cached_prefixes([slot](const AdapterRoute& route) {
      for (int i = 0; i < route.n; ++i) {
        if (route.slot[i] == slot) return true;
      }
      return false;
    });
    done->set_value(model->unmount_lora(slot));
  });
  return result.get();
}

ApiError AdapterService::explain_selection_error(const std::string& spec, const Error& error) const {
  auto selection = parse_adapter_spec(spec);
  if (!selection) return bad_request(selection.error().message, "adapter", "invalid_adapter_spec");
  for (const AdapterChoice& c : selection->stack) {
    if (mounted_->find(c.id)) continue;
    auto found = store_.find(c.id);
    if (!found) {
      return bad_request(
          fmt::format("unknown adapter '{}': it is neither loaded nor in the adapter store", c.id), "adapter",
          "adapter_not_found");
    }
    const Compatibility compat = check_compatibility(*found, mounted_->base());
    if (!compat.compatible) {
      return bad_request(fmt::format("adapter '{}' does not fit the served model: {}", c.id, compat.reason),
                         "adapter", "adapter_incompatible");
    }
    return bad_request(
        fmt::format("adapter '{}' is not loaded; load it first with POST /v1/adapters {{\"id\": \"{}\"}}",
                    c.id, c.id),
        "adapter", "adapter_not_loaded");
  }
  return bad_request(error.message, "adapter", "adapter_not_loaded");
}

void AdapterService::install(Server& server) {
  Router& router = server.router();
  AdapterService* self = this;

  router.add("GET", "/v1/adapters", [self](HttpRequest&, std::shared_ptr<Exchange> exchange) {
    const AdapterSelection selection = self->mounted_->default_selection();
    json data = json::array();
    for (const LoadedAdapter& a : self->mounted_->list()) data.push_back(loaded_json(a, selection));
    exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"default", selection.to_string()}});
  });

  router.add("GET", "/v1/adapters/available", [self](HttpRequest&, std::shared_ptr<Exchange> exchange) {
    self->worker_->post([self, exchange] {
      struct Row {
        AvailableAdapter adapter;
        Compatibility compat;
      };
      std::vector<Row> rows;
      for (AvailableAdapter& a : self->store_.scan()) {
        Compatibility c = check_compatibility(a, self->mounted_->base());
        rows.push_back({std::move(a), std::move(c)});
      }
      std::stable_sort(rows.begin(), rows.end(),
                       [](const Row& x, const Row& y) { return x.compat.compatible > y.compat.compatible; });
      json data = json::array();
      for (const Row& r : rows) {
        data.push_back(available_json(r.adapter, r.compat, self->mounted_->find(r.adapter.id).has_value()));
      }
      json roots = json::array();
      for (const fs::path& root : self->store_.roots()) roots.push_back(root.string());
      exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"folders", roots}});
    });
  });

  router.add("POST", "/v1/adapters", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    RequestJson body;
    if (auto error = parse_body(http.body, body)) return exchange->send_error(*error);
    const auto id = body.find("id");
    const auto path = body.find("path");
    if (id != body.end() && !id->is_string())
      return exchange->send_error(bad_request("'id' must be a string", "id"));
    if (path != body.end() && !path->is_string()) {
      return exchange->send_error(bad_request("'path' must be a string", "path"));
    }
    if (id == body.end() && path == body.end()) {
      return exchange->send_error(
          bad_request("give the adapter's \"id\" (in the store) or its \"path\"", "id"));
    }
    const std::string id_text = id != body.end() ? id->get<std::string>() : "";
    const std::string path_text = path != body.end() ? path->get<std::string>() : "";
    self->worker_->post([self, exchange, id_text, path_text] {
      Result<AvailableAdapter> adapter = make_error("internal", "");
      if (!path_text.empty()) {
        auto inside = self->store_.confine(path_text);
        if (!inside) return exchange->send_error(api_error(inside.error(), "path"));
        adapter = inspect_adapter(*inside);
        if (adapter && !id_text.empty()) adapter->id = id_text;
      } else {
        adapter = self->store_.find(id_text);
      }
      const std::string param = path_text.empty() ? "id" : "path";
      if (!adapter) return exchange->send_error(api_error(adapter.error(), param));
      if (Status valid = validate_adapter_id(adapter->id); !valid) {
        return exchange->send_error(api_error(valid.error(), "id"));
      }
      auto loaded = self->mounted_->load(*adapter, [self](const LoraWeights& w) { return self->mount(w); });
      if (!loaded) return exchange->send_error(api_error(loaded.error(), param));
      self->counters_->add(
          loaded->id, [](auto& a) -> auto& { return a.loads; });
      exchange->send_json(200, loaded_json(*loaded, self->mounted_->default_selection()));
    });
  });

  router.add("DELETE", "/v1/adapters/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    const std::string id = http.params["id"];
    self->worker_->post([self, exchange, id] {
      Status status = self->mounted_->unload(id, [self](int slot) { return self->unmount(slot); });
      if (!status) return exchange->send_error(api_error(status.error(), "id"));
      self->counters_->add(
          id, [](auto& a) -> auto& { return a.unloads; });
      exchange->send_json(200, json{{"id", id}, {"object", "adapter"}, {"deleted", true}});
    });
  });

  server.add_request_hook(
      [self](const RequestJson& body, GenerationRequest& request) -> std::optional<ApiError> {
        std::optional<std::string> spec;
        const auto field = body.find("adapter");
        if (field != body.end() && !field->is_null()) {
          if (!field->is_string()) {
            return bad_request("'adapter' must be a string: an adapter id, \"a+b\", \"a@0.5+b\" or \"none\"",
                               "adapter", "invalid_type");
          }
          spec = field->get<std::string>();
        }
        auto lease = self->mounted_->select(spec ? std::optional<std::string_view>(*spec) : std::nullopt);
        if (!lease) return self->explain_selection_error(spec.value_or(""), lease.error());
        request.adapters = lease->route();
        for (const AdapterChoice& c : lease->selection().stack) {
          self->counters_->add(
              c.id, [](auto& a) -> auto& { return a.requests; });
        }
        if (!request.adapters.empty()) {
          request.keep_alive = std::make_shared<AdapterLease>(std::move(lease).value());
        }
        return std::nullopt;
      });

  server.add_health_hook([self](json& body) {
    body["adapter"] = self->mounted_->default_selection().to_string();
    body["adapters_loaded"] = self->mounted_->list().size();
  });
  server.add_metrics_hook([self](PromText& m) {
    m.gauge("graft_adapters_loaded", "Adapters mounted now.", double(self->mounted_->list().size()));
    std::lock_guard lock(self->counters_->mutex);
    for (const auto& [id, n] : self->counters_->by_id) {
      m.counter("graft_adapter_loads_total", "Adapter loads, by adapter.", double(n.loads),
                {{"adapter", id}});
      m.counter("graft_adapter_unloads_total", "Adapter unloads, by adapter.", double(n.unloads),
                {{"adapter", id}});
      m.counter("graft_adapter_requests_total", "Requests that selected the adapter, by adapter.",
                double(n.requests), {{"adapter", id}});
    }
  });
  server.add_stats_hook([self](json& body) {
    const AdapterSelection selection = self->mounted_->default_selection();
    json loaded = json::array();
    for (const LoadedAdapter& a : self->mounted_->list()) loaded.push_back(loaded_json(a, selection));
    body["adapters"] = json{{"default", selection.to_string()}, {"loaded", loaded}};
  });
}

}  // namespace graft::server

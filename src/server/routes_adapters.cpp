#include "server/routes_adapters.h"

#include <algorithm>
#include <future>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "adapters/load.h"
#include "adapters/targets.h"
#include "util/log.h"

namespace graft::server {

namespace {

json loaded_json(const LoadedAdapter& a, const AdapterSelection& default_selection, uint64_t requests) {
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
              {"requests", requests},
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

struct AdapterService::Counters {
  std::mutex mutex;
  struct PerAdapter {
    uint64_t loads = 0, unloads = 0, requests = 0;
  };
  std::map<std::string, PerAdapter> by_id;
  uint64_t base_requests = 0;  // requests that used no adapter ("none")
  template <typename F>
  void add(const std::string& id, F field) {
    std::lock_guard lock(mutex);
    field(by_id[id])++;
  }
  // One request's selection: each adapter of a stack counts it; none counts as the base model's.
  void count_request(const AdapterSelection& selection) {
    std::lock_guard lock(mutex);
    if (selection.none()) ++base_requests;
    for (const AdapterChoice& c : selection.stack) ++by_id[c.id].requests;
  }
  uint64_t requests(const std::string& id) {
    std::lock_guard lock(mutex);
    const auto it = by_id.find(id);
    return it == by_id.end() ? 0 : it->second.requests;
  }
};

AdapterService::AdapterService(ServedModel& model, AdapterServiceOptions options, BaseModel base)
    : model_(model),
      options_(std::move(options)),
      store_(AdapterStore::with_user_store({options_.adapter_dirs.begin(), options_.adapter_dirs.end()})),
      mounted_(std::make_unique<MountedAdapters>(std::move(base))),
      counters_(std::make_unique<Counters>()),
      worker_(std::make_unique<Worker>("adapter job")) {}

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
  Model* model = &model_.model();
  return model_.engine().run_on_engine_thread([model, &weights] { return model->mount_lora(weights); });
}

Status AdapterService::unmount(int slot) {
  Model* model = &model_.model();
  Engine* engine = &model_.engine();
  return engine->run_on_engine_thread([model, engine, slot]() -> Status {
    if (engine->adapter_slot_in_use(slot)) return errorf("in_use", "a request still uses it");
    // Cached prompt prefixes computed with it must not serve a later adapter in this slot.
    engine->drop_cached_prefixes([slot](const AdapterRoute& route) {
      for (int i = 0; i < route.n; ++i) {
        if (route.slot[i] == slot) return true;
      }
      return false;
    });
    return model->unmount_lora(slot);
  });
}

ApiError AdapterService::explain_selection_error(const std::string& spec, const Error& error) const {
  auto selection = parse_adapter_spec(spec);
  if (!selection) return bad_request(selection.error().message, "adapter", ApiCode::kInvalidAdapterSpec);
  for (const AdapterChoice& c : selection->stack) {
    if (mounted_->find(c.id)) continue;
    auto found = store_.find(c.id);
    if (!found) {
      return bad_request(
          fmt::format("unknown adapter '{}': it is neither loaded nor in the adapter store", c.id), "adapter",
          ApiCode::kAdapterNotFound);
    }
    if (!found->readable()) {
      return bad_request(fmt::format("adapter '{}' cannot be read: {}", c.id, found->problem), "adapter",
                         ApiCode::kAdapterCorrupt);
    }
    const Compatibility compat = check_compatibility(*found, mounted_->base());
    if (!compat.compatible) {
      return bad_request(fmt::format("adapter '{}' does not fit the served model: {}", c.id, compat.reason),
                         "adapter", ApiCode::kAdapterIncompatible);
    }
    return bad_request(
        fmt::format("adapter '{}' is not loaded; load it first with POST /v1/adapters {{\"id\": \"{}\"}}",
                    c.id, c.id),
        "adapter", ApiCode::kAdapterNotLoaded);
  }
  return bad_request(error.message, "adapter", ApiCode::kAdapterNotLoaded);
}

void AdapterService::load_in_background(std::string id, std::function<void(const Status&)> done) {
  worker_->post([this, id = std::move(id), done = std::move(done)] {
    Status status;
    if (auto adapter = store_.find(id); !adapter) {
      status = adapter.error();
    } else if (auto loaded = mounted_->load(*adapter, [this](const LoraWeights& w) { return mount(w); });
               !loaded) {
      status = loaded.error();
    }
    if (done) done(status);
  });
}

void AdapterService::install(Server& server) {
  Router& router = server.router();
  AdapterService* self = this;
  router.add("GET", "/v1/adapters",
             [self](HttpRequest&, std::shared_ptr<Exchange> exchange) { self->list_loaded(exchange); });
  router.add("GET", "/v1/adapters/available",
             [self](HttpRequest&, std::shared_ptr<Exchange> exchange) { self->list_available(exchange); });
  router.add("POST", "/v1/adapters",
             [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) { self->load(http, exchange); });
  router.add("DELETE", "/v1/adapters/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    const std::string id = http.params["id"];
    self->worker_->post(exchange, [self, exchange, id] { self->unload(id, *exchange); });
  });
  server.add_request_hook(
      [self](const RequestJson& body, GenerationRequest& request) { return self->select(body, request); },
      {"adapter"});
  server.add_health_hook([self](json& body) { self->report_health(body); });
  server.add_stats_hook([self](json& body) { self->report_stats(body); });
  server.add_metrics_hook([self](PromText& m) { self->report_metrics(m); });
}

void AdapterService::list_loaded(const std::shared_ptr<Exchange>& exchange) const {
  const AdapterSelection selection = mounted_->default_selection();
  json data = json::array();
  for (const LoadedAdapter& a : mounted_->list()) {
    data.push_back(loaded_json(a, selection, counters_->requests(a.id)));
  }
  exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"default", selection.to_string()}});
}

void AdapterService::list_available(const std::shared_ptr<Exchange>& exchange) const {
  worker_->post(exchange, [this, exchange] {
    struct Row {
      AvailableAdapter adapter;
      Compatibility compat;
    };
    std::vector<Row> rows;
    for (AvailableAdapter& a : store_.scan()) {
      Compatibility c = check_compatibility(a, mounted_->base());
      rows.push_back({std::move(a), std::move(c)});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& x, const Row& y) { return x.compat.compatible > y.compat.compatible; });
    json data = json::array();
    for (const Row& r : rows) {
      data.push_back(available_json(r.adapter, r.compat, mounted_->find(r.adapter.id).has_value()));
    }
    json roots = json::array();
    for (const fs::path& root : store_.roots()) roots.push_back(root.string());
    exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"folders", roots}});
  });
}

void AdapterService::load(const HttpRequest& http, const std::shared_ptr<Exchange>& exchange) {
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
  worker_->post(exchange,
                [this, exchange, id_text, path_text] { load_on_worker(id_text, path_text, *exchange); });
}

void AdapterService::load_on_worker(const std::string& id, const std::string& path, Exchange& exchange) {
  const std::string param = path.empty() ? "id" : "path";
  Result<AvailableAdapter> adapter = make_error("internal", "");
  if (!path.empty()) {
    auto inside = store_.confine(path);
    if (!inside) return exchange.send_error(api_error(inside.error(), "path"));
    adapter = inspect_adapter(*inside);
    if (adapter && !id.empty()) adapter->id = id;
  } else {
    adapter = store_.find(id);
  }
  if (!adapter) return exchange.send_error(api_error(adapter.error(), param));
  if (Status valid = validate_adapter_id(adapter->id); !valid) {
    return exchange.send_error(api_error(valid.error(), "id"));
  }
  auto loaded = mounted_->load(*adapter, [this](const LoraWeights& w) { return mount(w); });
  if (!loaded) return exchange.send_error(api_error(loaded.error(), param));
  counters_->add(
      loaded->id, [](auto& a) -> auto& { return a.loads; });
  exchange.send_json(200,
                     loaded_json(*loaded, mounted_->default_selection(), counters_->requests(loaded->id)));
}

void AdapterService::unload(const std::string& id, Exchange& exchange) {
  Status status = mounted_->unload(id, [this](int slot) { return unmount(slot); });
  if (!status) return exchange.send_error(api_error(status.error(), "id"));
  counters_->add(
      id, [](auto& a) -> auto& { return a.unloads; });
  exchange.send_json(200, json{{"id", id}, {"object", "adapter"}, {"deleted", true}});
}

std::optional<ApiError> AdapterService::select(const RequestJson& body, GenerationRequest& request) const {
  std::optional<std::string> spec;
  const auto field = body.find("adapter");
  if (field != body.end() && !field->is_null()) {
    if (!field->is_string()) {
      return bad_request("'adapter' must be a string: an adapter id, \"a+b\", \"a@0.5+b\" or \"none\"",
                         "adapter", ApiCode::kInvalidType);
    }
    spec = field->get<std::string>();
  }
  auto lease = mounted_->select(spec ? std::optional<std::string_view>(*spec) : std::nullopt);
  if (!lease) return explain_selection_error(spec.value_or(""), lease.error());
  request.adapters = lease->route();
  counters_->count_request(lease->selection());
  if (!request.adapters.empty())
    request.keep_alive = std::make_shared<AdapterLease>(std::move(lease).value());
  return std::nullopt;
}

void AdapterService::report_health(json& body) const {
  body["adapter"] = mounted_->default_selection().to_string();
  body["adapters_loaded"] = mounted_->list().size();
}

void AdapterService::report_stats(json& body) const {
  const AdapterSelection selection = mounted_->default_selection();
  json loaded = json::array();
  for (const LoadedAdapter& a : mounted_->list()) {
    loaded.push_back(loaded_json(a, selection, counters_->requests(a.id)));
  }
  // The requests that used each adapter (loaded now or not), and the base model ("none").
  json requests = json::object();
  {
    std::lock_guard lock(counters_->mutex);
    requests["none"] = counters_->base_requests;
    for (const auto& [id, n] : counters_->by_id) {
      if (n.requests > 0) requests[id] = n.requests;
    }
  }
  body["adapters"] = json{{"default", selection.to_string()}, {"loaded", loaded}, {"requests", requests}};
}

void AdapterService::report_metrics(PromText& m) const {
  m.gauge("graft_adapters_loaded", "Adapters mounted now.", double(mounted_->list().size()));
  std::lock_guard lock(counters_->mutex);
  for (const auto& [id, n] : counters_->by_id) {
    m.counter("graft_adapter_loads_total", "Adapter loads, by adapter.", double(n.loads), {{"adapter", id}});
    m.counter("graft_adapter_unloads_total", "Adapter unloads, by adapter.", double(n.unloads),
              {{"adapter", id}});
    m.counter("graft_adapter_requests_total", "Requests that selected the adapter, by adapter.",
              double(n.requests), {{"adapter", id}});
  }
}

}  // namespace graft::server

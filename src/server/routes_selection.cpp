#include "server/routes_selection.h"

#include <fmt/format.h>

#include "adapters/shared_selection.h"

namespace graft::server {

namespace {

// The 400 for a selection that cannot be used, with the code a request selecting it would get.
ApiError selection_error(const Error& error) {
  ApiCode code = code_for(error);
  if (error.code == "not_found") code = ApiCode::kAdapterNotFound;
  return api_error(code, error.message, "adapter");
}

}  // namespace

SelectionService::SelectionService(AdapterService& adapters, fs::path file)
    : adapters_(adapters), file_(std::move(file)), worker_(std::make_unique<Worker>("adapter selection")) {}

SelectionService::~SelectionService() {
  worker_.reset();
}

void SelectionService::install(Server& server) {
  Router& router = server.router();
  SelectionService* self = this;
  router.add("GET", "/v1/adapters/selection", [self](HttpRequest&, std::shared_ptr<Exchange> exchange) {
    self->worker_->post(exchange, [self, exchange] { self->get(*exchange); });
  });
  router.add("PUT", "/v1/adapters/selection", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post(exchange, [self, exchange, body = http.body] { self->put(body, *exchange); });
  });
}

json SelectionService::to_json(const std::optional<SharedSelection>& saved) const {
  json not_loaded = json::array();
  if (saved) {
    for (const AdapterChoice& c : saved->selection.stack) {
      if (!adapters_.mounted().find(c.id)) not_loaded.push_back(c.id);
    }
  }
  return json{{"object", "adapter.selection"},
              {"adapter", saved ? json(saved->selection.to_string()) : json(nullptr)},
              {"updated", saved && !saved->updated.empty() ? json(saved->updated) : json(nullptr)},
              {"not_loaded", not_loaded}};
}

void SelectionService::get(Exchange& exchange) const {
  auto saved = read_shared_selection(file_);
  if (!saved) return exchange.send_error(api_error(ApiCode::kInternal, saved.error().message));
  exchange.send_json(200, to_json(*saved));
}

void SelectionService::put(const std::string& text, Exchange& exchange) {
  RequestJson body;
  if (auto error = parse_body(text, body)) return exchange.send_error(*error);
  for (const auto& [key, value] : body.items()) {
    if (key != "adapter") {
      return exchange.send_error(bad_request(
          fmt::format("unknown field '{}': the body is {{\"adapter\": \"ID|SPEC|none\"}} (null clears it)",
                      key),
          key, ApiCode::kUnknownParameter));
    }
  }
  const auto field = body.find("adapter");
  if (field == body.end()) {
    return exchange.send_error(bad_request(
        "give \"adapter\": an adapter id, a spec such as \"a+b\", \"none\", or null to clear the selection",
        "adapter", ApiCode::kMissingParameter));
  }
  if (field->is_null()) {
    if (Status cleared = clear_shared_selection(file_); !cleared) {
      return exchange.send_error(api_error(ApiCode::kInternal, cleared.error().message));
    }
    return exchange.send_json(200, to_json(std::nullopt));
  }
  if (!field->is_string()) {
    return exchange.send_error(
        bad_request("'adapter' must be a string (an adapter id, \"a+b\", \"a@0.5+b\" or \"none\") or null",
                    "adapter", ApiCode::kInvalidType));
  }
  auto selection = parse_adapter_spec(field->get<std::string>());
  if (!selection) {
    return exchange.send_error(
        bad_request(selection.error().message, "adapter", ApiCode::kInvalidAdapterSpec));
  }
  MountedAdapters& mounted = adapters_.mounted();
  Status usable = check_selectable(*selection, adapters_.store(), &mounted.base(),
                                   [&](std::string_view id) { return mounted.find(id).has_value(); });
  if (!usable) return exchange.send_error(selection_error(usable.error()));
  auto written = write_shared_selection(file_, *selection);
  if (!written) return exchange.send_error(api_error(ApiCode::kInternal, written.error().message));
  exchange.send_json(200, to_json(*written));
}

}  // namespace graft::server

// The shared selection over HTTP (adapters/shared_selection.h), for the web
// page's "use everywhere" choice and for clients that cannot read the file:
//   GET /v1/adapters/selection   {"object": "adapter.selection", "adapter": "a+b" | "none" | null,
//                                 "updated": "...Z" | null, "not_loaded": ["b"]}
//   PUT /v1/adapters/selection   {"adapter": "a+b" | "none" | null}: each id must be loaded, or in
//                                the store, readable and made for the served model (400 naming it
//                                otherwise, and nothing is written); null clears the selection.
// The server never applies the selection to requests itself.
#pragma once

#include <memory>

#include "adapters/shared_selection.h"
#include "server/routes_adapters.h"

namespace graft::server {

class SelectionService {
 public:
  SelectionService(AdapterService& adapters, fs::path file);
  ~SelectionService();
  SelectionService(const SelectionService&) = delete;
  SelectionService& operator=(const SelectionService&) = delete;

  void install(Server& server);

 private:
  void get(Exchange& exchange) const;
  void put(const std::string& body, Exchange& exchange);
  json to_json(const std::optional<SharedSelection>& saved) const;

  AdapterService& adapters_;
  fs::path file_;
  std::unique_ptr<Worker> worker_;  // file and store reads, one at a time, off the HTTP threads
};

}  // namespace graft::server

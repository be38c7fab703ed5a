// The shared selection: one adapter choice that graft's clients share (the Pi
// extension, the web page's "use everywhere"), so that the terminal and the
// browser talk to the same adapter. It lives in graft's state folder as
// $XDG_DATA_HOME/graft/selection.json (else ~/.local/share/graft/...):
//   {"adapter": "a@0.5+b", "updated": "2026-12-02T00:10:00Z"}
// `graft adapters use` and PUT /v1/adapters/selection write it; clients read
// it (or GET /v1/adapters/selection) and send it as a request's "adapter".
// No file: no shared selection, clients send requests unchanged. The server
// itself never applies it: its default stays --force-adapter.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "adapters/base_model.h"
#include "adapters/spec.h"
#include "adapters/store.h"
#include "util/files.h"

namespace graft {

struct SharedSelection {
  AdapterSelection selection;  // none(): the base model, chosen on purpose
  std::string updated;         // UTC, ISO 8601
};

// data_dir() / "selection.json".
fs::path shared_selection_path();

// nullopt when no selection is saved. Errors ("invalid_value") name the file
// and say what is wrong with it.
Result<std::optional<SharedSelection>> read_shared_selection(const fs::path& path);
// Writes atomically (creating the folder); returns what was written.
Result<SharedSelection> write_shared_selection(const fs::path& path, const AdapterSelection& selection);
// Removes the file (no shared selection); no error when there is none.
Status clear_shared_selection(const fs::path& path);

// Whether each adapter of a selection can be used: loaded (`is_loaded`), or
// in the store, readable and (given `base`) made for it. The first failing
// id is named: "not_found", "invalid_adapter" or "incompatible_adapter".
Status check_selectable(const AdapterSelection& selection, const AdapterStore& store, const BaseModel* base,
                        const std::function<bool(std::string_view id)>& is_loaded = {});

}  // namespace graft

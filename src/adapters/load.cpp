#include "adapters/load.h"

namespace graft {

bool looks_like_path(std::string_view text) {
  return text.find('/') != std::string_view::npos || text == "." || text == ".." ||
         (text.size() > 5 && text.substr(text.size() - 5) == ".gguf");
}

Result<AvailableAdapter> resolve_adapter(std::string_view id_or_path, const AdapterStore& store) {
  if (!looks_like_path(id_or_path)) return store.find(id_or_path);
  GRAFT_TRY(AvailableAdapter adapter, inspect_adapter(fs::path(id_or_path)));
  GRAFT_TRY_STATUS(validate_adapter_id(adapter.id));
  return adapter;
}

Result<AdapterLease> load_and_select(std::string_view spec, const AdapterStore& store,
                                     MountedAdapters& mounted, const MountedAdapters::MountFn& mount) {
  GRAFT_TRY(AdapterSelection selection, parse_adapter_spec(spec));
  for (const AdapterChoice& choice : selection.stack) {
    if (mounted.find(choice.id)) continue;
    GRAFT_TRY(AvailableAdapter adapter, store.find(choice.id));
    GRAFT_TRY(LoadedAdapter loaded, mounted.load(adapter, mount));
    (void)loaded;
  }
  return mounted.select(selection);
}

Result<AdapterSelection> force_adapter(std::string_view what, const AdapterStore& store,
                                       MountedAdapters& mounted, const MountedAdapters::MountFn& mount) {
  AdapterSelection selection;
  if (looks_like_path(what)) {
    GRAFT_TRY(AvailableAdapter adapter, resolve_adapter(what, store));
    if (!mounted.find(adapter.id)) {
      GRAFT_TRY(LoadedAdapter loaded, mounted.load(adapter, mount));
      (void)loaded;
    }
    selection.stack.push_back({adapter.id, 1.0f});
  } else {
    GRAFT_TRY(AdapterLease lease, load_and_select(what, store, mounted, mount));
    selection = lease.selection();
  }
  GRAFT_TRY_STATUS(mounted.set_default(selection));
  return selection;
}

}  // namespace graft

// Loading what a user names: an adapter id (looked up in the store), a path
// (given on the command line), or a whole selection spec ("a@0.5+b"), onto a
// MountedAdapters. Shared by `graft run --adapter` and `graft serve
// --force-adapter`.
#pragma once

#include <string_view>

#include "adapters/mounted.h"
#include "adapters/store.h"

namespace graft {

// Whether the text names a file or folder rather than an id: it holds a '/',
// ends in ".gguf", or is "." / "..".
bool looks_like_path(std::string_view text);

// An adapter by path (its id: the folder name or the file's stem) or by id
// (from the store). Paths are not confined to the store: callers that take
// paths from the network must check AdapterStore::confine first.
Result<AvailableAdapter> resolve_adapter(std::string_view id_or_path, const AdapterStore& store);

// Loads every adapter the spec names that is not loaded yet (from the store),
// then selects the spec. Adapters loaded here stay loaded when a later one
// fails.
Result<AdapterLease> load_and_select(std::string_view spec, const AdapterStore& store,
                                     MountedAdapters& mounted, const MountedAdapters::MountFn& mount);

// `--force-adapter ID|PATH|SPEC`: loads it and makes it the default selection.
// Returns the selection now in force.
Result<AdapterSelection> force_adapter(std::string_view what, const AdapterStore& store,
                                       MountedAdapters& mounted, const MountedAdapters::MountFn& mount);

}  // namespace graft

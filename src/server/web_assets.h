// The web page's files, embedded into the binary at build time (web/build.mjs
// generates the definition of web_assets() from web/src).
#pragma once

#include <span>
#include <string_view>

namespace graft::server {

struct WebAsset {
  std::string_view path;          // URL path: "/index.html", "/assets/app.<hash>.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8", ...
  std::string_view etag;          // quoted, from the content
  bool immutable;                 // the name carries a content hash: cache it for good
  std::string_view plain;         // the file as is
  std::string_view gzip;          // the file gzip-compressed
};

std::span<const WebAsset> web_assets();

}  // namespace graft::server

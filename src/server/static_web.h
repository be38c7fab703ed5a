// The web page at / (web/, embedded into the binary): GET / answers the page,
// GET /assets/{name} its scripts, styles and icon. These routes need no API
// key, so the page can load and ask for it; every API route it then calls
// needs the key as usual. Assets are sent gzip-compressed to clients that
// accept it, with ETags, and cached for good (their names carry a hash);
// the page itself is revalidated on every load and carries a strict
// Content-Security-Policy (scripts only from this server).
#pragma once

#include "server/router.h"
#include "server/web_assets.h"

namespace graft::server {

void add_web_routes(Router& router);

// The answer for one asset, given the request's Accept-Encoding and
// If-None-Match headers (a 304 when the ETag matches).
HttpResponse web_asset_response(const WebAsset& asset, const HttpRequest& request);

}  // namespace graft::server

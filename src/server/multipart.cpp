#include "server/multipart.h"

#include <algorithm>
#include <cctype>

namespace graft::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Header parameters: `; name=value` or `; name="quoted \" value"`. Returns
// the parameter's value, if present. Names compare case-insensitively.
std::optional<std::string> parameter(std::string_view header, std::string_view wanted) {
  size_t i = header.find(';');
  while (i != std::string_view::npos && i < header.size()) {
    ++i;
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
    const size_t eq = header.find('=', i);
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string name = lower(trim(header.substr(i, eq - i)));
    i = eq + 1;
    std::string value;
    if (i < header.size() && header[i] == '"') {
      for (++i; i < header.size() && header[i] != '"'; ++i) {
        if (header[i] == '\\' && i + 1 < header.size()) ++i;
        value.push_back(header[i]);
      }
      i = header.find(';', i);
    } else {
      const size_t end = header.find(';', i);
      value = std::string(
          trim(header.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i)));
      i = end;
    }
    if (name == wanted) return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data") return std::nullopt;
  auto boundary = parameter(content_type, "boundary");
  if (!boundary || boundary->empty() || boundary->size() > 200) return std::nullopt;
  return boundary;
}

Result<std::vector<FormPart>> parse_multipart(std::string_view body, std::string_view boundary) {
  const std::string delimiter = "--" + std::string(boundary);
  // The first delimiter may follow a preamble; later ones start a line.
  size_t pos = body.rfind(delimiter, 0) == 0 ? 0 : body.find("\r\n" + delimiter);
  if (pos == std::string_view::npos)
    return make_error("invalid_argument", "the multipart body has no boundary line");
  if (pos > 0) pos += 2;
  std::vector<FormPart> parts;
  for (;;) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter
    // Transport padding, then the line end.
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n")
      return make_error("invalid_argument", "a multipart boundary line is malformed");
    pos += 2;
    if (body.substr(pos, 2) == "\r\n")
      return make_error("invalid_argument", "a multipart part has no headers");
    const size_t head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos) {
      return make_error("invalid_argument", "a multipart part's headers do not end");
    }
    FormPart part;
    bool disposition = false;
    for (size_t line = pos; line < head_end + 2;) {
      const size_t eol = body.find("\r\n", line);
      std::string_view header = body.substr(line, eol - line);
      line = eol + 2;
      const size_t colon = header.find(':');
      if (colon == std::string_view::npos)
        return make_error("invalid_argument", "a multipart header has no ':'");
      const std::string name = lower(trim(header.substr(0, colon)));
      const std::string_view value = trim(header.substr(colon + 1));
      if (name == "content-disposition") {
        if (lower(trim(value.substr(0, value.find(';')))) != "form-data") {
          return make_error("invalid_argument", "a multipart part is not form-data");
        }
        auto field = parameter(value, "name");
        if (!field) return make_error("invalid_argument", "a multipart part has no field name");
        part.name = *field;
        part.filename = parameter(value, "filename");
        disposition = true;
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!disposition) return make_error("invalid_argument", "a multipart part has no Content-Disposition");
    const size_t data_start = head_end + 4;
    const size_t data_end = body.find("\r\n" + delimiter, data_start);
    if (data_end == std::string_view::npos) {
      return make_error("invalid_argument", "the multipart body ends before its closing boundary");
    }
    part.data = body.substr(data_start, data_end - data_start);
    parts.push_back(std::move(part));
    pos = data_end + 2;
  }
}

}  // namespace graft::server

// json.dumps as Python writes it (separators, indent, ensure_ascii, sort_keys).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "chat/jinja_value.h"
#include "util/utf8.h"

namespace graft::jinja {

namespace {

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
    } else {
      // Decode one code point and write it as \uXXXX (a surrogate pair above
      // the BMP); a byte that starts no character is U+FFFD.
      const std::size_t n = utf8::sequence_length(s, i);
      std::uint32_t cp = n ? utf8::decode_at(s, i, n) : 0xFFFD;
      if (n) i += n - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    }
  }
  out += '"';
}

void dump_value(std::string& out, const Json& j, const DumpOptions& o, int depth) {
  if (depth > kMaxJsonDepth) fail("value nests too deeply");
  auto newline = [&](int level) {
    out += '\n';
    if (!o.indent_text.empty()) {
      for (int i = 0; i < level; ++i) out += o.indent_text;
    } else {
      out.append(static_cast<std::size_t>(level * o.indent), ' ');
    }
  };
  bool pretty = o.indent >= 0 || !o.indent_text.empty();
  switch (j.type()) {
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(j.get<std::int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(j.get<std::uint64_t>());
      return;
    case Json::value_t::number_float: {
      double d = j.get<double>();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += python_float_repr(d);
      return;
    }
    case Json::value_t::string:
      dump_string(out, j.get_ref<const std::string&>(), o.ensure_ascii);
      return;
    case Json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += o.item_separator;
        first = false;
        if (pretty) newline(depth + 1);
        dump_value(out, e, o, depth + 1);
      }
      if (pretty) newline(depth);
      out += ']';
      return;
    }
    case Json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      std::vector<const std::pair<const std::string, Json>*> entries;
      for (const auto& entry : j.get_ref<const Json::object_t&>()) entries.push_back(&entry);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      bool first = true;
      for (const auto* entry : entries) {
        if (!first) out += o.item_separator;
        first = false;
        if (pretty) newline(depth + 1);
        dump_string(out, key_text(entry->first), o.ensure_ascii);
        out += o.key_separator;
        dump_value(out, entry->second, o, depth + 1);
      }
      if (pretty) newline(depth);
      out += '}';
      return;
    }
    default:
      out += "null";
      return;
  }
}

}  // namespace

std::string dump_json(const Json& j, const DumpOptions& options) {
  std::string out;
  dump_value(out, j, options, 0);
  return out;
}

}  // namespace graft::jinja

#include "chat/jinja_strings.h"

#include <algorithm>
#include <cctype>

#include "chat/jinja_value.h"
#include "util/utf8.h"

namespace graft::jinja {

bool is_python_space(std::string_view cp) {
  if (cp.size() == 1) {
    unsigned char c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  static constexpr std::string_view kSpaces[] = {
      "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
      "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  return std::find(std::begin(kSpaces), std::end(kSpaces), cp) != std::end(kSpaces);
}

std::string py_strip(std::string_view s, const std::string* chars, StripSide side) {
  std::vector<std::string_view> set = chars ? code_points(*chars) : std::vector<std::string_view>{};
  auto strippable = [&](std::string_view cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_python_space(cp);
  };
  auto length_at = [&](std::size_t i) { return utf8::next_char(s, i) - i; };  // bytes in the code point at i
  std::size_t begin = 0, end = s.size();
  if (side != StripSide::right) {
    while (begin < end) {
      std::size_t n = length_at(begin);
      if (!strippable(s.substr(begin, n))) break;
      begin += n;
    }
  }
  if (side != StripSide::left) {
    while (end > begin) {
      const std::size_t start = std::max(utf8::char_start(s, end - 1), begin);
      if (!strippable(s.substr(start, end - start))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit, bool from_right) {
  std::vector<std::string_view> cps = code_points(s);
  std::vector<std::string> out;
  auto text = [&](std::size_t a, std::size_t b) {
    return std::string(cps[a].data(), cps[b - 1].data() + cps[b - 1].size());
  };
  if (!from_right) {
    std::size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && is_python_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::size_t end = n;
        while (end > i && is_python_space(cps[end - 1])) --end;
        out.push_back(text(i, end));
        break;
      }
      std::size_t j = i;
      while (j < n && !is_python_space(cps[j])) ++j;
      out.push_back(text(i, j));
      i = j;
    }
    return out;
  }
  std::size_t i = cps.size();
  while (true) {
    while (i > 0 && is_python_space(cps[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      std::size_t begin = 0;
      while (begin < i && is_python_space(cps[begin])) ++begin;
      out.push_back(text(begin, i));
      break;
    }
    std::size_t j = i;
    while (j > 0 && !is_python_space(cps[j - 1])) --j;
    out.push_back(text(j, i));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right) {
  if (!sep) return split_whitespace(s, maxsplit, from_right);
  if (sep->empty()) fail("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    std::size_t start = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      std::size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::size_t end = s.size();
  while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    std::size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.emplace_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       std::int64_t count) {
  std::string out;
  if (old.empty()) {
    std::int64_t done = 0;
    for (std::string_view cp : code_points(s)) {
      if (count < 0 || done < count) out += replacement, ++done;
      out += cp;
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    std::size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += replacement;
    start = at + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(previous_cased ? std::tolower(u) : std::toupper(u));
      previous_cased = true;
    } else {
      previous_cased = u >= 0x80 && previous_cased;  // treat non-ASCII letters as continuing a word
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace graft::jinja

#include "adapters/spec.h"

#include <cmath>
#include <cstdlib>

#include "adapters/store.h"
#include "util/strings.h"

namespace graft {

namespace {

std::string format_scale(float scale) {
  return fmt::format("{}", scale);
}

}  // namespace

std::string AdapterSelection::to_string() const {
  if (stack.empty()) return "none";
  std::string out;
  for (const AdapterChoice& c : stack) {
    if (!out.empty()) out += "+";
    out += c.id;
    if (c.scale != 1.0f) {
      out += '@';
      out += format_scale(c.scale);
    }
  }
  return out;
}

Result<AdapterSelection> parse_adapter_spec(std::string_view spec) {
  const std::string_view whole = trim(spec);
  AdapterSelection selection;
  if (whole.empty() || whole == "none") return selection;
  auto bad = [&](const std::string& why) {
    return errorf("invalid_argument", "invalid adapter spec '{}': {}", spec, why);
  };
  std::string_view rest = whole;
  while (true) {
    const size_t plus = rest.find('+');
    const std::string_view part = trim(rest.substr(0, plus));
    if (part.empty()) return bad("empty adapter name");
    AdapterChoice choice;
    const size_t at = part.find('@');
    choice.id = std::string(trim(part.substr(0, at)));
    if (choice.id == "none") return bad("'none' cannot be stacked with adapters");
    if (Status ok = validate_adapter_id(choice.id); !ok) return bad(ok.error().message);
    if (at != std::string_view::npos) {
      const std::string text(trim(part.substr(at + 1)));
      char* end = nullptr;
      const double scale = text.empty() ? NAN : std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(scale) ||
          std::fabs(scale) > 1000.0) {
        return bad(fmt::format("'{}' is not a scale (a finite number, at most 1000 in size)", text));
      }
      choice.scale = float(scale);
    }
    for (const AdapterChoice& c : selection.stack) {
      if (c.id == choice.id) return bad(fmt::format("adapter '{}' is given twice", choice.id));
    }
    selection.stack.push_back(std::move(choice));
    if (int(selection.stack.size()) > kMaxAdapterStack) {
      return bad(fmt::format("at most {} adapters can be stacked", kMaxAdapterStack));
    }
    if (plus == std::string_view::npos) break;
    rest = rest.substr(plus + 1);
  }
  return selection;
}

}  // namespace graft

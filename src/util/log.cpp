#include "util/log.h"

#include <string>

namespace graft {

void set_log_level(std::string_view level) {
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace graft

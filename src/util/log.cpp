#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace graft {

void set_log_level(std::string_view level) {
  // Log lines go to stderr, never into a command's output on stdout.
  static const bool on_stderr = [] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("graft"));
    return true;
  }();
  (void)on_stderr;
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace graft

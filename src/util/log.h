// Logging: spdlog to stderr, one logger for the whole process.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace graft {

// Sets the level by name ("trace", "debug", "info", "warn", "error", "off").
void set_log_level(std::string_view level);

}  // namespace graft

#define GRAFT_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define GRAFT_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define GRAFT_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define GRAFT_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

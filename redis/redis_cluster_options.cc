// RedisClusterOptions, seeds parsing, RedisNode and RedisClusterStats (redis/redis_cluster.h):
// validation and names.
#include <algorithm>
#include <charconv>

#include "redis/redis_cluster.h"

namespace cachepawl {
namespace {

constexpr std::string_view kScheme = "redis://";

std::string Quoted(std::string_view s) {
  std::string out = "'";
  out.append(s);
  out += '\'';
  return out;
}

Status BadSeed(std::string_view part, std::string_view why) {
  std::string msg = "seeds: ";
  msg += Quoted(part);
  msg += ": ";
  msg.append(why);
  return Status::InvalidArgument(msg);
}

// One "host:port" or "[v6]:port".
StatusOr<RedisNode> ParseOneSeed(std::string_view part) {
  if (part.empty()) return BadSeed(part, "empty (expected host:port)");
  std::string_view host;
  std::string_view port_text;
  if (part.front() == '[') {
    const size_t close = part.find(']');
    if (close == std::string_view::npos) return BadSeed(part, "'[' without ']'");
    host = part.substr(1, close - 1);
    if (close + 1 >= part.size() || part[close + 1] != ':') {
      return BadSeed(part, "no ':port' after the bracketed address");
    }
    port_text = part.substr(close + 2);
    if (host.find(':') == std::string_view::npos) {
      return BadSeed(part, "brackets are for IPv6 addresses only");
    }
  } else {
    const size_t colon = part.rfind(':');
    if (colon == std::string_view::npos) return BadSeed(part, "no ':port'");
    host = part.substr(0, colon);
    port_text = part.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return BadSeed(part, "an IPv6 address needs brackets: [addr]:port");
    }
  }
  if (host.empty()) return BadSeed(part, "empty host");
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
    if (!ok) return BadSeed(part, "the host has a character that is not allowed in a name");
  }
  uint32_t port = 0;
  const char* end = port_text.data() + port_text.size();
  auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || ptr != end || port == 0 || port > 65535) {
    return BadSeed(part, "port " + Quoted(port_text) + " is not a number in 1..65535");
  }
  return RedisNode{std::string(host), static_cast<uint16_t>(port)};
}

Status CheckDuration(const char* field, std::chrono::milliseconds value,
                     std::chrono::milliseconds min, std::chrono::milliseconds max) {
  if (value >= min && value <= max) return Status::OK();
  std::string msg = field;
  msg += ": ";
  msg += std::to_string(value.count());
  msg += " ms (must be ";
  msg += std::to_string(min.count());
  msg += " .. ";
  msg += std::to_string(max.count());
  msg += " ms)";
  return Status::InvalidArgument(msg);
}

}  // namespace

std::string RedisNode::ToString() const {
  std::string out;
  const bool v6 = host.find(':') != std::string::npos;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

StatusOr<std::vector<RedisNode>> ParseRedisSeeds(std::string_view seeds) {
  if (seeds.empty()) {
    return Status::InvalidArgument("seeds: empty (expected redis://host:port[,host:port...])");
  }
  // Never echo a value that may hold a password.
  if (seeds.find('@') != std::string_view::npos) {
    return Status::InvalidArgument(
        "seeds: contains '@': credentials in the seeds are not supported (use the user and "
        "password options)");
  }
  if (seeds.substr(0, 9) == "rediss://") {
    return BadSeed(seeds,
                   "TLS (rediss://) is not supported: Debian 12's hiredis 0.14 has no TLS "
                   "(run a TLS proxy on loopback)");
  }
  if (seeds.substr(0, kScheme.size()) != kScheme) {
    return BadSeed(seeds, "does not start with redis://");
  }
  std::string_view rest = seeds.substr(kScheme.size());
  std::vector<RedisNode> nodes;
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    CACHEPAWL_ASSIGN_OR_RETURN(RedisNode node, ParseOneSeed(part));
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) {
      nodes.push_back(std::move(node));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return nodes;
}

Status CheckRedisAuth(std::string_view user_field, std::string_view user,
                      std::string_view password) {
  if (user.empty() || !password.empty()) return Status::OK();
  std::string message(user_field);
  message += ": " + Quoted(user) + " (given without a password: AUTH needs both)";
  return Status::InvalidArgument(message);
}

Status RedisClusterOptions::Validate() const {
  auto parsed = ParseRedisSeeds(seeds);
  if (!parsed.ok()) return parsed.status();
  CACHEPAWL_RETURN_IF_ERROR(CheckRedisAuth("user", user, password));
  using std::chrono::milliseconds;
  CACHEPAWL_RETURN_IF_ERROR(
      CheckDuration("connect_timeout", connect_timeout, milliseconds(1), milliseconds(60'000)));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckDuration("io_timeout", io_timeout, milliseconds(1), milliseconds(600'000)));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckDuration("down_backoff", down_backoff, milliseconds(0), milliseconds(600'000)));
  if (connections_per_node < 1 || connections_per_node > 64) {
    return Status::InvalidArgument("connections_per_node: " + std::to_string(connections_per_node) +
                                   " (must be 1..64)");
  }
  return Status::OK();
}

std::vector<std::pair<const char*, uint64_t>> RedisClusterStats::Fields() const {
  return {{"commands", commands},
          {"round_trips", round_trips},
          {"moved", moved},
          {"ask", ask},
          {"redirect_limit", redirect_limit},
          {"slot_map_refreshes", slot_map_refreshes},
          {"slot_map_refresh_failures", slot_map_refresh_failures},
          {"unrouted", unrouted},
          {"connects", connects},
          {"connect_failures", connect_failures},
          {"auth_failures", auth_failures},
          {"timeouts", timeouts},
          {"broken_connections", broken_connections},
          {"server_errors", server_errors},
          {"skipped_down", skipped_down},
          {"invalid_commands", invalid_commands}};
}

}  // namespace cachepawl

// Key slots, CLUSTER SLOTS replies, MOVED/ASK errors (redis/redis_slot_map.h).
#include "redis/redis_slot_map.h"

#include <array>
#include <charconv>

namespace cachepawl {
namespace {

// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes keys with.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ b) & 0xff]);
  }
  return crc;
}

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

Status BadSlots(size_t range, std::string_view why) {
  std::string msg = "CLUSTER SLOTS reply, range ";
  msg += std::to_string(range);
  msg += ": ";
  msg.append(why);
  return Status::Corruption(msg);
}

bool ValidSlot(int64_t slot) { return slot >= 0 && slot < int64_t{kRedisSlotCount}; }

}  // namespace

uint16_t RedisKeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<uint16_t>(Crc16(key) & (kRedisSlotCount - 1));
}

StatusOr<std::vector<RedisSlotRange>> ParseClusterSlots(const RedisReply& reply,
                                                        const RedisNode& queried) {
  using Type = RedisReply::Type;
  if (reply.type != Type::kArray) return Status::Corruption("CLUSTER SLOTS reply: not an array");
  std::vector<RedisSlotRange> ranges;
  ranges.reserve(reply.elements.size());
  for (size_t i = 0; i < reply.elements.size(); ++i) {
    const RedisReply& r = reply.elements[i];
    if (r.type != Type::kArray || r.elements.size() < 3) {
      return BadSlots(i, "not an array of first, last and master");
    }
    const RedisReply& first = r.elements[0];
    const RedisReply& last = r.elements[1];
    const RedisReply& master = r.elements[2];
    if (first.type != Type::kInteger || last.type != Type::kInteger || !ValidSlot(first.integer) ||
        !ValidSlot(last.integer) || first.integer > last.integer) {
      return BadSlots(i, "slots are not integers first <= last in 0..16383");
    }
    if (master.type != Type::kArray || master.elements.size() < 2 ||
        master.elements[1].type != Type::kInteger || master.elements[1].integer < 1 ||
        master.elements[1].integer > 65535) {
      return BadSlots(i, "the master is not [host, port, ...] with a port in 1..65535");
    }
    const RedisReply& host = master.elements[0];
    if (host.type != Type::kString && host.type != Type::kNil) {
      return BadSlots(i, "the master's host is not a string");
    }
    RedisSlotRange range;
    range.first = static_cast<uint16_t>(first.integer);
    range.last = static_cast<uint16_t>(last.integer);
    const bool unknown = host.type == Type::kNil || host.str.empty() || host.str == "?";
    range.master.host = unknown ? queried.host : host.str;
    range.master.port = static_cast<uint16_t>(master.elements[1].integer);
    ranges.push_back(std::move(range));
  }
  return ranges;
}

bool IsClusterDisabledError(std::string_view error) {
  return error.find("cluster support disabled") != std::string_view::npos;
}

std::optional<RedisRedirect> ParseRedirect(std::string_view error, const RedisNode& from) {
  RedisRedirect redirect;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    redirect.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  uint32_t slot = 0;
  if (!ParseNumber(error.substr(0, space), &slot) || slot >= kRedisSlotCount) {
    return std::nullopt;
  }
  redirect.slot = static_cast<uint16_t>(slot);
  const std::string_view address = error.substr(space + 1);
  const size_t colon = address.rfind(':');  // IPv6 hosts come without brackets
  uint32_t port = 0;
  if (colon == std::string_view::npos || !ParseNumber(address.substr(colon + 1), &port) ||
      port == 0 || port > 65535) {
    return std::nullopt;
  }
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  redirect.target.host = host.empty() ? from.host : std::string(host);
  redirect.target.port = static_cast<uint16_t>(port);
  return redirect;
}

}  // namespace cachepawl

#include "vocab/model_layout.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace cachepawl {
namespace {

constexpr uint32_t kFingerprintVersion = 1;
constexpr uint32_t kFingerprintVersionWindowed = 2;
constexpr uint32_t kFingerprintVersionMla = 3;
constexpr uint32_t kFingerprintVersionReplicas = 4;
// The block whose layers keep a conv state only (LFM2): an empty ssm_shape, 0 SSM bytes.
constexpr char kShortConvBlock[] = "shortconv";
constexpr char kLightningBlock[] = "lightning";

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

// Elements of a shape, or nullopt on overflow / empty shape / zero dimension.
std::optional<uint64_t> Elements(const std::vector<uint64_t>& shape) {
  if (shape.empty()) return std::nullopt;
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0 || MulOverflows(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool KnownBlock(const std::string& b) {
  return b == "mamba1" || b == "mamba2" || b == "rglru" || b == "gdn" || b == "kda" ||
         b == kShortConvBlock || b == kLightningBlock;
}

std::optional<uint64_t> KBytes(const ModelLayout& l, const AttentionLayerSpec& a) {
  uint64_t n = 0;
  if (MulOverflows(l.page_size_tokens, a.num_kv_heads, &n) || MulOverflows(n, a.head_dim, &n)) {
    return std::nullopt;
  }
  return DTypeStorageBytes(a.dtype, n);
}

std::optional<uint64_t> ShapeBytes(const std::vector<uint64_t>& shape, DType dtype) {
  auto n = Elements(shape);
  if (!n) return std::nullopt;
  return DTypeStorageBytes(dtype, *n);
}

// Canonical encoding: fixed-width little-endian integers and length-prefixed strings.
class Encoder {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Str(const std::string& s) {
    U64(s.size());
    buf_ += s;
  }
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

// The index of the first byte of `s` that does not start a well-formed UTF-8 sequence (RFC
// 3629: no overlong forms, no surrogates, nothing above U+10FFFF); nullopt when all are.
std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  static constexpr uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};  // by continuation bytes
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t more = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3, cp = c & 0x07;
    } else {
      return i;
    }
    if (s.size() - i <= more) return i;
    for (size_t k = 1; k <= more; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < kLeast[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += more + 1;
  }
  return std::nullopt;
}

}  // namespace

Status ModelLayout::Validate() const {
  auto bad = [](const std::string& field, const std::string& value, const std::string& why) {
    return Status::InvalidArgument(field + ": " + value + " (" + why + ")");
  };
  if (auto at = FirstInvalidUtf8(model)) {
    // The name goes into layout files and stats as a JSON string, which must be UTF-8.
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<uint8_t>(model[*at]));
    return bad("model", std::string("byte ") + byte + " at index " + std::to_string(*at),
               "not valid UTF-8");
  }
  if (page_size_tokens == 0) return bad("page_size_tokens", "0", "must be > 0");
  if (tp_size == 0) return bad("tp_size", "0", "must be > 0");
  if (tp_rank >= tp_size) {
    return bad("tp_rank", std::to_string(tp_rank), "must be < tp_size " + std::to_string(tp_size));
  }
  if (attention_layers.empty() && ssm_layers.empty()) {
    return bad("attention_layers/ssm_layers", "both empty", "a layout needs at least one layer");
  }
  if (num_layers == 0) return bad("num_layers", "0", "must be > 0");
  std::set<uint32_t> seen;
  uint64_t total = 0;
  for (size_t i = 0; i < attention_layers.size(); ++i) {
    const auto& a = attention_layers[i];
    const std::string f = "attention_layers[" + std::to_string(i) + "]";
    if (a.layer_index >= num_layers) {
      return bad(f + ".layer_index", std::to_string(a.layer_index),
                 "must be < num_layers " + std::to_string(num_layers));
    }
    if (!seen.insert(a.layer_index).second) {
      return bad(f + ".layer_index", std::to_string(a.layer_index),
                 "overlaps another attention layer");
    }
    if (a.num_kv_heads == 0) return bad(f + ".num_kv_heads", "0", "must be > 0");
    if (a.mla && a.sliding_window != 0) {
      return bad(f + ".sliding_window", std::to_string(a.sliding_window),
                 "an MLA layer (mla true) has full attention: 0");
    }
    if (a.tp_replicas == 0 || tp_size % a.tp_replicas != 0) {
      return bad(f + ".tp_replicas", std::to_string(a.tp_replicas),
                 "must divide tp_size " + std::to_string(tp_size));
    }
    if (a.head_dim == 0) return bad(f + ".head_dim", "0", "must be > 0");
    if (!IsValidDType(static_cast<uint8_t>(a.dtype))) {
      return bad(f + ".dtype", std::to_string(static_cast<int>(a.dtype)), "unknown dtype");
    }
    auto k = KBytes(*this, a);
    if (!k) {
      return bad(f + ".dtype", std::string(DTypeName(a.dtype)),
                 "page_size_tokens * num_kv_heads * head_dim overflows or is not a multiple of "
                 "16 for fp4");
    }
    uint64_t kv = 0;
    if (MulOverflows(*k, a.mla ? 1 : 2, &kv) || AddOverflows(total, kv, &total)) {
      return bad(f, "K+V bytes", "KV page size overflows 64 bits");
    }
  }
  seen.clear();
  total = 0;
  for (size_t i = 0; i < ssm_layers.size(); ++i) {
    const auto& s = ssm_layers[i];
    const std::string f = "ssm_layers[" + std::to_string(i) + "]";
    if (s.layer_index >= num_layers) {
      return bad(f + ".layer_index", std::to_string(s.layer_index),
                 "must be < num_layers " + std::to_string(num_layers));
    }
    if (!seen.insert(s.layer_index).second) {
      return bad(f + ".layer_index", std::to_string(s.layer_index), "overlaps another SSM layer");
    }
    if (!KnownBlock(s.block)) {
      return bad(f + ".block", "'" + s.block + "'",
                 "expected mamba1, mamba2, rglru, gdn, kda, shortconv or lightning");
    }
    const bool conv_only = s.block == kShortConvBlock;
    const bool state_only = s.block == kLightningBlock;
    if (!IsValidDType(static_cast<uint8_t>(s.conv_dtype))) {
      return bad(f + ".conv_dtype", std::to_string(static_cast<int>(s.conv_dtype)),
                 "unknown dtype");
    }
    if (!IsValidDType(static_cast<uint8_t>(s.ssm_dtype))) {
      return bad(f + ".ssm_dtype", std::to_string(static_cast<int>(s.ssm_dtype)), "unknown dtype");
    }
    if (state_only && !s.conv_shape.empty()) {
      return bad(f + ".conv_shape", ShapeString(s.conv_shape),
                 "a lightning layer has no conv state: must be []");
    }
    if (!state_only && !Elements(s.conv_shape)) {
      return bad(f + ".conv_shape", ShapeString(s.conv_shape),
                 "needs at least one dimension, all > 0, product within 64 bits");
    }
    if (conv_only && !s.ssm_shape.empty()) {
      return bad(f + ".ssm_shape", ShapeString(s.ssm_shape),
                 "a shortconv layer has no SSM state: must be []");
    }
    if (!conv_only && !Elements(s.ssm_shape)) {
      return bad(f + ".ssm_shape", ShapeString(s.ssm_shape),
                 "needs at least one dimension, all > 0, product within 64 bits");
    }
    auto c = state_only ? std::optional<uint64_t>(0) : ShapeBytes(s.conv_shape, s.conv_dtype);
    auto m = conv_only ? std::optional<uint64_t>(0) : ShapeBytes(s.ssm_shape, s.ssm_dtype);
    if (!c) {
      return bad(f + ".conv_shape", ShapeString(s.conv_shape),
                 "byte size overflows or is not a multiple of 16 elements for fp4");
    }
    if (!m) {
      return bad(f + ".ssm_shape", ShapeString(s.ssm_shape),
                 "byte size overflows or is not a multiple of 16 elements for fp4");
    }
    if (AddOverflows(total, *c, &total) || AddOverflows(total, *m, &total)) {
      return bad(f, "state bytes", "Mamba slot size overflows 64 bits");
    }
  }
  return Status::OK();
}

uint64_t ModelLayout::KBytesPerPage(size_t a) const {
  return KBytes(*this, attention_layers.at(a)).value_or(0);
}

uint64_t ModelLayout::VBytesPerPage(size_t a) const {
  return attention_layers.at(a).mla ? 0 : KBytesPerPage(a);
}

bool ModelLayout::has_mla() const {
  for (const auto& a : attention_layers) {
    if (a.mla) return true;
  }
  return false;
}

uint64_t ModelLayout::KvPageBytes() const {
  uint64_t total = 0;
  for (size_t a = 0; a < attention_layers.size(); ++a) total += KBytesPerPage(a) + VBytesPerPage(a);
  return total;
}

uint64_t ModelLayout::ConvStateBytes(size_t s) const {
  const auto& l = ssm_layers.at(s);
  return ShapeBytes(l.conv_shape, l.conv_dtype).value_or(0);
}

uint64_t ModelLayout::SsmStateBytes(size_t s) const {
  const auto& l = ssm_layers.at(s);
  return ShapeBytes(l.ssm_shape, l.ssm_dtype).value_or(0);
}

uint64_t ModelLayout::MambaSlotBytes() const {
  uint64_t total = 0;
  for (size_t s = 0; s < ssm_layers.size(); ++s) total += ConvStateBytes(s) + SsmStateBytes(s);
  return total;
}

ModelLayout::PrefillCost ModelLayout::EstimatedPrefillCost() const {
  PrefillCost cost;
  for (const AttentionLayerSpec& l : attention_layers) {
    const double h = 4.0 * l.num_kv_heads * l.head_dim;
    cost.per_token += 24.0 * h * h;
    if (l.sliding_window == 0) {
      cost.per_token_squared += 2.0 * h;
    } else {
      cost.per_token += 4.0 * h * l.sliding_window;
    }
  }
  for (const SsmLayerSpec& l : ssm_layers) {
    double channels = 1;
    if (l.ssm_shape.size() >= 2) {
      for (size_t i = 0; i + 1 < l.ssm_shape.size(); ++i) channels *= double(l.ssm_shape[i]);
    } else if (!l.conv_shape.empty()) {
      channels = double(l.conv_shape[0]);
    }
    const double h = std::max(1.0, channels / 2.0);
    cost.per_token += 24.0 * h * h;
  }
  return cost;
}

RecordSegment ModelLayout::KSegment(size_t a) const {
  uint64_t off = 0;
  for (size_t i = 0; i < a; ++i) off += KBytesPerPage(i) + VBytesPerPage(i);
  return {off, KBytesPerPage(a)};
}

RecordSegment ModelLayout::VSegment(size_t a) const {
  RecordSegment k = KSegment(a);
  return {k.offset + k.bytes, VBytesPerPage(a)};
}

bool ModelLayout::has_window() const {
  for (const auto& a : attention_layers) {
    if (a.sliding_window != 0) return true;
  }
  return false;
}

Kind ModelLayout::AttentionKind(size_t a) const {
  return attention_layers.at(a).sliding_window != 0 ? Kind::kWindowKV : Kind::kKV;
}

bool ModelLayout::Stores(Kind kind) const {
  switch (kind) {
    case Kind::kMamba:
      return has_ssm();
    case Kind::kKV:
    case Kind::kWindowKV:
      for (size_t a = 0; a < attention_layers.size(); ++a) {
        if (AttentionKind(a) == kind) return true;
      }
      return false;
  }
  return false;
}

uint32_t ModelLayout::WindowTokens() const {
  uint32_t w = 0;
  for (const auto& a : attention_layers) w = std::max(w, a.sliding_window);
  return w;
}

uint32_t ModelLayout::WindowPages() const {
  if (page_size_tokens == 0) return 0;
  return static_cast<uint32_t>((uint64_t{WindowTokens()} + page_size_tokens - 1) /
                               page_size_tokens);
}

uint64_t ModelLayout::RecordBytes(Kind kind) const {
  if (kind == Kind::kMamba) return MambaSlotBytes();
  uint64_t total = 0;
  for (size_t a = 0; a < attention_layers.size(); ++a) {
    if (AttentionKind(a) == kind) total += KBytesPerPage(a) + VBytesPerPage(a);
  }
  return total;
}

RecordSegment ModelLayout::KRecordSegment(size_t a) const {
  const Kind kind = AttentionKind(a);
  uint64_t off = 0;
  for (size_t i = 0; i < a; ++i) {
    if (AttentionKind(i) == kind) off += KBytesPerPage(i) + VBytesPerPage(i);
  }
  return {off, KBytesPerPage(a)};
}

RecordSegment ModelLayout::VRecordSegment(size_t a) const {
  RecordSegment k = KRecordSegment(a);
  return {k.offset + k.bytes, VBytesPerPage(a)};
}

RecordSegment ModelLayout::ConvSegment(size_t s) const {
  uint64_t off = 0;
  for (size_t i = 0; i < s; ++i) off += ConvStateBytes(i) + SsmStateBytes(i);
  return {off, ConvStateBytes(s)};
}

RecordSegment ModelLayout::SsmSegment(size_t s) const {
  RecordSegment c = ConvSegment(s);
  return {c.offset + c.bytes, SsmStateBytes(s)};
}

std::vector<LayerSegment> ModelLayout::RecordSegments(Kind kind) const {
  std::vector<LayerSegment> out;
  if (kind == Kind::kMamba) {
    for (size_t s = 0; s < ssm_layers.size(); ++s) {
      out.push_back({s, false, ConvSegment(s)});
      out.push_back({s, true, SsmSegment(s)});
    }
    return out;
  }
  for (size_t a = 0; a < attention_layers.size(); ++a) {
    if (AttentionKind(a) != kind) continue;
    out.push_back({a, false, KRecordSegment(a)});
    out.push_back({a, true, VRecordSegment(a)});
  }
  return out;
}

std::vector<LayerSegment> ModelLayout::KvPageSegments() const {
  std::vector<LayerSegment> out;
  for (size_t a = 0; a < attention_layers.size(); ++a) {
    out.push_back({a, false, KSegment(a)});
    out.push_back({a, true, VSegment(a)});
  }
  return out;
}

std::array<uint8_t, 32> ModelLayout::Fingerprint() const {
  Encoder e;
  e.Str("cachepawl-layout");
  // Windowed layers change how a page's KV is split into records: such layouts are tagged
  // version 2, so a disk tier written before they were kept apart is refused, not misread.
  // Version 3 encodes each attention layer's mla flag; version 4 (a layer with tp_replicas
  // other than 1, whose group store keeps fewer shares) also its tp_replicas.
  bool replicas = false;
  for (const auto& a : attention_layers) replicas = replicas || a.tp_replicas != 1;
  const bool mla = has_mla() || replicas;
  e.U32(replicas ? kFingerprintVersionReplicas
        : mla    ? kFingerprintVersionMla
                 : (has_window() ? kFingerprintVersionWindowed : kFingerprintVersion));
  e.Str(model);
  e.U32(num_layers);
  e.U32(page_size_tokens);
  e.U32(tp_rank);
  e.U32(tp_size);
  e.U64(attention_layers.size());
  for (const auto& a : attention_layers) {
    e.U32(a.layer_index);
    e.U32(a.num_kv_heads);
    e.U32(a.head_dim);
    e.U8(static_cast<uint8_t>(a.dtype));
    e.U32(a.sliding_window);
    if (mla) e.U8(a.mla ? 1 : 0);
    if (replicas) e.U32(a.tp_replicas);
  }
  e.U64(ssm_layers.size());
  for (const auto& s : ssm_layers) {
    e.U32(s.layer_index);
    e.Str(s.block);
    e.U64(s.conv_shape.size());
    for (uint64_t d : s.conv_shape) e.U64(d);
    e.U8(static_cast<uint8_t>(s.conv_dtype));
    e.U64(s.ssm_shape.size());
    for (uint64_t d : s.ssm_shape) e.U64(d);
    e.U8(static_cast<uint8_t>(s.ssm_dtype));
  }
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_Digest(e.bytes().data(), e.bytes().size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string ModelLayout::FingerprintHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  auto fp = Fingerprint();
  std::string s;
  for (uint8_t b : fp) {
    s += kDigits[b >> 4];
    s += kDigits[b & 0xf];
  }
  return s;
}

namespace {
std::string HumanBytes(uint64_t b) {
  std::ostringstream o;
  o.precision(3);
  if (b >= (1ull << 30)) {
    o << static_cast<double>(b) / (1ull << 30) << " GiB";
  } else if (b >= (1ull << 20)) {
    o << static_cast<double>(b) / (1ull << 20) << " MiB";
  } else if (b >= (1ull << 10)) {
    o << static_cast<double>(b) / (1ull << 10) << " KiB";
  } else {
    o << b << " B";
  }
  return o.str();
}
}  // namespace

std::string ModelLayout::Describe() const {
  std::ostringstream o;
  o << "model:            " << (model.empty() ? "(unnamed)" : model) << "\n";
  o << "decoder layers:   " << num_layers << "\n";
  o << "page size:        " << page_size_tokens << " tokens\n";
  o << "tensor parallel:  rank " << tp_rank << " of " << tp_size << "\n";
  if (tp_size > 1) {
    o << "group shares:    ";
    for (Kind k : kAllKinds) {
      if (Stores(k)) o << " " << KindName(k) << "=" << TpShares(k);
    }
    o << " (a group store keeps this many records of each kind per entry)\n";
  }
  o << "attention layers: " << attention_layers.size() << "\n";
  for (size_t i = 0; i < attention_layers.size(); ++i) {
    const auto& a = attention_layers[i];
    o << "  [" << a.layer_index << "] kv_heads=" << a.num_kv_heads << " head_dim=" << a.head_dim
      << " dtype=" << DTypeName(a.dtype);
    if (a.sliding_window) o << " window=" << a.sliding_window;
    if (a.tp_replicas != 1) o << " same-on=" << a.tp_replicas << "-ranks";
    if (a.mla) {
      o << " mla  latent/page=" << KBytesPerPage(i) << " B\n";
    } else {
      o << "  K+V/page=" << KBytesPerPage(i) + VBytesPerPage(i) << " B\n";
    }
  }
  o << "ssm layers:       " << ssm_layers.size() << "\n";
  for (size_t i = 0; i < ssm_layers.size(); ++i) {
    const auto& s = ssm_layers[i];
    o << "  [" << s.layer_index << "] " << s.block;
    if (s.conv_shape.empty()) {
      o << " conv=none";
    } else {
      o << " conv=" << ShapeString(s.conv_shape) << " " << DTypeName(s.conv_dtype);
    }
    if (s.ssm_shape.empty()) {
      o << " ssm=none";
    } else {
      o << " ssm=" << ShapeString(s.ssm_shape) << " " << DTypeName(s.ssm_dtype);
    }
    o << "  state=" << ConvStateBytes(i) + SsmStateBytes(i) << " B\n";
  }
  o << "kv page bytes:    " << KvPageBytes() << " (" << HumanBytes(KvPageBytes()) << ")\n";
  if (has_window()) {
    o << "  full-attention:  " << RecordBytes(Kind::kKV) << " ("
      << HumanBytes(RecordBytes(Kind::kKV)) << ", every page)\n";
    o << "  windowed:        " << RecordBytes(Kind::kWindowKV) << " ("
      << HumanBytes(RecordBytes(Kind::kWindowKV)) << ", the last " << WindowPages()
      << " pages before a reused depth: window " << WindowTokens() << " tokens)\n";
  }
  o << "kv bytes/token:   " << (page_size_tokens ? KvPageBytes() / page_size_tokens : 0) << "\n";
  o << "mamba slot bytes: " << MambaSlotBytes() << " (" << HumanBytes(MambaSlotBytes()) << ")\n";
  o << "fingerprint:      " << FingerprintHex() << "\n";
  return o.str();
}

bool operator==(const AttentionLayerSpec& a, const AttentionLayerSpec& b) {
  return a.layer_index == b.layer_index && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.dtype == b.dtype && a.sliding_window == b.sliding_window &&
         a.mla == b.mla && a.tp_replicas == b.tp_replicas;
}

bool operator==(const SsmLayerSpec& a, const SsmLayerSpec& b) {
  return a.layer_index == b.layer_index && a.block == b.block && a.conv_shape == b.conv_shape &&
         a.conv_dtype == b.conv_dtype && a.ssm_shape == b.ssm_shape && a.ssm_dtype == b.ssm_dtype;
}

bool operator==(const ModelLayout& a, const ModelLayout& b) {
  return a.model == b.model && a.num_layers == b.num_layers &&
         a.page_size_tokens == b.page_size_tokens && a.tp_rank == b.tp_rank &&
         a.tp_size == b.tp_size && a.attention_layers == b.attention_layers &&
         a.ssm_layers == b.ssm_layers;
}

}  // namespace cachepawl

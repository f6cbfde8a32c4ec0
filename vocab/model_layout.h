// ModelLayout: the shapes and element types of a model's cache, and what follows from them.
//
// A layout says, for one tensor-parallel rank, how many bytes one KV page (all attention
// layers, K and V, `page_size_tokens` tokens) and one Mamba state slot (all SSM layers, conv
// and SSM state) take, and how those bytes are arranged in a "page-first" record: the unit the
// host and disk tiers store and the copy engines move.
//
//   KV page      = for each attention layer a (in the order of `attention_layers`):
//                    K[a] : [page_size_tokens, num_kv_heads, head_dim] of dtype
//                    V[a] : same shape
//                  (what a block-contiguous device page holds: KSegment / VSegment)
//   Mamba record = for each SSM layer s (in the order of `ssm_layers`):
//                    conv[s] : conv_shape of conv_dtype (none for a lightning layer)
//                    ssm[s]  : ssm_shape  of ssm_dtype (none for a shortconv layer)
//
// Sliding-window layers (sliding_window > 0) are stored apart (docs/DESIGN.md, "Sliding-window
// layers"): a page is then two records, Kind::kKV with the K/V of the full-attention layers and
// Kind::kWindowKV with the K/V of the windowed layers, each in attention-layer order
// (KRecordSegment / VRecordSegment). A layout without windowed layers has one KV record, the
// whole KV page. A layout whose attention layers are all windowed has no kKV record at all.
//
// Segments are packed back to back (no padding); records are padded to 4 KiB by the tiers.
// The fingerprint is a SHA-256 of a canonical encoding of every field, so two layouts are
// interchangeable exactly when their fingerprints are equal. It is stored in every disk record.
//
// Thread safety: a ModelLayout is a value; const methods may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

// An attention layer's KV cache. Usual attention keeps K and V, each
// [page_size_tokens, num_kv_heads, head_dim] per page. Multi-head latent attention (mla: DeepSeek
// V2/V3, Kimi Linear) keeps one latent vector per token instead: head_dim is its width
// (kv_lora_rank + qk_rope_head_dim, the compressed KV then its rotary part, as vLLM and SGLang
// store it), num_kv_heads is 1 (every tensor-parallel rank holds the same latent), and the
// layer's V has 0 bytes: its KV is one tensor, one record segment.
struct AttentionLayerSpec {
  uint32_t layer_index = 0;   // position in the decoder stack (0-based)
  uint32_t num_kv_heads = 0;  // KV heads held by this tensor-parallel rank
  uint32_t head_dim = 0;
  DType dtype = DType::kBf16;
  uint32_t sliding_window = 0;  // tokens; 0 means full attention
  bool mla = false;             // one latent tensor (K), no V
  // How many ranks of the tensor-parallel group hold this layer's bytes identically: tp_size for
  // an MLA layer (every rank holds the whole latent), tp_size / H when the model has H < tp_size
  // KV heads (ranks r with the same r / tp_replicas hold the same head, as vLLM and SGLang
  // assign them), 1 when every rank holds its own heads. It divides tp_size (1 for tp_size 1).
  // ShardLayout sets it; a group store keeps a kind whose layers are all replicated once per
  // distinct share instead of once per rank (TpShares). A value larger than the truth makes
  // ranks load each other's bytes: write it by hand only for bytes that are equal.
  uint32_t tp_replicas = 1;
};

// A recurrent layer with a fixed-size per-sequence state. Mamba-1/2 keep a conv state and an
// SSM state; other recurrent blocks (RG-LRU, Gated DeltaNet, Kimi Delta Attention) map onto the
// same two tensors (`block` records which, and is part of the fingerprint). A "shortconv" layer
// (LFM2's gated short convolution) keeps a conv state only: its ssm_shape is empty and its SSM
// segment 0 bytes. A "lightning" layer (MiniMax's lightning attention: linear attention without
// a conv) keeps its state only: its conv_shape is empty and its conv segment 0 bytes.
struct SsmLayerSpec {
  uint32_t layer_index = 0;
  std::string block = "mamba2";      // mamba1, mamba2, rglru, gdn, kda, shortconv, lightning
  std::vector<uint64_t> conv_shape;  // e.g. {conv_dim, d_conv - 1}; {} for lightning
  DType conv_dtype = DType::kBf16;
  std::vector<uint64_t> ssm_shape;  // e.g. {nheads, head_dim, d_state}; {} for shortconv
  DType ssm_dtype = DType::kFp32;
};

// Where one tensor of a record lies inside it.
struct RecordSegment {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// One tensor of a record (or of a KV page): the layer it belongs to, which of the layer's two
// tensors it is, and where it lies.
struct LayerSegment {
  size_t layer = 0;     // index into attention_layers (K/V) or ssm_layers (conv/SSM state)
  bool second = false;  // V (or the SSM state) rather than K (or the conv state)
  RecordSegment segment;
};

struct ModelLayout {
  std::string model;               // e.g. "ai21labs/Jamba-v0.1"; part of the fingerprint
  uint32_t num_layers = 0;         // decoder layers in the whole model (>= every layer_index+1)
  uint32_t page_size_tokens = 16;  // tokens per KV page (and the hashing granularity)
  std::vector<AttentionLayerSpec> attention_layers;
  std::vector<SsmLayerSpec> ssm_layers;
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;

  // OK, or InvalidArgument naming the field and value at fault, e.g.
  // "attention_layers[3].num_kv_heads: 0 (must be > 0)". Checks: page size > 0, tp_rank <
  // tp_size, at least one layer, layer indices unique within each kind and < num_layers,
  // non-zero heads/dims/shapes (an empty ssm_shape for shortconv layers, a non-empty one for
  // every other block; an empty conv_shape for lightning layers, a non-empty one for every
  // other block), known dtypes and blocks, fp4 sizes a multiple of 16, and that no size
  // below overflows 64 bits. Every other method assumes Validate() returned OK.
  Status Validate() const;

  bool has_attention() const { return !attention_layers.empty(); }
  bool has_ssm() const { return !ssm_layers.empty(); }
  // Some attention layer has a sliding window (its KV is then stored as Kind::kWindowKV).
  bool has_window() const;
  // Whether the tiers hold records of `kind` for this layout: kKV when some attention layer has
  // full attention, kWindowKV when some has a window, kMamba when there are SSM layers.
  bool Stores(Kind kind) const;
  // The kind attention layer `a`'s K/V is stored as: kWindowKV when it has a window, else kKV.
  Kind AttentionKind(size_t attention_layer) const;
  // The largest window in tokens (0 without windowed layers), and the pages a load at a depth
  // needs of it: ceil(window / page_size_tokens).
  uint32_t WindowTokens() const;
  uint32_t WindowPages() const;

  // Bytes of K of one attention layer for one page (an MLA layer's latent).
  uint64_t KBytesPerPage(size_t attention_layer) const;
  // Bytes of V of one attention layer for one page: KBytesPerPage, or 0 for an MLA layer.
  uint64_t VBytesPerPage(size_t attention_layer) const;
  // Some attention layer is MLA (its KV one latent tensor).
  bool has_mla() const;
  // Bytes of one KV page: all attention layers, K and V (a device page; for layouts without
  // windowed layers also the kKV record).
  uint64_t KvPageBytes() const;
  // Bytes of one layer's conv / SSM state for one sequence (SSM: 0 for a shortconv layer; conv:
  // 0 for a lightning layer).
  uint64_t ConvStateBytes(size_t ssm_layer) const;
  uint64_t SsmStateBytes(size_t ssm_layer) const;
  // Bytes of one Mamba state record: all SSM layers, conv and SSM.
  uint64_t MambaSlotBytes() const;
  // Bytes of one record of `kind`: kKV the full-attention layers' K/V of a page (KvPageBytes()
  // without windowed layers), kWindowKV the windowed layers' K/V of a page, kMamba the state.
  // 0 when the layout does not store that kind.
  uint64_t RecordBytes(Kind kind) const;

  // Tensor-parallel shares (vocab/model_layout_group.cc). TpShares: how many distinct records of
  // `kind` the tp_size ranks hold: tp_size / R, where R is the gcd of tp_replicas over the
  // layers stored as `kind` (SSM layers: 1), so that ranks r and r' hold equal bytes of `kind`
  // whenever r / R == r' / R. TpShareOf: the share rank `rank` holds, rank / R (< TpShares).
  // A layout with tp_size 1 has one share of every kind.
  uint32_t TpShares(Kind kind) const;
  uint32_t TpShareOf(Kind kind, uint32_t rank) const;

  // An estimate of what prefilling a prompt costs, for the hybrid eviction policy's value per
  // byte: d tokens cost about per_token * d + per_token_squared * d^2 FLOPs. The layout has no
  // hidden size, so it is estimated per layer: 4 * num_kv_heads * head_dim for attention
  // layers (grouped-query attention with 4 query heads per KV head), half the SSM state's
  // channels (product of ssm_shape but its last dimension; conv_shape[0] for a shortconv layer)
  // for SSM layers (every recurrent block: Mamba, RG-LRU, Gated DeltaNet, KDA, lightning). An
  // MLA layer counts as attention with its latent as one KV head of head_dim values. Each layer
  // costs 24 h^2 per token (projections and MLP); a full-attention layer adds 2 h d^2 (scores and
  // values over the prefix), a windowed one 4 h w per token.
  struct PrefillCost {
    double per_token = 0;
    double per_token_squared = 0;
  };
  PrefillCost EstimatedPrefillCost() const;

  // Where K / V of attention layer `a` lie in the KV page (all attention layers).
  RecordSegment KSegment(size_t attention_layer) const;
  RecordSegment VSegment(size_t attention_layer) const;
  // Where K / V of attention layer `a` lie in the record of its kind (AttentionKind(a)); equal
  // to KSegment / VSegment for layouts without windowed layers.
  RecordSegment KRecordSegment(size_t attention_layer) const;
  RecordSegment VRecordSegment(size_t attention_layer) const;
  // Where conv / SSM state of SSM layer `s` lie in the Mamba record.
  RecordSegment ConvSegment(size_t ssm_layer) const;
  RecordSegment SsmSegment(size_t ssm_layer) const;
  // Every tensor of a record of `kind`, in record order: K then V of each attention layer
  // stored as `kind` (KRecordSegment / VRecordSegment; an MLA layer's empty V is listed, with 0
  // bytes), or conv then SSM state of each SSM layer (ConvSegment / SsmSegment; a shortconv
  // layer's empty SSM state is listed, with 0 bytes).
  // Empty when the layout does not store `kind`.
  std::vector<LayerSegment> RecordSegments(Kind kind) const;
  // K then V of every attention layer in a whole KV page (KSegment / VSegment): what a
  // block-contiguous device page holds.
  std::vector<LayerSegment> KvPageSegments() const;

  // SHA-256 of the canonical encoding (version-tagged: version 1, version 2 for layouts with
  // windowed layers, whose records are arranged differently since windowed KV is kept apart, and
  // version 3 for layouts with MLA layers, which encodes each attention layer's mla flag).
  std::array<uint8_t, 32> Fingerprint() const;
  std::string FingerprintHex() const;

  // A multi-line, human-readable description: layers, dtypes, derived sizes, fingerprint.
  std::string Describe() const;
};

// The layout of the records a store for a tensor-parallel group keeps in its tiers (host, disk,
// remote): one record of each kind holds every distinct share of it, share after share (rank r's
// at rank.TpShareOf(kind, r) * rank.RecordBytes(kind)): tp_size records for a kind every rank
// holds its own of, one for a kind every rank holds equally (MLA latent KV). Its shapes are the
// rank's widened TpShares(kind) times (KV heads, conv and state channels), so that its
// RecordBytes are TpShares(kind) times the rank's; its tp_size is the rank's and its tp_rank 0,
// so any rank's layout gives the same group layout, and its fingerprint is no whole model's and
// no rank's but rank 0's when every kind has one share (then rank 0's records are the group's).
// A layout with tp_size 1 is its own group layout.
// InvalidArgument when the widened sizes overflow (ModelLayout::Validate).
[[nodiscard]] StatusOr<ModelLayout> GroupLayout(const ModelLayout& rank);

// ---- Files (vocab/layout_json.cc) ----

// The schema is in docs/MODELS.md. "model" and "num_layers" are required, "page_size_tokens"
// defaults to 16, "tp_rank"/"tp_size" to 0/1; unknown and duplicate keys are errors.

// Parses a layout from JSON text. InvalidArgument naming the key path and value (e.g.
// "ssm_layers[2].ssm_dtype: 'fp13' (unknown dtype; ...)") or, for syntax errors, the line and
// column. The result is validated.
StatusOr<ModelLayout> ParseLayoutJson(std::string_view json_text);
// The canonical JSON form of a layout, one layer a line (ParseLayoutJson(LayoutToJson(l)) == l
// for every valid l).
std::string LayoutToJson(const ModelLayout& layout);
// Reads and parses a JSON layout file; every error is prefixed "layout file PATH: ". NotFound
// when the file does not exist. A file without "page_size_tokens" gets 16, or
// `default_page_size_tokens`.
StatusOr<ModelLayout> LoadLayoutFile(const std::string& path);
StatusOr<ModelLayout> LoadLayoutFile(const std::string& path, uint32_t default_page_size_tokens);
// (Built-in presets, and a name that is a preset or a file: layouts/layout_presets.h.)
bool operator==(const AttentionLayerSpec& a, const AttentionLayerSpec& b);
bool operator==(const SsmLayerSpec& a, const SsmLayerSpec& b);
bool operator==(const ModelLayout& a, const ModelLayout& b);

}  // namespace cachepawl

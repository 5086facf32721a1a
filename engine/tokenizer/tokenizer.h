// kvb::tok::Tokenizer — Hugging Face `tokenizer.json` compatible tokenizer.
//
// Must equal PyPI `tokenizers` token-for-token (tests/tokenizer compares against committed
// goldens made by tools/gen_tokenizer_goldens.py). Supports BPE with a byte-level
// pre-tokenizer (Qwen2/3, Llama-3, GPT-2) and SentencePiece-style BPE with byte fallback
// (Llama-2, stories260K), with the normalizers, pre-tokenizers, post-processors, decoders and
// added tokens those files use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::tok {

class TokenizerImpl;

/// A loaded tokenizer. Immutable after construction; encode/decode are thread-safe.
class Tokenizer {
 public:
  /// Loads `tokenizer.json`. Throws kvb::Error naming the file and the JSON field on malformed
  /// input (bad JSON, unknown model type, merges naming unknown tokens, ...).
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  /// Builds from an in-memory tokenizer.json document (GGUF loading converts its tokenizer
  /// metadata to this shape). `origin` names the source in errors. Throws kvb::Error.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& origin,
                             const nlohmann::json& tokenizer_config = nlohmann::json::object());
  /// Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json (for bos/eos token
  /// names). Throws kvb::Error.
  static Tokenizer from_dir(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text`, as HF `tokenizer.encode(text, add_special_tokens=...)`: normalizer,
  /// pre-tokenizer, model, and (with add_special_tokens) the post-processor (e.g. BOS).
  /// Special/added tokens written inside `text` are recognised as in HF.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// Text of `ids`, as HF `tokenizer.decode(ids, skip_special_tokens=...)`.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  /// The vocabulary string of one id (e.g. "Ġthe"); empty for an out-of-range id.
  std::string id_to_piece(int32_t id) const;
  /// The id of a vocabulary or added-token string, or std::nullopt.
  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  /// Number of ids (model vocabulary plus added tokens): max id + 1. Added-token ids follow
  /// HF's AddedVocabulary rules (a token already in the model vocabulary takes that id).
  size_t vocab_size() const;
  /// True for added tokens marked `special` in tokenizer.json.
  bool is_special(int32_t id) const;
  /// BOS id: the first id the post-processor prepends (what encode(text, true) starts with),
  /// else tokenizer_config.json's `bos_token` looked up with piece_to_id; nullopt if neither.
  /// (These differ only for odd files: stories260K's template prepends id 1 while its
  /// `bos_token` "<s>" is the added token 512, as in HF; the model's BOS is 1.)
  std::optional<int32_t> bos_id() const;
  /// EOS id: tokenizer_config.json's `eos_token` looked up with piece_to_id (as transformers'
  /// eos_token_id), nullopt when absent. Generation should prefer generation_config.json.
  std::optional<int32_t> eos_id() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
  friend class TokenizerImpl;
};

/// Streaming detokeniser: feed ids one at a time, get back text that is safe to print now.
/// Never emits half a UTF-8 character; output concatenated equals decode(all ids) (for the
/// decoders of the supported tokenizers).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false);
  /// Appends one id; returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  /// Returns any text still held back (call once at the end of generation).
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_ before this index are fully emitted
  std::string emitted_;       // decode(ids_[prefix_offset_ .. read_offset_))
  size_t read_offset_ = 0;
};

}  // namespace kvb::tok

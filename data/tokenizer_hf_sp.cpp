#include "data/tokenizer_hf_sp.h"

#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

using json = nlohmann::json;
constexpr const char* kMeta = "\xE2\x96\x81";  // U+2581

std::string type_of(const json& obj) {
  return obj.is_object() && obj.contains("type") && obj["type"].is_string()
             ? obj["type"].get<std::string>()
             : std::string("?");
}

}  // namespace

Metaspace read_metaspace(const json& p, const std::string& path) {
  Metaspace m;
  m.replacement = p.value("replacement", std::string(kMeta));
  MT_INPUT_CHECK(m.replacement == kMeta, "'", path, "': Metaspace replacement ",
                 json(m.replacement).dump(), " is not supported (U+2581 only)");
  if (p.contains("prepend_scheme")) {
    const std::string scheme = p.value("prepend_scheme", std::string());
    MT_INPUT_CHECK(scheme == "always" || scheme == "first" || scheme == "never", "'", path,
                   "': Metaspace prepend_scheme '", scheme, "' (always, first or never)");
    m.prepend = scheme == "always"  ? Metaspace::Prepend::Always
                : scheme == "first" ? Metaspace::Prepend::First
                                    : Metaspace::Prepend::Never;
  } else {  // older files: add_prefix_space
    m.prepend =
        p.value("add_prefix_space", true) ? Metaspace::Prepend::Always : Metaspace::Prepend::Never;
  }
  m.split = p.value("split", true);
  return m;
}

std::optional<LiteralSplit> read_literal_split(const json& p, const std::string& path) {
  if (!p.is_object() || p.value("type", std::string()) != "Split") return std::nullopt;
  const json pattern = p.value("pattern", json());
  MT_INPUT_CHECK(pattern.is_object() && pattern.contains("String") && pattern["String"].is_string(),
                 "'", path, "': pre_tokenizer Split with pattern ", pattern.dump(),
                 " is not supported without a byte-level pre-tokenizer (a literal String only)");
  LiteralSplit split{pattern["String"].get<std::string>()};
  MT_INPUT_CHECK(!split.delimiter.empty(), "'", path, "': pre_tokenizer Split on an empty string");
  const std::string behavior = p.value("behavior", std::string());
  MT_INPUT_CHECK(behavior == "MergedWithPrevious" && !p.value("invert", false), "'", path,
                 "': pre_tokenizer Split behavior '", behavior, "'",
                 p.value("invert", false) ? " with invert" : "",
                 " is not supported on a literal string (MergedWithPrevious, not inverted)");
  return split;
}

CharBpe::Options read_char_bpe_options(const json& model, const std::string& path) {
  CharBpe::Options o;
  o.byte_fallback = model.value("byte_fallback", false);
  o.fuse_unk = model.value("fuse_unk", false);
  o.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    MT_INPUT_CHECK(model["unk_token"].is_string(), "'", path, "': model.unk_token is not a string");
    o.unk_token = model["unk_token"].get<std::string>();
  }
  return o;
}

SpDecoder read_sp_decoder(const json& d, const std::string& path) {
  SpDecoder out;
  if (d.is_null()) return out;
  auto fail = [&](const std::string& what) {
    return InputError(concat("'", path, "': decoder ", what,
                             " is not supported with SentencePiece-style BPE (Metaspace, or a "
                             "Sequence of Replace(\"\u2581\" -> \" \"), ByteFallback, Fuse, "
                             "Strip(\" \"))"));
  };
  const std::string type = type_of(d);
  if (type == "Metaspace") {
    out.metaspace_to_space = true;
    const Metaspace m = read_metaspace(d, path);
    out.strip_leading_spaces = m.prepend == Metaspace::Prepend::Never ? 0 : 1;
    return out;
  }
  if (type != "Sequence" || !d.contains("decoders") || !d["decoders"].is_array()) throw fail(type);
  for (const json& step : d["decoders"]) {
    const std::string t = type_of(step);
    if (t == "ByteFallback" || t == "Fuse") continue;
    if (t == "Replace" && step.contains("pattern") && step["pattern"].is_object() &&
        step["pattern"].value("String", std::string()) == kMeta &&
        step.value("content", "") == " ") {
      out.metaspace_to_space = true;
      continue;
    }
    if (t == "Strip" && step.value("content", std::string()) == " " && step.value("stop", 0) == 0) {
      out.strip_leading_spaces = step.value("start", int64_t{0});
      continue;
    }
    throw fail(step.dump().substr(0, 120));
  }
  return out;
}

std::string decode_sp(const SpDecoder& decoder, const std::vector<const std::string*>& pieces,
                      const std::vector<bool>& is_added) {
  std::string text;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const std::string& p = *pieces[k];
    if (is_added[k] || !decoder.metaspace_to_space) {
      text += p;
      continue;
    }
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, kMeta) == 0) {
        text.push_back(' ');
        i += 3;
      } else {
        text.push_back(p[i++]);
      }
    }
  }
  size_t cut = 0;
  while (cut < text.size() && cut < static_cast<size_t>(decoder.strip_leading_spaces) &&
         text[cut] == ' ')
    ++cut;
  return unicode::replace_invalid_utf8(std::string_view(text).substr(cut));
}

}  // namespace megatron::data

#include "megatron/config/parse.h"

#include <algorithm>
#include <optional>
#include <type_traits>

#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config::detail {
namespace {

[[noreturn]] void fail(const Node& n, const std::string& key, const std::string& msg) {
  throw InputError(concat(n.origin.str(), ": ", key, ": ", msg));
}

// Reads the keys of one map, remembering which were used so that leftovers are reported.
class MapReader {
 public:
  // `node` may be null (section absent); `path` is the map's key path ("model", "data.tokenizer").
  MapReader(const Node* node, std::string path, KeyOrigins& origins)
      : node_(node && !node->is_null() ? node : nullptr),
        path_(std::move(path)),
        origins_(origins) {
    if (node_ && node_->kind != Node::Kind::Map)
      fail(*node_, path_, concat("expected a map of keys, got ", node_->describe()));
  }

  std::string key_path(const std::string& key) const { return path_ + "." + key; }

  // The value of `key`, or null when absent or null. Records where the key came from.
  const Node* take(const std::string& key) {
    known_.push_back(key);
    if (!node_) return nullptr;
    const Node* v = node_->find(key);
    if (!v) return nullptr;
    origins_.by_key[key_path(key)] = v->origin.str();
    return v->is_null() ? nullptr : v;
  }

  [[noreturn]] void missing(const std::string& key) const {
    // Present but null (`key: null`, `--set key=`): where it was emptied, not the section's line.
    const Node* emptied = node_ ? node_->find(key) : nullptr;
    std::string where = emptied ? emptied->origin.str()
                        : node_ ? node_->origin.str()
                                : origins_.fallback;
    throw InputError(concat(where, ": ", key_path(key), ": required key is missing"));
  }

  template <typename T>
  void get(const std::string& key, T& out) {
    if (const Node* v = take(key)) convert(*v, key_path(key), out);
  }
  template <typename T>
  void get(const std::string& key, std::optional<T>& out) {
    if (const Node* v = take(key)) {
      T value{};
      convert(*v, key_path(key), value);
      out = value;
    } else {
      out.reset();
    }
  }
  template <typename T>
  void required(const std::string& key, T& out) {
    const Node* v = take(key);
    if (!v) missing(key);
    convert(*v, key_path(key), out);
  }

  // Reports keys that no reader asked for, with a "did you mean" for near misses.
  void finish() const {
    if (!node_) return;
    for (const auto& [key, value] : node_->entries) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string best;
      size_t best_d = 3;
      for (const auto& k : known_) {
        size_t d = edit_distance(key, k);
        if (d < best_d) best_d = d, best = k;
      }
      std::string known;
      for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
      fail(value, key_path(key),
           concat("unknown key", best.empty() ? "" : concat(" (did you mean '", best, "'?)"),
                  "; known keys: ", known));
    }
  }

  static void convert(const Node& v, const std::string& key, int64_t& out) {
    expect_plain_scalar(v, key, "an integer");
    if (auto why = parse_int64(v.scalar, out); !why.empty())
      fail(v, key, concat("expected an integer, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, uint64_t& out) {
    expect_plain_scalar(v, key, "a non-negative integer");
    if (auto why = parse_uint64(v.scalar, out); !why.empty())
      fail(v, key, concat("expected a non-negative integer, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, double& out) {
    expect_plain_scalar(v, key, "a number");
    if (auto why = parse_double(v.scalar, out); !why.empty())
      fail(v, key, concat("expected a number, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, bool& out) {
    expect_plain_scalar(v, key, "true or false");
    if (auto why = parse_bool(v.scalar, out); !why.empty())
      fail(v, key, concat("expected true or false, got '", v.scalar, "'"));
  }
  static void convert(const Node& v, const std::string& key, std::string& out) {
    if (v.kind != Node::Kind::Scalar) fail(v, key, concat("expected a string, got ", v.describe()));
    out = v.scalar;
  }
  // An integer N or a list of 0/1 per layer (model.moe_layer_freq).
  static void convert(const Node& v, const std::string& key, LayerFrequency& out) {
    out = {};
    if (v.kind == Node::Kind::Seq)
      convert(v, key, out.pattern);
    else if (v.kind != Node::Kind::Scalar || v.quoted || !parse_int64(v.scalar, out.every).empty())
      fail(v, key, concat("expected an integer or a list of 0/1 per layer, got ", v.describe()));
  }
  // A list of strings, numbers or integers, each element converted as a scalar of its type.
  template <typename T>
  static void convert(const Node& v, const std::string& key, std::vector<T>& out) {
    if (v.kind != Node::Kind::Seq)
      fail(v, key, concat("expected a list of ", list_of<T>(), ", got ", v.describe()));
    out.clear();
    for (size_t i = 0; i < v.items.size(); ++i) {
      T x{};
      convert(v.items[i], concat(key, "[", i, "]"), x);
      out.push_back(x);
    }
  }
  template <typename T>
  static const char* list_of() {
    if constexpr (std::is_same_v<T, std::string>) return "strings";
    if constexpr (std::is_same_v<T, double>) return "numbers";
    return "integers";
  }

 private:
  static void expect_plain_scalar(const Node& v, const std::string& key, const char* what) {
    if (v.kind != Node::Kind::Scalar || v.quoted)
      fail(v, key, concat("expected ", what, ", got ", v.describe()));
  }

  const Node* node_;
  std::string path_;
  KeyOrigins& origins_;
  std::vector<std::string> known_;
};

// Walks a section's fields() (recipe.h) over the keys of its map.
class ParseVisitor {
 public:
  ParseVisitor(MapReader& reader, KeyOrigins& origins) : r_(reader), origins_(origins) {}

  template <typename T>
  void operator()(const char* key, T& out, const KeyInfo& info = {}) {
    if (info.required)
      r_.required(key, out);
    else
      r_.get(key, out);
  }
  // A named option: its name, else an error listing the names.
  template <Option E>
  void operator()(const char* key, E& out, const KeyInfo& info = {}) {
    if (!read_option(key, out) && info.required) r_.missing(key);  // absent: the default
  }
  // Whether the key is set; if so its option into out.
  template <Option E>
  bool read_option(const char* key, E& out) {
    const Node* v = r_.take(key);
    if (v == nullptr) return false;
    std::string name;
    MapReader::convert(*v, r_.key_path(key), name);
    const std::optional<E> parsed = parse_option<E>(name);
    if (!parsed)
      fail(*v, r_.key_path(key),
           concat("must be one of ", option_list<E>(), " (got '", name, "')"));
    out = *parsed;
    return true;
  }
  template <typename T>
  void operator()(const char* key, std::optional<T>& out, const KeyInfo& = {}) {
    r_.get(key, out);  // unset when absent: never required
  }
  template <Option E>
  void operator()(const char* key, std::optional<E>& out, const KeyInfo& info = {}) {
    out.reset();  // absent or null: unset (a recipe built in code may leave a required one so)
    E value{};
    if (read_option(key, value))
      out = value;
    else if (info.required)
      r_.missing(key);
  }
  void operator()(const char* key, int64_t& out, const KeyInfo& info = {}) {
    if (!info.zero_is_auto) {
      if (info.required)
        r_.required(key, out);
      else
        r_.get(key, out);
      return;
    }
    if (const Node* v = r_.take(key)) {
      if (v->kind == Node::Kind::Scalar && v->scalar == "auto")
        out = 0;
      else if (v->kind != Node::Kind::Scalar || v->quoted || !parse_int64(v->scalar, out).empty())
        fail(*v, r_.key_path(key), concat("expected an integer or auto, got ", v->describe()));
    }
  }
  // A list of {path, weight} maps or of paths, or one path.
  void operator()(const char* key, std::vector<DatasetEntry>& out, const KeyInfo& = {}) {
    out.clear();
    const std::string path = r_.key_path(key);
    const Node* v = r_.take(key);
    if (!v) return;
    if (v->kind == Node::Kind::Scalar) {
      out.push_back({v->scalar, 1.0});
      origins_.by_key[path + "[0].path"] = v->origin.str();
    } else if (v->kind == Node::Kind::Seq) {
      for (size_t i = 0; i < v->items.size(); ++i) {
        const Node& item = v->items[i];
        const std::string item_path = concat(path, "[", i, "]");
        DatasetEntry e;
        if (item.kind == Node::Kind::Scalar) {
          e.path = item.scalar;
          origins_.by_key[item_path + ".path"] = item.origin.str();
        } else if (item.kind == Node::Kind::Map) {
          MapReader m(&item, item_path, origins_);
          ParseVisitor entry(m, origins_);
          DatasetEntry::fields(e, entry);
          m.finish();
        } else {
          fail(item, item_path,
               concat("expected {path: ..., weight: ...} or a path, got ", item.describe()));
        }
        out.push_back(e);
      }
    } else {
      fail(*v, path, concat("expected a list of {path, weight} or a path, got ", v->describe()));
    }
  }
  template <typename Section>
  void section(const char* key, Section& out) {
    MapReader child(r_.take(key), r_.key_path(key), origins_);
    ParseVisitor v(child, origins_);
    Section::fields(out, v);
    child.finish();
  }

 private:
  MapReader& r_;
  KeyOrigins& origins_;
};

// The section names, in order.
struct SectionNames {
  std::vector<std::string> names;
  template <typename Section>
  void section(const char* key, Section&) {
    names.push_back(key);
  }
};

// The top level: each section's map.
struct RootVisitor {
  const Node& root;
  KeyOrigins& origins;
  template <typename Section>
  void section(const char* key, Section& out) {
    MapReader r(root.find(key), key, origins);
    ParseVisitor v(r, origins);
    Section::fields(out, v);
    r.finish();
  }
};

}  // namespace

Recipe parse_tree(const Node& root, const std::string& top_file) {
  Recipe r;
  r.origins.fallback = top_file;
  SectionNames collect;
  Recipe::sections(r, collect);
  const std::vector<std::string>& sections = collect.names;
  for (const auto& [key, value] : root.entries) {
    if (std::find(sections.begin(), sections.end(), key) != sections.end()) continue;
    std::string best;
    for (const auto& s : sections)
      if (edit_distance(key, s) <= 2) best = s;
    std::string list;
    for (const auto& s : sections) list += (list.empty() ? "" : ", ") + s;
    fail(value, key,
         concat("unknown section", best.empty() ? "" : concat(" (did you mean '", best, "'?)"),
                "; known sections: extends, ", list));
  }
  RootVisitor v{root, r.origins};
  Recipe::sections(r, v);
  return r;
}

}  // namespace megatron::config::detail

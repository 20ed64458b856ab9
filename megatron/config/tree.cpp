#include "megatron/config/tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config::detail {

std::string Origin::str() const {
  if (!override_text.empty()) return concat(file, " (--set ", override_text, ")");
  if (line >= 0) return concat(file, ":", line + 1);
  return file;
}

const Node* Node::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

Node* Node::find(const std::string& key) {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

std::string Node::describe() const {
  switch (kind) {
    case Kind::Null:
      return "null";
    case Kind::Seq:
      return "a list";
    case Kind::Map:
      return "a map";
    case Kind::Scalar:
      return quoted ? concat("the string \"", scalar, "\"") : concat("'", scalar, "'");
  }
  return {};
}

namespace {

// Recipes are small; these limits turn recursive aliases (`a: &x [*x]`) and alias bombs into
// errors instead of a stack overflow or an out-of-memory.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 1'000'000;

struct Budget {
  size_t nodes = 0;
};

// Converts a yaml-cpp node. Its origin line is that of the key holding it (yaml-cpp's marks for
// null values point past the key); `path` names it in errors.
Node convert(const YAML::Node& y, Origin origin, const std::string& path, Budget& budget,
             int depth) {
  MT_INPUT_CHECK(depth <= kMaxDepth, origin.str(), ": ", path, ": nested more than ", kMaxDepth,
                 " levels deep (a recursive alias?)");
  MT_INPUT_CHECK(++budget.nodes <= kMaxNodes, origin.str(), ": more than ", kMaxNodes,
                 " YAML nodes (aliases expanding too far?)");
  Node n;
  n.origin = std::move(origin);
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = Node::Kind::Null;
      break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Kind::Scalar;
      n.scalar = y.Scalar();
      n.quoted = y.Tag() != "?" && !y.Tag().empty();
      break;
    case YAML::NodeType::Sequence: {
      n.kind = Node::Kind::Seq;
      size_t i = 0;
      for (const auto& item : y) {
        Origin o = n.origin;
        if (o.override_text.empty() && !item.Mark().is_null() && !item.IsNull())
          o.line = item.Mark().line;
        n.items.push_back(convert(item, o, concat(path, "[", i++, "]"), budget, depth + 1));
      }
      break;
    }
    case YAML::NodeType::Map:
      n.kind = Node::Kind::Map;
      for (auto it = y.begin(); it != y.end(); ++it) {
        Origin o = n.origin;
        if (o.override_text.empty() && !it->first.Mark().is_null()) o.line = it->first.Mark().line;
        MT_INPUT_CHECK(it->first.IsScalar(), o.str(), ": ", path.empty() ? "" : path + ": ",
                       "map keys must be plain names");
        std::string key = it->first.Scalar();
        std::string full = path.empty() ? key : path + "." + key;
        MT_INPUT_CHECK(n.find(key) == nullptr, o.str(), ": ", full, ": duplicate key");
        n.entries.emplace_back(key, convert(it->second, o, full, budget, depth + 1));
      }
      break;
  }
  return n;
}

}  // namespace

namespace {

// Events are only counted: the documents come from YAML::Load.
class IgnoreEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The documents in `text`, counting at most two: yaml-cpp's LoadAll loops forever on some
// malformed input (its parser keeps reporting documents; found by fuzz_recipe).
int count_documents(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  IgnoreEvents events;
  int docs = 0;
  while (docs < 2 && parser.HandleNextDocument(events)) ++docs;
  return docs;
}

}  // namespace

Node parse_yaml(const std::string& text, const std::string& file) {
  std::vector<YAML::Node> docs;
  try {
    const int count = count_documents(text);
    MT_INPUT_CHECK(count <= 1, file,
                   ": expected one YAML document, found more (a '---' separator, or text the "
                   "YAML parser cannot end the document at)");
    if (count == 1) docs.push_back(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) throw InputError(concat(file, ": malformed YAML: ", e.msg));
    throw InputError(
        concat(file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": malformed YAML: ", e.msg));
  }
  MT_INPUT_CHECK(docs.size() <= 1, file, ": expected one YAML document, found ", docs.size());
  Origin origin{file, 0, ""};
  if (docs.empty() || docs[0].IsNull()) {
    Node empty;
    empty.kind = Node::Kind::Map;
    empty.origin = origin;
    return empty;
  }
  MT_INPUT_CHECK(docs[0].IsMap(), file,
                 ": the top level must be a map of sections (model:, "
                 "training:, ...), got ",
                 docs[0].IsSequence() ? "a list" : "a scalar");
  Budget budget;
  return convert(docs[0], origin, "", budget, 0);
}

Node parse_override_value(const std::string& value, const Origin& origin) {
  YAML::Node y;
  try {
    y = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw InputError(concat("--set ", origin.override_text, ": cannot parse the value '", value,
                            "' as YAML: ", e.msg));
  }
  Budget budget;
  return convert(y, origin, "", budget, 0);
}

void merge_into(Node& base, const Node& child) {
  if (base.kind != Node::Kind::Map || child.kind != Node::Kind::Map) {
    base = child;
    return;
  }
  base.origin = child.origin;
  for (const auto& [key, value] : child.entries) {
    if (Node* existing = base.find(key))
      merge_into(*existing, value);
    else
      base.entries.emplace_back(key, value);
  }
}

void apply_override(Node& root, const std::string& text, const std::string& top_file) {
  auto eq = text.find('=');
  MT_INPUT_CHECK(eq != std::string::npos && eq > 0, "--set ", text,
                 ": expected section.key=value (e.g. training.train_iters=100)");
  std::string key = text.substr(0, eq);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    MT_INPUT_CHECK(!p.empty() && p.find_first_of(" \t") == std::string::npos, "--set ", text,
                   ": malformed key '", key, "' (expected section.key=value)");
  MT_INPUT_CHECK(parts[0] != "extends", "--set ", text,
                 ": extends cannot be overridden (it is resolved before overrides)");
  MT_INPUT_CHECK(parts.size() >= 2, "--set ", text, ": '", key,
                 "' is a whole section; set one of its keys (e.g. ", key, ".<key>=value)");

  Origin origin{top_file, -1, text};
  Node value = parse_override_value(text.substr(eq + 1), origin);

  Node* cur = &root;
  std::string walked;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    bool last = i + 1 == parts.size();
    if (cur->kind == Node::Kind::Null) {
      cur->kind = Node::Kind::Map;
      cur->origin = origin;
    }
    Node* next = nullptr;
    if (cur->kind == Node::Kind::Map) {
      next = cur->find(part);
      if (!next) {
        cur->entries.emplace_back(part, Node{});
        next = &cur->entries.back().second;
        next->origin = origin;
      }
    } else if (cur->kind == Node::Kind::Seq) {
      int64_t index = -1;
      MT_INPUT_CHECK(parse_int64(part, index).empty() && index >= 0 &&
                         static_cast<size_t>(index) < cur->items.size(),
                     "--set ", text, ": ", walked, " is a list of ", cur->items.size(), " items; '",
                     part, "' is not an index into it");
      next = &cur->items[static_cast<size_t>(index)];
    } else {
      throw InputError(concat("--set ", text, ": ", walked, " is a value (", cur->describe(),
                              "), not a map; cannot set '", key, "'"));
    }
    walked += (walked.empty() ? "" : ".") + part;
    if (last) *next = value;
    cur = next;
  }
}

}  // namespace megatron::config::detail

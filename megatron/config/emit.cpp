// Recipe -> YAML / JSON. Every key is written (defaults included) so the output is the complete,
// resolved run description; parse_recipe_string(to_yaml()) gives back an equal Recipe.
#include <sstream>

#include "megatron/config/recipe.h"
#include "megatron/config/scalar.h"

namespace megatron::config {
namespace {

using detail::format_double;
using detail::yaml_quote;

class YamlWriter {
 public:
  void section(const std::string& name) {
    out_ << std::string(indent_, ' ') << name << ":\n";
    indent_ += 2;
  }
  void end() { indent_ -= 2; }
  void kv(const std::string& key, const std::string& value, const std::string& comment = "") {
    out_ << std::string(indent_, ' ') << key << ": " << value;
    if (!comment.empty()) out_ << "  # " << comment;
    out_ << "\n";
  }
  void raw(const std::string& line) { out_ << std::string(indent_, ' ') << line << "\n"; }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  int indent_ = 0;
};

std::string str(const std::string& s) { return s.empty() ? "null" : yaml_quote(s); }
std::string str(int64_t v) { return std::to_string(v); }
std::string str(uint64_t v) { return std::to_string(v); }
std::string str(double v) { return format_double(v); }
std::string str(bool v) { return v ? "true" : "false"; }
template <Option E>
std::string str(E v) {
  return yaml_quote(std::string(option_name(v)));
}
template <typename T>
std::string str(const std::optional<T>& v) {
  return v ? str(*v) : "null";
}

nlohmann::json js(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}
template <Option E>
nlohmann::json js_value(E v) {
  return nlohmann::json(std::string(option_name(v)));
}
template <typename T>
requires(!Option<T>) nlohmann::json js_value(const T& v) { return nlohmann::json(v); }
template <typename T>
nlohmann::json js(const std::optional<T>& v) {
  return v ? js_value(*v) : nlohmann::json(nullptr);
}

// Writes a section's fields() (recipe.h) as YAML: every key, defaults included.
struct YamlVisitor {
  YamlWriter& w;
  void operator()(const char* key, const std::string& v, const KeyInfo& i = {}) {
    w.kv(key, i.keep_empty ? yaml_quote(v) : str(v), i.note);
  }
  void operator()(const char* key, int64_t v, const KeyInfo& i = {}) {
    w.kv(key, i.zero_is_auto && v == 0 ? "auto" : str(v), i.note);
  }
  template <Option E>
  void operator()(const char* key, const E& v, const KeyInfo& i = {}) {
    w.kv(key, yaml_quote(std::string(option_name(v))), i.note);
  }
  template <typename T>
  void operator()(const char* key, const T& v, const KeyInfo& i = {}) {
    w.kv(key, str(v), i.note);
  }
  void operator()(const char* key, const std::vector<std::string>& v, const KeyInfo& i = {}) {
    std::string list;
    for (const std::string& s : v) list += (list.empty() ? "" : ", ") + yaml_quote(s);
    w.kv(key, "[" + list + "]", i.note);
  }
  void operator()(const char* key, const std::vector<double>& v, const KeyInfo& i = {}) {
    std::string list;
    for (double x : v) list += (list.empty() ? "" : ", ") + str(x);
    w.kv(key, v.empty() ? "null" : "[" + list + "]", i.note);
  }
  void operator()(const char* key, const std::vector<int64_t>& v, const KeyInfo& i = {}) {
    std::string list;
    for (int64_t n : v) list += (list.empty() ? "" : ", ") + std::to_string(n);
    w.kv(key, v.empty() ? "null" : "[" + list + "]", i.note);
  }
  void operator()(const char* key, const LayerFrequency& f, const KeyInfo& i = {}) {
    if (f.pattern.empty())
      (*this)(key, f.every, i);
    else
      (*this)(key, f.pattern, i);
  }
  void operator()(const char* key, const std::vector<DatasetEntry>& entries, const KeyInfo& = {}) {
    if (entries.empty()) {
      w.kv(key, "[]");
      return;
    }
    w.section(key);
    for (const auto& e : entries) {
      w.raw("- path: " + str(e.path));
      w.raw("  weight: " + str(e.weight));
    }
    w.end();
  }
  template <typename Section>
  void section(const char* key, const Section& s) {
    w.section(key);
    Section::fields(s, *this);
    w.end();
  }
};

// The same keys as JSON: empty strings and unset optionals are null.
struct JsonVisitor {
  nlohmann::json& j;
  void operator()(const char* key, const std::string& v, const KeyInfo& i = {}) {
    j[key] = i.keep_empty ? nlohmann::json(v) : js(v);
  }
  void operator()(const char* key, int64_t v, const KeyInfo& i = {}) {
    j[key] = i.zero_is_auto && v == 0 ? nlohmann::json("auto") : nlohmann::json(v);
  }
  template <Option E>
  void operator()(const char* key, const E& v, const KeyInfo& = {}) {
    j[key] = std::string(option_name(v));
  }
  template <typename T>
  void operator()(const char* key, const T& v, const KeyInfo& = {}) {
    j[key] = v;
  }
  template <typename T>
  void operator()(const char* key, const std::optional<T>& v, const KeyInfo& = {}) {
    j[key] = js(v);
  }
  void operator()(const char* key, const std::vector<int64_t>& v, const KeyInfo& = {}) {
    j[key] = v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v);
  }
  void operator()(const char* key, const std::vector<double>& v, const KeyInfo& = {}) {
    j[key] = v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v);
  }
  void operator()(const char* key, const std::vector<std::string>& v, const KeyInfo& = {}) {
    j[key] = v;
  }
  void operator()(const char* key, const LayerFrequency& f, const KeyInfo& = {}) {
    j[key] = f.pattern.empty() ? nlohmann::json(f.every) : nlohmann::json(f.pattern);
  }
  void operator()(const char* key, const std::vector<DatasetEntry>& entries, const KeyInfo& = {}) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries) list.push_back({{"path", e.path}, {"weight", e.weight}});
    j[key] = list;
  }
  template <typename Section>
  void section(const char* key, const Section& s) {
    nlohmann::json sub = nlohmann::json::object();
    JsonVisitor v{sub};
    Section::fields(s, v);
    j[key] = sub;
  }
};

}  // namespace

std::string Recipe::to_yaml() const {
  YamlWriter w;
  if (!source_path.empty()) w.raw("# Resolved recipe; source: " + source_path);
  YamlVisitor v{w};
  sections(*this, v);
  return w.str();
}

nlohmann::json Recipe::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  JsonVisitor v{j};
  sections(*this, v);
  return j;
}

}  // namespace megatron::config

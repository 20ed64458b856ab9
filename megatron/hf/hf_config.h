#pragma once
// A Hugging Face config.json, read strictly: typed getters whose errors name the file, the key
// and the value, and a check that every key present is one the architecture's converter
// understands (an unknown key may be a feature it does not implement, so it is an error, not a
// silent difference in the converted model).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace megatron::hf {

class ConfigJson {
 public:
  static ConfigJson load(const std::string& path);  // InputError naming the file
  ConfigJson(nlohmann::json j, std::string path);

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return j_; }
  bool has(const std::string& key) const;  // present and not null

  int64_t integer(const std::string& key) const;  // required
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number_or(const std::string& key, double fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  // The architecture: config.json's "architectures" (exactly one name).
  std::string architecture() const;

  // Every key must be in `known` (keys that the converter reads or checks) or in the generic
  // set of keys that do not change the weights or the forward pass (token ids, dropout rates,
  // generation and bookkeeping fields).
  void check_known(const std::set<std::string>& known, const std::string& architecture) const;
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json& at(const std::string& key) const;
  nlohmann::json j_;
  std::string path_;
};

}  // namespace megatron::hf

#include "megatron/checkpoint/pickle_writer.h"

#include <cstring>

#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

class Emitter {
 public:
  std::string out;

  void value(const Py& v) {
    switch (v.kind) {
      case Py::Kind::None:
        out += 'N';
        return;
      case Py::Kind::Bool:
        out += static_cast<char>(v.boolean ? 0x88 : 0x89);
        return;
      case Py::Kind::Int:
        return integer(v.integer);
      case Py::Kind::Float:
        return real(v.real);
      case Py::Kind::Str:
        out += 'X';
        u32(static_cast<uint32_t>(v.text.size()));
        out += v.text;
        return;
      case Py::Kind::Tuple:
        return tuple(v.items);
      case Py::Kind::List:
        out += ']';
        if (!v.items.empty()) {
          out += '(';
          for (const Py& i : v.items) value(i);
          out += 'e';  // APPENDS
        }
        return;
      case Py::Kind::Dict:
        out += '}';
        return set_items(v.dict);
      case Py::Kind::Global: {
        const size_t dot = v.text.rfind('.');
        MT_CHECK(dot != std::string::npos, "pickle global without a module: ", v.text);
        out += 'c' + v.text.substr(0, dot) + '\n' + v.text.substr(dot + 1) + '\n';
        return;
      }
      case Py::Kind::Reduce:
        value(v.items.at(0));
        value(v.items.at(1));
        out += 'R';
        return built(v);
      case Py::Kind::NewObj:
        value(v.items.at(0));
        out += ')';
        out += static_cast<char>(0x81);  // NEWOBJ
        return built(v);
      case Py::Kind::PersId:
        value(v.items.at(0));
        out += 'Q';  // BINPERSID
        return;
    }
  }

 private:
  void u32(uint32_t n) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
      return;
    }
    // LONG1: the fewest little-endian two's-complement bytes that hold v.
    std::string bytes;
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((u >> (8 * i)) & 0xFF);
    while (bytes.size() > 1) {
      const auto last = static_cast<uint8_t>(bytes.back());
      const auto prev = static_cast<uint8_t>(bytes[bytes.size() - 2]);
      if ((last == 0x00 && !(prev & 0x80)) || (last == 0xFF && (prev & 0x80)))
        bytes.pop_back();
      else
        break;
    }
    out += static_cast<char>(0x8a);
    out += static_cast<char>(bytes.size());
    out += bytes;
  }
  void real(double d) {
    uint64_t bits = 0;
    std::memcpy(&bits, &d, 8);
    out += 'G';
    for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xFF);
  }
  void tuple(const std::vector<Py>& items) {
    if (items.empty()) {
      out += ')';
      return;
    }
    if (items.size() <= 3) {
      for (const Py& i : items) value(i);
      out += static_cast<char>(0x84 + items.size());  // TUPLE1..3
      return;
    }
    out += '(';
    for (const Py& i : items) value(i);
    out += 't';
  }
  void set_items(const std::vector<PyItem>& items) {
    if (items.empty()) return;
    out += '(';
    for (const auto& [k, v] : items) {
      value(k);
      value(v);
    }
    out += 'u';  // SETITEMS
  }
  void built(const Py& v) {
    set_items(v.dict);
    if (!v.state.empty()) {
      value(v.state.front());
      out += 'b';  // BUILD
    }
  }
};

}  // namespace

Py Py::none() { return Py{}; }

Py Py::boolean_value(bool b) {
  Py p;
  p.kind = Kind::Bool;
  p.boolean = b;
  return p;
}
Py Py::integer_value(int64_t v) {
  Py p;
  p.kind = Kind::Int;
  p.integer = v;
  return p;
}
Py Py::real_value(double v) {
  Py p;
  p.kind = Kind::Float;
  p.real = v;
  return p;
}
Py Py::str(std::string s) {
  Py p;
  p.kind = Kind::Str;
  p.text = std::move(s);
  return p;
}
Py Py::tuple(std::vector<Py> items) {
  Py p;
  p.kind = Kind::Tuple;
  p.items = std::move(items);
  return p;
}
Py Py::list(std::vector<Py> items) {
  Py p = tuple(std::move(items));
  p.kind = Kind::List;
  return p;
}
Py Py::dictionary(std::vector<PyItem> items) {
  Py p;
  p.kind = Kind::Dict;
  p.dict = std::move(items);
  return p;
}
Py Py::global(const std::string& module, const std::string& name) {
  Py p;
  p.kind = Kind::Global;
  p.text = module + "." + name;
  return p;
}
Py Py::reduce(Py callable, std::vector<Py> args) {
  Py p;
  p.kind = Kind::Reduce;
  p.items = {std::move(callable), tuple(std::move(args))};
  return p;
}
Py Py::new_object(const std::string& module, const std::string& name, Py state) {
  Py p;
  p.kind = Kind::NewObj;
  p.items = {global(module, name)};
  p.state = {std::move(state)};
  return p;
}
Py Py::ordered_dict(std::vector<PyItem> items) {
  Py p = reduce(global("collections", "OrderedDict"), {});
  p.dict = std::move(items);
  return p;
}
Py Py::persistent(Py id) {
  Py p;
  p.kind = Kind::PersId;
  p.items = {std::move(id)};
  return p;
}

std::string write_pickle(const Py& value) {
  Emitter e;
  e.out = "\x80\x02";  // PROTO 2
  e.value(value);
  e.out += '.';
  return e.out;
}

}  // namespace megatron::checkpoint

#include "megatron/checkpoint/distcp.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "megatron/checkpoint/geometry.h"
#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using Kind = PickleValue::Kind;
constexpr const char* kMeta = "torch.distributed.checkpoint.metadata.";
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 31;

// A dataclass field: the object's BUILD state is a dict of its fields.
const PickleValue& field(const PickleValue& obj, const std::string& key, const std::string& where) {
  const PickleValue* state = obj.is(Kind::Object) ? obj.state.get() : nullptr;
  const PickleValue* v = state ? state->get(key) : nullptr;
  MT_INPUT_CHECK(v != nullptr, where, ": ", obj.describe(), " has no field '", key, "'");
  return *v;
}

bool is_class(const PickleValue& v, const std::string& cls) {
  return v.is(Kind::Object) && v.text == kMeta + cls;
}

// torch.Size((a, b, ...)) as its integers.
std::vector<int64_t> size_of(const PickleValue& v, const std::string& where, const char* what) {
  const bool ok = v.is(Kind::Object) && v.text == "torch.Size" && v.items.size() == 1 &&
                  v.items[0]->items.size() == 1 && v.items[0]->items[0]->is(Kind::Tuple);
  MT_INPUT_CHECK(ok, where, ": ", what, " is not a torch.Size (", v.describe(), ")");
  std::vector<int64_t> out;
  for (const PickleRef& i : v.items[0]->items[0]->items) {
    MT_INPUT_CHECK(i->is(Kind::Int) && i->integer >= 0 && i->integer <= (int64_t{1} << 40), where,
                   ": ", what, " holds ", i->describe());
    out.push_back(i->integer);
  }
  return out;
}

DType dtype_of(const PickleValue& properties, const std::string& where) {
  // TensorProperties pickles its state as a tuple (dtype, layout, requires_grad, ...).
  const PickleValue* state = properties.state.get();
  MT_INPUT_CHECK(
      state && state->is(Kind::Tuple) && !state->items.empty() && state->items[0]->is(Kind::Global),
      where, ": tensor properties without a dtype");
  const std::string& t = state->items[0]->text;
  if (t == "torch.float32") return DType::F32;
  if (t == "torch.bfloat16") return DType::BF16;
  if (t == "torch.float16") return DType::F16;
  if (t == "torch.float64") return DType::F64;
  if (t == "torch.int64") return DType::I64;
  if (t == "torch.int32") return DType::I32;
  throw InputError(concat(where, ": tensor dtype ", t, " is not read here"));
}

std::string chunk_key(const std::string& fqn, const std::vector<int64_t>& offsets) {
  std::string k = fqn + "@";
  for (int64_t o : offsets) k += std::to_string(o) + ",";
  return k;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  MT_INPUT_CHECK(!ec, path, ": cannot read (", ec.message(), "): not a distributed checkpoint");
  MT_INPUT_CHECK(size <= kMaxMetadataBytes, path, ": ", size, " bytes is implausible metadata");
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  MT_INPUT_CHECK(in.good() || size == 0, path, ": cannot read");
  return bytes;
}

constexpr int64_t kMaxElements = int64_t{1} << 48;  // far beyond any tensor; no overflow below

// Elements of a shape, saturated at kMaxElements + 1 (a shape past the limit is refused).
int64_t numel_of(const std::vector<int64_t>& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n = n > (kMaxElements + 1) / d ? kMaxElements + 1 : n * d;
  return std::min(n, kMaxElements + 1);
}

PieceGeometry box_geometry(const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                           const std::vector<int64_t>& extent) {
  PieceGeometry g{shape, offset, extent, 0, 0};
  g.flat_end = g.box_numel();
  return g;
}

// Where each chunk's bytes are: MetadataIndex(fqn, offset) -> _StorageInfo, keyed by chunk_key.
std::map<std::string, DcpChunk> storage_index(const PickleValue& root, const std::string& where) {
  std::map<std::string, DcpChunk> storage;
  const PickleValue& data = field(root, "storage_data", where);
  MT_INPUT_CHECK(data.is(Kind::Dict), where, ": storage_data is not a dict");
  for (const auto& [key, info] : data.dict) {
    MT_INPUT_CHECK(is_class(*key, "MetadataIndex") &&
                       info->text == "torch.distributed.checkpoint.filesystem._StorageInfo",
                   where, ": storage_data entry ", key->describe(), " -> ", info->describe());
    const PickleValue& fqn = field(*key, "fqn", where);
    MT_INPUT_CHECK(fqn.is(Kind::String), where, ": an index's fqn is ", fqn.describe());
    const PickleValue* off = key->state->get("offset");
    const std::vector<int64_t> offsets = off && !off->is(Kind::None)
                                             ? size_of(*off, where, "an index's offset")
                                             : std::vector<int64_t>{};
    DcpChunk c;
    const PickleValue& file = field(*info, "relative_path", where);
    const PickleValue& at = field(*info, "offset", where);
    const PickleValue& length = field(*info, "length", where);
    MT_INPUT_CHECK(file.is(Kind::String) && at.is(Kind::Int) && length.is(Kind::Int) &&
                       at.integer >= 0 && length.integer >= 0,
                   where, ": storage of '", fqn.text, "' is malformed");
    // Data files are names inside the directory: nothing outside it is read.
    MT_INPUT_CHECK(!file.text.empty() && file.text.find('/') == std::string::npos &&
                       file.text != "." && file.text != "..",
                   where, ": storage of '", fqn.text, "' names the file '", file.text,
                   "' (only files of the checkpoint directory are read)");
    c.file = file.text;
    c.offset = static_cast<uint64_t>(at.integer);
    c.length = static_cast<uint64_t>(length.integer);
    storage[chunk_key(fqn.text, offsets)] = c;
  }
  return storage;
}

}  // namespace

DcpCheckpoint::DcpCheckpoint(const std::string& dir)
    : dir_(dir), metadata_path_((fs::path(dir) / ".metadata").string()) {
  read_metadata();
}

void DcpCheckpoint::read_metadata() {
  const std::string& where = metadata_path_;
  const PickleRef root = read_pickle(read_file(where), where);
  MT_INPUT_CHECK(is_class(*root, "Metadata"), where, ": not distributed-checkpoint metadata (",
                 root->describe(), ")");
  const std::map<std::string, DcpChunk> storage = storage_index(*root, where);
  const PickleValue& entries = field(*root, "state_dict_metadata", where);
  MT_INPUT_CHECK(entries.is(Kind::Dict), where, ": state_dict_metadata is not a dict");
  for (const auto& [name, meta] : entries.dict) {
    MT_INPUT_CHECK(name->is(Kind::String), where, ": a state dict key is ", name->describe());
    if (is_class(*meta, "BytesStorageMetadata")) {
      byte_items_.push_back(name->text);
      const auto s = storage.find(chunk_key(name->text, {}));
      if (s != storage.end()) byte_storage_[name->text] = s->second;
      continue;
    }
    const std::string what = concat(where, ": tensor '", name->text, "'");
    MT_INPUT_CHECK(is_class(*meta, "TensorStorageMetadata"), what, " has metadata ",
                   meta->describe());
    DcpTensor t;
    t.name = name->text;
    t.dtype = dtype_of(field(*meta, "properties", what), what);
    t.shape = size_of(field(*meta, "size", what), what, "size");
    MT_INPUT_CHECK(numel_of(t.shape) <= kMaxElements && t.shape.size() <= Shape::kMaxDims, what,
                   ": shape of implausible size");
    const PickleValue& chunks = field(*meta, "chunks", what);
    MT_INPUT_CHECK(chunks.is(Kind::List), what, ": chunks is not a list");
    int64_t covered = 0;
    for (const PickleRef& ch : chunks.items) {
      MT_INPUT_CHECK(is_class(*ch, "ChunkStorageMetadata"), what, ": chunk ", ch->describe());
      const std::vector<int64_t> offsets = size_of(field(*ch, "offsets", what), what, "offsets");
      const std::vector<int64_t> sizes = size_of(field(*ch, "sizes", what), what, "sizes");
      const auto s = storage.find(chunk_key(t.name, offsets));
      MT_INPUT_CHECK(s != storage.end(), what, ": the chunk at ", chunk_key("", offsets).substr(1),
                     " has no storage entry");
      DcpChunk c = s->second;
      c.offsets = offsets;
      c.sizes = sizes;
      MT_INPUT_CHECK(!box_geometry(t.shape, offsets, sizes).problem(), what, ": a chunk lies ",
                     "outside the tensor");
      covered += numel_of(sizes);
      t.chunks.push_back(std::move(c));
    }
    // Chunks of a saved tensor tile it: more elements than the tensor means overlaps.
    MT_INPUT_CHECK(covered <= numel_of(t.shape), what, ": its chunks hold ", covered,
                   " elements of a ", numel_of(t.shape), "-element tensor (overlapping)");
    tensors_.emplace(t.name, std::move(t));
  }
}

const DcpTensor* DcpCheckpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Tensor DcpCheckpoint::read_box(const std::string& name, const std::vector<int64_t>& offset,
                               const std::vector<int64_t>& extent) const {
  const DcpTensor* t = find(name);
  MT_INPUT_CHECK(t != nullptr, metadata_path_, ": no tensor '", name, "'");
  const PieceGeometry want = box_geometry(t->shape, offset, extent);
  MT_CHECK(!want.problem(), "box outside tensor ", name);
  Tensor out = Tensor::empty(Shape(extent.begin(), extent.end()), t->dtype);
  const auto size = static_cast<int64_t>(dtype_size(t->dtype));
  auto* dst = static_cast<uint8_t*>(out.raw());
  int64_t filled = 0;
  for (const DcpChunk& c : t->chunks) {
    const PieceGeometry have = box_geometry(t->shape, c.offsets, c.sizes);
    int64_t overlap = 0;
    for_each_overlap(want, have, [&](const Overlap& o) { overlap += o.length; });
    if (overlap == 0) continue;
    const std::string file = (fs::path(dir_) / c.file).string();
    TorchFile archive(file, c.offset, c.length);
    const std::string what = concat("chunk of '", name, "'");
    const Tensor chunk = archive.tensor(archive.root(), what);
    MT_INPUT_CHECK(
        chunk.dtype() == t->dtype &&
            std::equal(c.sizes.begin(), c.sizes.end(), chunk.shape().begin(), chunk.shape().end()),
        archive.path(), ": ", what, " holds a ", dtype_name(chunk.dtype()), " tensor ",
        chunk.shape().str(), " where the metadata says ", dtype_name(t->dtype));
    if (c.offsets == offset && c.sizes == extent) return chunk;  // the box is this chunk
    const auto* src = static_cast<const uint8_t*>(chunk.raw());
    for_each_overlap(want, have, [&](const Overlap& o) {
      std::memcpy(dst + o.a_pos * size, src + o.b_pos * size, static_cast<size_t>(o.length * size));
    });
    filled += overlap;
  }
  MT_INPUT_CHECK(filled == want.box_numel(), metadata_path_, ": tensor '", name,
                 "': ", want.box_numel() - filled, " elements of the part read are in no chunk");
  return out;
}

PickleRef DcpCheckpoint::read_object(const std::string& name) const {
  const auto it = byte_storage_.find(name);
  MT_INPUT_CHECK(it != byte_storage_.end(), metadata_path_, ": no stored object '", name, "'");
  TorchFile archive((fs::path(dir_) / it->second.file).string(), it->second.offset,
                    it->second.length);
  return std::make_shared<PickleValue>(archive.root());
}

Tensor DcpCheckpoint::read(const std::string& name) const {
  const DcpTensor* t = find(name);
  MT_INPUT_CHECK(t != nullptr, metadata_path_, ": no tensor '", name, "'");
  return read_box(name, std::vector<int64_t>(t->shape.size(), 0), t->shape);
}

}  // namespace megatron::checkpoint

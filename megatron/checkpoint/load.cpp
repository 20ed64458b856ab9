// Loading: the index of a saved checkpoint, file verification, and the pieces a rank asks for
// read from whatever layout saved them.
#include <algorithm>
#include <filesystem>
#include <set>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/directory.h"
#include "megatron/checkpoint/file_io.h"
#include "megatron/checkpoint/index_parsing.h"
#include "megatron/checkpoint/safetensors.h"
#include "megatron/core/finite.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using namespace detail;

CheckpointIndex read_index(const std::string& dir, std::optional<int64_t> iteration) {
  CheckpointIndex index;
  std::optional<int64_t> expected = iteration;
  std::error_code ec;
  if (iteration) {
    index.path = checkpoint_path(dir, *iteration);
    if (!fs::is_directory(index.path, ec))
      throw InputError(concat("checkpoint ", index.path, " does not exist"));
  } else if (fs::is_regular_file(fs::path(dir) / kMetadataFile, ec)) {
    fs::path normal = fs::path(dir).lexically_normal();
    if (normal.filename().empty()) normal = normal.parent_path();  // "DIR/iter_N/"
    // Without the trailing separator (shell completion adds one): callers take its parent.
    index.path = normal.string();
    expected = parse_iter_name(normal.filename().string());
  } else {
    if (!fs::is_directory(dir, ec))
      throw InputError(concat("checkpoint directory ", dir, " does not exist"));
    const LatestCheckpoint found = find_latest(dir);
    const auto& latest = found.iteration;
    index.skipped = found.skipped;
    if (!latest)
      throw InputError(concat("no complete checkpoint in ", dir, " (", kLatestFile,
                              " missing or stale, and no iter_NNNNNNN directory with a ",
                              kMetadataFile, ")"));
    expected = latest;
    index.path = checkpoint_path(dir, *latest);
  }
  const std::string meta_path = (fs::path(index.path) / kMetadataFile).string();
  if (!fs::is_regular_file(meta_path, ec))
    throw InputError(concat("checkpoint ", index.path, ": ", kMetadataFile,
                            " is missing (incomplete checkpoint?)"));
  const IndexError fail{concat("checkpoint metadata ", meta_path)};
  json j;
  try {
    j = json::parse(io::read_file(meta_path));
  } catch (const json::exception& e) {
    throw fail("invalid JSON: ", e.what());
  }
  if (!j.is_object()) throw fail("not a JSON object");
  const int64_t version = get_int(j, "format_version", "header", fail);
  if (version < 1 || version > kFormatVersion)
    throw fail("format_version ", version, " is not one this build reads (1..", kFormatVersion,
               ")");
  index.format_version = static_cast<int>(version);
  index.iteration = get_int(j, "iteration", "header", fail);
  if (expected && *expected != index.iteration)
    throw fail("iteration ", index.iteration, " does not match the directory name ",
               iter_name(*expected));
  index.metadata = j.contains("metadata") ? j["metadata"] : json::object();
  parse_tensor_index(j, index, fail);
  return index;
}

void verify_files(const CheckpointIndex& index, const std::vector<std::string>* only) {
  std::set<std::string> names;
  if (only)
    names.insert(only->begin(), only->end());
  else
    for (const auto& [f, size] : index.files) names.insert(f);
  open_files(index, names);
}

Reader::Reader(const std::string& dir, std::optional<int64_t> iteration)
    : index_(read_index(dir, iteration)) {}

Reader::~Reader() = default;

std::vector<float> Reader::read_whole(const std::string& name) {
  const auto it = index_.tensors.find(name);
  if (it == index_.tensors.end())
    throw InputError(concat("checkpoint ", index_.path, " has no tensor '", name, "'"));
  const std::vector<int64_t>& shape = it->second.shape;
  TensorPiece piece;
  piece.name = name;
  piece.global_shape = Shape(shape.begin(), shape.end());
  piece.local_shape = piece.global_shape;
  std::vector<float> out(static_cast<size_t>(piece.global_shape.numel()));
  piece.dest = out.data();
  read({piece});
  return out;
}

void Reader::read(const std::vector<TensorPiece>& pieces) {
  const CheckpointIndex& index = index_;
  const std::string meta_path = (fs::path(index.path) / kMetadataFile).string();
  struct Plan {
    const TensorPiece* piece;
    PieceGeometry geometry;
    const SavedTensor* saved;
    std::vector<const SavedPiece*> sources;  // saved pieces whose span meets the request
  };
  std::vector<Plan> plans;
  std::set<std::string> needed;
  for (const TensorPiece& piece : pieces) {
    Plan plan{&piece, piece.geometry(), nullptr, {}};
    const auto it = index.tensors.find(piece.name);
    if (it == index.tensors.end())
      throw InputError(concat("checkpoint ", meta_path, " has no tensor '", piece.name, "'"));
    plan.saved = &it->second;
    if (plan.saved->shape != plan.geometry.shape)
      throw InputError(concat("checkpoint ", meta_path, ": tensor '", piece.name,
                              "' has global shape ", shape_str(plan.saved->shape),
                              ", the model expects ", shape_str(plan.geometry.shape)));
    if (plan.saved->dtype != "F32")
      throw InputError(concat("checkpoint ", meta_path, ": tensor '", piece.name, "' is ",
                              plan.saved->dtype, "; only F32 loads"));
    MT_CHECK(plan.geometry.count() == 0 || piece.dest,
             "checkpoint load: ", describe(piece, plan.geometry), " has no destination");
    const auto [lo, hi] = plan.geometry.global_span();
    for (const SavedPiece& s : plan.saved->pieces) {
      const auto [slo, shi] = s.geometry.global_span();
      if (slo < hi && lo < shi) {
        plan.sources.push_back(&s);
        if (!files_.count(s.file)) needed.insert(s.file);
      }
    }
    plans.push_back(std::move(plan));
  }
  // Each shard file is opened and verified (size, header, checksum) once per Reader.
  for (auto& [name, file] : open_files(index, needed)) files_.emplace(name, std::move(file));

  constexpr int64_t kGap = int64_t{1} << 16;    // elements read through rather than seeking
  constexpr int64_t kChunk = int64_t{1} << 23;  // elements per staged read (32 MB)
  std::vector<float> staging;
  for (const Plan& plan : plans) {
    // Where each saved piece overlaps the request; together they must tile it exactly.
    std::vector<std::vector<Overlap>> overlaps(plan.sources.size());
    std::vector<std::pair<int64_t, int64_t>> cover;
    for (size_t s = 0; s < plan.sources.size(); ++s)
      for_each_overlap(plan.geometry, plan.sources[s]->geometry, [&](const Overlap& o) {
        overlaps[s].push_back(o);
        cover.emplace_back(o.a_pos, o.length);
      });
    std::sort(cover.begin(), cover.end());
    int64_t covered = 0;
    for (const auto& [pos, len] : cover) {
      if (pos != covered)
        throw InputError(concat(
            "checkpoint ", index.path, ": ", describe(*plan.piece, plan.geometry), ": elements ",
            pos < covered ? concat("from ", pos, " are saved more than once")
                          : concat("[", covered, ", ", pos, ") are in no saved piece")));
      covered += len;
    }
    if (covered != plan.geometry.count())
      throw InputError(concat("checkpoint ", index.path, ": ", describe(*plan.piece, plan.geometry),
                              ": elements [", covered, ", ", plan.geometry.count(),
                              ") are in no saved piece"));
    float* dest = plan.piece->dest;
    for (size_t s = 0; s < plan.sources.size(); ++s) {
      const SavedPiece& src = *plan.sources[s];
      const safetensors::File& file = files_.at(src.file);
      const safetensors::TensorInfo& info = file.get(src.key);
      const auto& ovs = overlaps[s];
      for (size_t i = 0; i < ovs.size();) {
        // Coalesce nearby overlaps into one read; a lone overlap reads straight into dest.
        const int64_t start = ovs[i].b_pos;
        int64_t end = start + ovs[i].length;
        size_t j = i + 1;
        while (j < ovs.size() && ovs[j].b_pos - end <= kGap &&
               ovs[j].b_pos + ovs[j].length - start <= kChunk)
          end = ovs[j].b_pos + ovs[j].length, ++j;
        if (j == i + 1) {
          file.read_bytes(info, static_cast<uint64_t>(start) * 4,
                          static_cast<uint64_t>(ovs[i].length) * 4, dest + ovs[i].a_pos);
        } else {
          staging.resize(static_cast<size_t>(end - start));
          file.read_bytes(info, static_cast<uint64_t>(start) * 4,
                          static_cast<uint64_t>(end - start) * 4, staging.data());
          for (size_t k = i; k < j; ++k)
            std::memcpy(dest + ovs[k].a_pos, staging.data() + (ovs[k].b_pos - start),
                        static_cast<size_t>(ovs[k].length) * 4);
        }
        i = j;
      }
    }
    // NaN or inf in a loaded tensor would train or decode garbage without a word: refused,
    // naming the tensor (a scan is cheap next to the read).
    if (const int64_t bad = count_non_finite(dest, plan.geometry.count()); bad > 0)
      throw InputError(concat("checkpoint ", index.path, ": ", describe(*plan.piece, plan.geometry),
                              " holds ", non_finite_text(bad),
                              "; it was saved from a diverged run or is damaged"));
  }
}

nlohmann::json load(const LoadRequest& req) {
  Reader reader(req.dir, req.iteration);
  reader.read(req.pieces);
  return reader.index().metadata;
}

}  // namespace megatron::checkpoint

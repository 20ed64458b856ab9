#include "data/gpt_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "megatron/core/error.h"

namespace megatron::data {

namespace fs = std::filesystem;

SampleDataset::~SampleDataset() = default;
SequenceSource::~SequenceSource() = default;

const char* split_name(int split_id) {
  switch (split_id) {
    case 0:
      return "train";
    case 1:
      return "valid";
    case 2:
      return "test";
    default:
      throw Error(concat("split id ", split_id, " is not 0 (train), 1 (valid) or 2 (test)"));
  }
}

// ---- storage and cache files ---------------------------------------------------------------

namespace {

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

struct MappedFile {
  const unsigned char* data = nullptr;
  size_t size = 0;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(concat("cannot open ", path, ": ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw Error(concat("cannot stat ", path));
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error(concat("cannot mmap ", path, ": ", std::strerror(errno)));
      }
      data = static_cast<const unsigned char*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }
};

// The .npy v1.0 header numpy itself writes for a C-order little-endian array.
std::string npy_header(const char* descr, int64_t rows, int64_t cols) {
  std::string dict = concat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", rows,
                            cols > 0 ? concat(", ", cols) : std::string(","), "), }");
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t pad = 64 - unpadded % 64;
  dict.append(pad, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>((dict.size() >> 8) & 0xff));
  return out + dict;
}

struct ArraySpec {
  const char* key;     // name in the description
  const char* name;    // file suffix
  const char* descr;   // numpy dtype
  size_t elem;         // bytes per element
  int64_t rows, cols;  // cols 0 -> 1-D
  int64_t count() const { return cols > 0 ? rows * cols : rows; }
};

void write_file_atomically(const std::string& path, const std::string& header, const void* data,
                           size_t bytes) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t salt =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id())) << 1) ^
      (counter.fetch_add(1) << 40);
  const std::string tmp = concat(path, ".tmp.", ::getpid(), ".", hex64(salt));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(concat("cannot create ", tmp, ": ", std::strerror(errno)));
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (bytes) out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.flush();
    if (!out) {
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error(concat("cannot write ", tmp));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    throw Error(concat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  }
}

// Everything that identifies one GPTDataset's indices, computed once (and identically) on
// every rank before any cache work.
struct Inputs {
  std::shared_ptr<const SequenceSource> source;
  int split_id = 0;
  DocumentRange seqs;
  GPTDatasetConfig config;
  GPTIndexPlan plan;
  std::string what;       // "dataset 'X', train split (sequences [a, b))"
  std::string dir, base;  // cache directory and file prefix ("" when not cached)
  nlohmann::json key;
  std::function<void(const std::string&)> log;

  std::string file(const char* suffix) const { return (fs::path(dir) / (base + suffix)).string(); }
  std::vector<ArraySpec> arrays() const {
    const int64_t n = plan.num_samples_total;
    return {{"document_index", "-document_index.npy", "<i4", 4, plan.num_epochs * seqs.size(), 0},
            {"sample_index", "-sample_index.npy", "<i8", 8, n + 1, 2},
            {"shuffle_index", "-shuffle_index.npy", "<i8", 8, n, 0}};
  }
};

std::string default_cache_dir(const SequenceSource& source, const GPTDatasetConfig& config) {
  if (source.path().empty()) return {};
  if (!config.cache_dir.empty()) return config.cache_dir;
  return (fs::path(source.path()) / "cache" / "GPTDataset_indices").string();
}

Inputs make_inputs(std::shared_ptr<const SequenceSource> source, int split_id, DocumentRange seqs,
                   const GPTDatasetConfig& config) {
  MT_CHECK(source != nullptr, "GPTDataset needs a source");
  Inputs in;
  in.split_id = split_id;
  in.seqs = seqs;
  in.config = config;
  in.log = config.log ? config.log
                      : [](const std::string& m) { std::cerr << "[data] " << m << std::endl; };
  const char* sname = split_name(split_id);
  in.what = concat("dataset '", source->name(), "', ", sname, " split (sequences [", seqs.begin,
                   ", ", seqs.end, "))");
  const int64_t nseq = source->num_sequences();
  MT_INPUT_CHECK(seqs.begin >= 0 && seqs.begin <= seqs.end && seqs.end <= nseq, in.what,
                 ": the range is outside the dataset's ", nseq, " sequences");
  MT_INPUT_CHECK(seqs.size() > 0, in.what,
                 ": the split is empty (no sequences); give it a "
                 "larger share of the split or use more documents");
  MT_INPUT_CHECK(seqs.end - 1 <= std::numeric_limits<int32_t>::max(), in.what,
                 ": sequence ids beyond 2^31 do not fit Megatron's int32 document index");
  int64_t tokens = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t s = seqs.begin; s < seqs.end; ++s) {
    const int64_t l = source->sequence_length(s);
    tokens += l;
    h = fnv1a(&l, sizeof l, h);
  }
  in.plan = plan_gpt_indices(tokens, config.num_samples, config.seq_length, in.what);
  MT_INPUT_CHECK(in.plan.num_samples_total > 0, in.what, " has ", tokens,
                 " tokens, fewer than seq_length + 1 = ", config.seq_length + 1,
                 ", so one epoch holds no sample");
  in.dir = default_cache_dir(*source, config);
  if (!in.dir.empty()) {
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(fs::absolute(source->path()), ec);
    if (ec) abs = fs::absolute(source->path());
    in.key = nlohmann::json{
        {"class", "GPTDataset"},
        {"format_version", 1},
        {"dataset_path", abs.string()},
        {"split", sname},
        {"sequence_range", {seqs.begin, seqs.end}},
        {"num_samples",
         config.num_samples ? nlohmann::json(*config.num_samples) : nlohmann::json()},
        {"seq_length", config.seq_length},
        {"seed", config.seed},
        {"add_extra_token_to_sequence", true},
        {"drop_last_partial_sequence", true},
        {"dataset_num_sequences", nseq},
        {"split_tokens", tokens},
        {"split_lengths_fnv1a", hex64(h)},
    };
    const std::string text = in.key.dump();
    in.base = concat(hex64(fnv1a(text.data(), text.size())), "-GPTDataset-", sname);
  }
  in.source = std::move(source);
  return in;
}

}  // namespace

struct GPTDataset::Storage {
  std::vector<int32_t> doc;
  std::vector<int64_t> sample, shuffle;
  std::vector<std::unique_ptr<MappedFile>> maps;
};

GPTDataset::~GPTDataset() = default;

// Built in memory.
static std::unique_ptr<GPTDataset::Storage> build_storage(const Inputs& in) {
  auto st = std::make_unique<GPTDataset::Storage>();
  NumpyRandomState rng(in.config.seed);
  st->doc = build_document_index(in.seqs.begin, in.seqs.end, in.plan.num_epochs,
                                 in.plan.separate_final_epoch, rng);
  const SequenceSource& src = *in.source;
  st->sample = build_sample_index([&src](int64_t s) { return src.sequence_length(s); }, st->doc,
                                  in.config.seq_length, in.plan.num_samples_total);
  st->shuffle =
      build_shuffle_index(in.plan.separate_final_epoch ? in.plan.num_samples_sans_final_epoch
                                                       : in.plan.num_samples_total,
                          in.plan.num_samples_total, rng);
  return st;
}

struct GPTDatasetAccess {
  static std::shared_ptr<GPTDataset> make(const Inputs& in, std::unique_ptr<GPTDataset::Storage> st,
                                          std::span<const int32_t> doc,
                                          std::span<const int64_t> sample,
                                          std::span<const int64_t> shuffle, bool from_cache) {
    std::shared_ptr<GPTDataset> ds(new GPTDataset());
    ds->source_ = in.source;
    ds->split_id_ = in.split_id;
    ds->sequences_ = in.seqs;
    ds->seq_length_ = in.config.seq_length;
    ds->num_samples_requested_ = in.config.num_samples;
    ds->plan_ = in.plan;
    ds->num_samples_total_ = in.plan.num_samples_total;
    ds->loaded_from_cache_ = from_cache;
    ds->storage_ = std::move(st);
    ds->doc_ = doc;
    ds->sample_ = sample;
    ds->shuffle_ = shuffle;
    return ds;
  }
};

namespace {

// Loads and fully validates the cache; nullptr (and `why`) when it is absent or unusable.
std::unique_ptr<GPTDataset::Storage> try_load(const Inputs& in, std::string& why) {
  const std::string desc_path = in.file("-description.json");
  std::error_code ec;
  if (!fs::exists(desc_path, ec)) {
    why = "";  // plain miss
    return nullptr;
  }
  try {
    nlohmann::json desc;
    {
      std::ifstream f(desc_path);
      desc = nlohmann::json::parse(f);
    }
    if (!desc.contains("key") || desc["key"] != in.key) {
      why = concat(desc_path, " describes other indices");
      return nullptr;
    }
    auto st = std::make_unique<GPTDataset::Storage>();
    std::vector<const unsigned char*> data;
    for (const ArraySpec& a : in.arrays()) {
      const std::string path = in.file(a.name);
      const auto& rec = desc.at("arrays").at(a.key);
      if (rec.at("length").get<int64_t>() != a.count()) {
        why =
            concat(path, ": recorded length ", rec.at("length").get<int64_t>(), " != ", a.count());
        return nullptr;
      }
      const std::string header = npy_header(a.descr, a.rows, a.cols);
      const size_t bytes = static_cast<size_t>(a.count()) * a.elem;
      if (!fs::exists(path, ec)) {
        why = concat(path, " is missing");
        return nullptr;
      }
      auto m = std::make_unique<MappedFile>(path);
      if (m->size != header.size() + bytes) {
        why = concat(path, " has ", m->size, " bytes, expected ", header.size() + bytes);
        return nullptr;
      }
      if (std::memcmp(m->data, header.data(), header.size()) != 0) {
        why = concat(path, " has an unexpected .npy header");
        return nullptr;
      }
      const unsigned char* body = m->data + header.size();
      if (hex64(fnv1a(body, bytes)) != rec.at("fnv1a").get<std::string>()) {
        why = concat(path, " fails its checksum");
        return nullptr;
      }
      data.push_back(body);
      st->maps.push_back(std::move(m));
    }
    // Headers are 64-byte aligned, so the mapped arrays are aligned for their types.
    const std::span<const int32_t> doc(reinterpret_cast<const int32_t*>(data[0]),
                                       static_cast<size_t>(in.arrays()[0].count()));
    const std::span<const int64_t> sample(reinterpret_cast<const int64_t*>(data[1]),
                                          static_cast<size_t>(in.arrays()[1].count()));
    const std::span<const int64_t> shuffle(reinterpret_cast<const int64_t*>(data[2]),
                                           static_cast<size_t>(in.arrays()[2].count()));
    // Values in range, so no read can go astray even with a forged checksum.
    for (int32_t d : doc)
      if (d < in.seqs.begin || d >= in.seqs.end) {
        why = concat(in.file("-document_index.npy"), " holds sequence ", d, " outside the split");
        return nullptr;
      }
    const auto ndoc = static_cast<int64_t>(doc.size());
    if (sample[0] != 0 || sample[1] != 0) {
      why = concat(in.file("-sample_index.npy"), " does not start at (0, 0)");
      return nullptr;
    }
    for (size_t k = 1; 2 * k < sample.size(); ++k) {
      const int64_t pos = sample[2 * k], off = sample[2 * k + 1];
      if (pos < sample[2 * k - 2] || pos >= ndoc || off < 0 ||
          off >= in.source->sequence_length(doc[static_cast<size_t>(pos)])) {
        why = concat(in.file("-sample_index.npy"), ": entry ", k, " (", pos, ", ", off,
                     ") is out of range");
        return nullptr;
      }
    }
    for (int64_t s : shuffle)
      if (s < 0 || s >= in.plan.num_samples_total) {
        why = concat(in.file("-shuffle_index.npy"), " holds sample ", s, " out of range");
        return nullptr;
      }
    return st;
  } catch (const std::exception& e) {
    why = concat(desc_path, ": ", e.what());
    return nullptr;
  }
}

void write_cache(const Inputs& in, const GPTDataset::Storage& st) {
  std::error_code ec;
  fs::create_directories(in.dir, ec);
  if (ec) throw Error(concat("cannot create the cache directory ", in.dir, ": ", ec.message()));
  nlohmann::json arrays = nlohmann::json::object();
  const void* ptrs[3] = {st.doc.data(), st.sample.data(), st.shuffle.data()};
  const auto specs = in.arrays();
  for (size_t i = 0; i < specs.size(); ++i) {
    const ArraySpec& a = specs[i];
    const size_t bytes = static_cast<size_t>(a.count()) * a.elem;
    write_file_atomically(in.file(a.name), npy_header(a.descr, a.rows, a.cols), ptrs[i], bytes);
    arrays[a.key] = {{"length", a.count()}, {"fnv1a", hex64(fnv1a(ptrs[i], bytes))}};
  }
  nlohmann::json desc{{"key", in.key},
                      {"arrays", arrays},
                      {"num_epochs", in.plan.num_epochs},
                      {"separate_final_epoch", in.plan.separate_final_epoch},
                      {"num_samples_total", in.plan.num_samples_total}};
  write_file_atomically(in.file("-description.json"), desc.dump(2) + "\n", nullptr, 0);
}

std::shared_ptr<GPTDataset> from_storage(const Inputs& in, std::unique_ptr<GPTDataset::Storage> st,
                                         bool from_cache) {
  std::span<const int32_t> doc;
  std::span<const int64_t> sample, shuffle;
  if (from_cache) {
    const auto specs = in.arrays();
    const unsigned char* base[3];
    for (size_t i = 0; i < 3; ++i)
      base[i] = st->maps[i]->data + npy_header(specs[i].descr, specs[i].rows, specs[i].cols).size();
    doc = {reinterpret_cast<const int32_t*>(base[0]), static_cast<size_t>(specs[0].count())};
    sample = {reinterpret_cast<const int64_t*>(base[1]), static_cast<size_t>(specs[1].count())};
    shuffle = {reinterpret_cast<const int64_t*>(base[2]), static_cast<size_t>(specs[2].count())};
  } else {
    doc = st->doc;
    sample = st->sample;
    shuffle = st->shuffle;
  }
  return GPTDatasetAccess::make(in, std::move(st), doc, sample, shuffle, from_cache);
}

}  // namespace

std::shared_ptr<GPTDataset> GPTDataset::build(std::shared_ptr<const SequenceSource> source,
                                              int split_id, DocumentRange sequences,
                                              const GPTDatasetConfig& config) {
  const Inputs in = make_inputs(std::move(source), split_id, sequences, config);
  return from_storage(in, build_storage(in), false);
}

std::string GPTDataset::cache_directory(const SequenceSource& source,
                                        const GPTDatasetConfig& config) {
  return default_cache_dir(source, config);
}

bool GPTDataset::cache_exists(const SequenceSource& source, int split_id, DocumentRange sequences,
                              const GPTDatasetConfig& config) {
  // A non-owning shared_ptr: make_inputs keeps the source only for the duration of this call.
  std::shared_ptr<const SequenceSource> alias(std::shared_ptr<const SequenceSource>(), &source);
  const Inputs in = make_inputs(alias, split_id, sequences, config);
  if (in.dir.empty()) return false;
  std::string why;
  return try_load(in, why) != nullptr;
}

std::shared_ptr<GPTDataset> GPTDataset::build_or_load(std::shared_ptr<const SequenceSource> source,
                                                      int split_id, DocumentRange sequences,
                                                      const GPTDatasetConfig& config,
                                                      bool is_builder,
                                                      const std::function<void()>& barrier) {
  // Validation first, identically on every rank, so an input error never leaves a rank
  // waiting in the barrier.
  const Inputs in = make_inputs(std::move(source), split_id, sequences, config);
  const auto sync = [&] {
    if (barrier) barrier();
  };
  if (in.dir.empty()) {
    sync();
    return from_storage(in, build_storage(in), false);
  }
  std::string why;
  if (is_builder) {
    auto st = try_load(in, why);
    if (st) {
      in.log(concat("loaded the GPTDataset indices of ", in.what, " from ", in.file("-*")));
      sync();
      return from_storage(in, std::move(st), true);
    }
    if (!why.empty())
      in.log(concat("warning: rebuilding the GPTDataset indices of ", in.what, ": ", why));
    const auto t0 = std::chrono::steady_clock::now();
    st = build_storage(in);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    try {
      write_cache(in, *st);
      in.log(concat("built the GPTDataset indices of ", in.what, " (", in.plan.num_samples_total,
                    " samples, ", in.plan.num_epochs, " epochs) in ", secs, " s; saved as ",
                    in.file("-*")));
    } catch (const std::exception& e) {
      in.log(
          concat("warning: could not save the GPTDataset indices of ", in.what, ": ", e.what(),
                 " (set data.cache_dir to a writable directory; every rank now builds its own)"));
    }
    sync();
    return from_storage(in, std::move(st), false);
  }
  sync();
  auto st = try_load(in, why);
  if (st) return from_storage(in, std::move(st), true);
  in.log(concat("warning: building the GPTDataset indices of ", in.what, " locally: ",
                why.empty() ? concat(in.file("-description.json"), " does not exist") : why));
  return from_storage(in, build_storage(in), false);
}

void GPTDataset::get(int64_t index, int32_t* out) const {
  MT_CHECK(index >= 0 && index < num_samples_total_, "sample ", index, " out of range [0, ",
           num_samples_total_, ") of ", describe());
  read_window(shuffle_[static_cast<size_t>(index)], out);
}

void GPTDataset::read_window(int64_t sample, int32_t* out) const {
  const int64_t b = sample_[static_cast<size_t>(2 * sample)];
  const int64_t bo = sample_[static_cast<size_t>(2 * sample + 1)];
  const int64_t e = sample_[static_cast<size_t>(2 * sample + 2)];
  const int64_t eo = sample_[static_cast<size_t>(2 * sample + 3)];
  int64_t written = 0;
  const int64_t want = seq_length_ + 1;
  for (int64_t k = b; k <= e; ++k) {
    const int32_t seq = doc_[static_cast<size_t>(k)];
    const int64_t from = k == b ? bo : 0;
    const int64_t to = k == e ? eo + 1 : source_->sequence_length(seq);  // exclusive
    const int64_t count = to - from;
    MT_CHECK(count >= 0 && written + count <= want, "sample ", sample, " of ", describe(),
             " is malformed");
    if (count > 0) source_->read(seq, from, count, out + written);
    written += count;
  }
  MT_CHECK(written == want, "sample ", sample, " of ", describe(), " has ", written,
           " tokens, expected ", want);
}

std::string GPTDataset::describe() const {
  return concat(
      "GPTDataset(", source_->name(), ", ", split_name(split_id_), " sequences [", sequences_.begin,
      ", ", sequences_.end, "), seq_length ", seq_length_, ", ", num_samples_total_, " samples",
      num_samples_requested_ ? concat(" (", *num_samples_requested_, " requested)") : std::string(),
      ", ", plan_.num_epochs, " epochs)");
}

}  // namespace megatron::data

#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "megatron/core/error.h"

static_assert(std::endian::native == std::endian::little,
              "the MMIDIDX format is little-endian; a big-endian host needs byte swapping");

namespace megatron::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8 + 8;  // 34

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string errno_text() { return std::strerror(errno); }

bool is_integer_dtype(DType t) {
  return t == DType::U8 || t == DType::I8 || t == DType::I16 || t == DType::U16 ||
         t == DType::I32 || t == DType::I64;
}

}  // namespace

uint8_t indexed_dtype_code(DType dtype) {
  switch (dtype) {
    case DType::U8:
      return 1;
    case DType::I8:
      return 2;
    case DType::I16:
      return 3;
    case DType::I32:
      return 4;
    case DType::I64:
      return 5;
    case DType::F64:
      return 6;
    case DType::F32:
      return 7;
    case DType::U16:
      return 8;
    case DType::BF16:
    case DType::F16:
      break;
  }
  throw InputError(
      concat("dtype ", dtype_name(dtype), " has no code in the Megatron indexed-dataset format"));
}

DType indexed_dtype_from_code(uint8_t code, const std::string& file) {
  switch (code) {
    case 1:
      return DType::U8;
    case 2:
      return DType::I8;
    case 3:
      return DType::I16;
    case 4:
      return DType::I32;
    case 5:
      return DType::I64;
    case 6:
      return DType::F64;
    case 7:
      return DType::F32;
    case 8:
      return DType::U16;
    default:
      break;
  }
  throw InputError(concat(file, ": invalid dtype code ", static_cast<int>(code),
                          " (expected 1..8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
                          "6 float64, 7 float32, 8 uint16)"));
}

DType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? DType::U16 : DType::I32;
}

// ---- writer -------------------------------------------------------------------------

struct IndexedDatasetWriter::File {
  std::FILE* f = nullptr;
  std::string path;
  std::vector<char> buffer;
  ~File() {
    if (f) std::fclose(f);
  }
};

namespace {

std::unique_ptr<std::FILE, int (*)(std::FILE*)> open_for_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MT_INPUT_CHECK(f != nullptr, "cannot open '", path, "' for writing: ", errno_text());
  return {f, &std::fclose};
}

void write_or_throw(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n == 0) return;
  MT_INPUT_CHECK(std::fwrite(data, 1, n, f) == n, "write to '", path,
                 "' failed (disk full?): ", errno_text());
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, DType dtype)
    : prefix_(prefix), dtype_(dtype) {
  MT_INPUT_CHECK(is_integer_dtype(dtype), "indexed dataset '", prefix,
                 "': token dtype must be an integer type, got ", dtype_name(dtype));
  bin_ = std::make_unique<File>();
  bin_->path = prefix + ".bin.tmp";
  bin_->f = std::fopen(bin_->path.c_str(), "wb");
  MT_INPUT_CHECK(bin_->f != nullptr, "cannot open '", bin_->path, "' for writing: ", errno_text());
  bin_->buffer.resize(1 << 20);
  std::setvbuf(bin_->f, bin_->buffer.data(), _IOFBF, bin_->buffer.size());
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_ && bin_) {
    if (bin_->f) std::fclose(bin_->f);
    bin_->f = nullptr;
    std::error_code ec;
    std::filesystem::remove(bin_->path, ec);
  }
}

void IndexedDatasetWriter::write_bytes(const void* data, size_t n) {
  MT_CHECK(!finalized_, "indexed dataset '", prefix_, "': write after finalize()");
  write_or_throw(bin_->f, data, n, bin_->path);
}

void IndexedDatasetWriter::add_sequence(std::span<const int32_t> tokens) {
  MT_INPUT_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                 "indexed dataset '", prefix_, "': a sequence of ", tokens.size(),
                 " tokens does not fit the int32 length field");
  const size_t esize = dtype_size(dtype_);
  convert_buf_.resize(tokens.size() * esize);
  dispatch_dtype(dtype_, [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      T* out = reinterpret_cast<T*>(convert_buf_.data());
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int32_t t = tokens[i];
        if constexpr (sizeof(T) < sizeof(int32_t) ||
                      (sizeof(T) == sizeof(int32_t) && std::is_unsigned_v<T>)) {
          MT_INPUT_CHECK(t >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                             t <= static_cast<int64_t>(std::numeric_limits<T>::max()),
                         "indexed dataset '", prefix_, "': token ", t, " (position ", i,
                         " of sequence ", lengths_.size(), ") does not fit dtype ",
                         dtype_name(dtype_));
        }
        out[i] = static_cast<T>(t);
      }
    } else {
      MT_CHECK(false, "non-integer token dtype");
    }
  });
  write_bytes(convert_buf_.data(), convert_buf_.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetWriter::end_document() {
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  if (!tokens.empty()) add_sequence(tokens);
  end_document();
}

void IndexedDatasetWriter::add_index(const IndexedDataset& other) {
  MT_INPUT_CHECK(other.dtype() == dtype_, "cannot merge '", other.prefix(), "' (dtype ",
                 dtype_name(other.dtype()), ") into '", prefix_, "' (dtype ", dtype_name(dtype_),
                 "): dtypes differ");
  MT_INPUT_CHECK(doc_idx_.back() == static_cast<int64_t>(lengths_.size()), "cannot merge '",
                 other.prefix(), "' into '", prefix_, "': the current document is unfinished");
  const auto bytes = other.bin_bytes();
  write_bytes(bytes.data(), bytes.size());
  const int64_t base = static_cast<int64_t>(lengths_.size());
  for (int64_t i = 0; i < other.num_sequences(); ++i)
    lengths_.push_back(static_cast<int32_t>(other.sequence_length(i)));
  const auto docs = other.document_indices();
  for (size_t d = 1; d < docs.size(); ++d) doc_idx_.push_back(base + docs[d]);
  tokens_ += other.num_tokens();
}

void IndexedDatasetWriter::finalize() {
  MT_CHECK(!finalized_, "indexed dataset '", prefix_, "': finalize() called twice");
  MT_INPUT_CHECK(doc_idx_.back() == static_cast<int64_t>(lengths_.size()), "indexed dataset '",
                 prefix_, "': finalize() with an unfinished document (call end_document())");
  MT_INPUT_CHECK(std::fflush(bin_->f) == 0, "write to '", bin_->path, "' failed: ", errno_text());
  const int rc = std::fclose(bin_->f);
  bin_->f = nullptr;
  MT_INPUT_CHECK(rc == 0, "closing '", bin_->path, "' failed: ", errno_text());

  const std::string idx_tmp = prefix_ + ".idx.tmp";
  {
    auto f = open_for_write(idx_tmp);
    const uint64_t n = lengths_.size(), d = doc_idx_.size();
    const uint8_t code = indexed_dtype_code(dtype_);
    write_or_throw(f.get(), kMagic, sizeof(kMagic), idx_tmp);
    write_or_throw(f.get(), &kVersion, 8, idx_tmp);
    write_or_throw(f.get(), &code, 1, idx_tmp);
    write_or_throw(f.get(), &n, 8, idx_tmp);
    write_or_throw(f.get(), &d, 8, idx_tmp);
    write_or_throw(f.get(), lengths_.data(), lengths_.size() * sizeof(int32_t), idx_tmp);
    std::vector<int64_t> pointers(lengths_.size());
    int64_t offset = 0;
    const auto esize = static_cast<int64_t>(dtype_size(dtype_));
    for (size_t i = 0; i < lengths_.size(); ++i) {
      pointers[i] = offset;
      offset += static_cast<int64_t>(lengths_[i]) * esize;
    }
    write_or_throw(f.get(), pointers.data(), pointers.size() * sizeof(int64_t), idx_tmp);
    write_or_throw(f.get(), doc_idx_.data(), doc_idx_.size() * sizeof(int64_t), idx_tmp);
    MT_INPUT_CHECK(std::fflush(f.get()) == 0, "write to '", idx_tmp, "' failed: ", errno_text());
  }
  std::error_code ec;
  std::filesystem::rename(bin_->path, prefix_ + ".bin", ec);
  MT_INPUT_CHECK(!ec, "cannot rename '", bin_->path, "' to '", prefix_, ".bin': ", ec.message());
  std::filesystem::rename(idx_tmp, prefix_ + ".idx", ec);
  MT_INPUT_CHECK(!ec, "cannot rename '", idx_tmp, "' to '", prefix_, ".idx': ", ec.message());
  finalized_ = true;
}

// ---- reader -------------------------------------------------------------------------

struct IndexedDataset::Mapping {
  const unsigned char* data = nullptr;
  size_t size = 0;
  void* base = nullptr;
  ~Mapping() {
    if (base) munmap(base, size);
  }
};

std::unique_ptr<IndexedDataset::Mapping> IndexedDataset::map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_INPUT_CHECK(fd >= 0, "cannot open '", path, "': ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw InputError(concat("cannot stat '", path, "': ", why));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(concat("'", path, "' is not a regular file"));
  }
  auto m = std::make_unique<IndexedDataset::Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      throw InputError(concat("cannot mmap '", path, "': ", why));
    }
    m->base = p;
    m->data = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  return m;
}

IndexedDataset::~IndexedDataset() = default;

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_path_(prefix + ".idx"), bin_path_(prefix + ".bin") {
  idx_map_ = map_file(idx_path_);
  bin_map_ = map_file(bin_path_);
  idx_data_ = idx_map_->data;
  bin_data_ = bin_map_->data;
  bin_size_ = bin_map_->size;
  const size_t size = idx_map_->size;
  const std::string& f = idx_path_;

  MT_INPUT_CHECK(size >= kHeaderSize, f, ": truncated header: the file has ", size,
                 " bytes, the MMIDIDX header needs ", kHeaderSize);
  MT_INPUT_CHECK(std::memcmp(idx_data_, kMagic, sizeof(kMagic)) == 0, f,
                 ": bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron indexed-dataset index");
  const uint64_t version = load<uint64_t>(idx_data_ + 9);
  MT_INPUT_CHECK(version == kVersion, f, ": unsupported version ", version, " (expected 1)");
  const uint8_t code = load<uint8_t>(idx_data_ + 17);
  dtype_ = indexed_dtype_from_code(code, f);
  MT_INPUT_CHECK(is_integer_dtype(dtype_), f, ": dtype code ", static_cast<int>(code), " (",
                 dtype_name(dtype_), ") is not an integer token type");
  const uint64_t n = load<uint64_t>(idx_data_ + 18);
  const uint64_t d = load<uint64_t>(idx_data_ + 26);
  // The file must hold exactly 34 + N*12 + D*8 bytes (computed without overflow).
  uint64_t need = 0, n_bytes = 0, d_bytes = 0;
  const bool overflow = __builtin_mul_overflow(n, uint64_t{12}, &n_bytes) ||
                        __builtin_mul_overflow(d, uint64_t{8}, &d_bytes) ||
                        __builtin_add_overflow(n_bytes, d_bytes, &need) ||
                        __builtin_add_overflow(need, uint64_t{kHeaderSize}, &need);
  MT_INPUT_CHECK(!overflow && need == size, f, ": the header's counts (", n, " sequences, ", d,
                 " document boundaries) need ",
                 overflow ? std::string("more than 2^64") : concat(need),
                 " bytes but the file has ", size,
                 need > size || overflow ? " (truncated index, or corrupt counts)"
                                         : " (trailing bytes, or corrupt counts)");
  MT_INPUT_CHECK(d >= 1, f, ": document count is 0 (it counts boundaries and must be >= 1)");
  n_ = static_cast<int64_t>(n);
  lengths_off_ = kHeaderSize;
  pointers_off_ = kHeaderSize + n * 4;
  const size_t doc_off = kHeaderSize + n * 12;

  const auto esize = static_cast<int64_t>(dtype_size(dtype_));
  const auto bin_size = static_cast<int64_t>(bin_size_);
  int64_t expected = 0;
  for (int64_t i = 0; i < n_; ++i) {
    const int32_t len = load<int32_t>(idx_data_ + lengths_off_ + 4 * i);
    const int64_t ptr = load<int64_t>(idx_data_ + pointers_off_ + 8 * i);
    MT_INPUT_CHECK(len >= 0, f, ": sequence ", i, " has negative length ", len);
    MT_INPUT_CHECK(ptr == expected, f, ": sequence ", i, " has byte pointer ", ptr,
                   " but the lengths before it put it at ", expected,
                   " (sequences must lie back to back from offset 0 of ", bin_path_, ")");
    expected += len * esize;
    MT_INPUT_CHECK(expected <= bin_size, f, ": sequence ", i, " (pointer ", ptr, ", ", len,
                   " tokens of ", esize, " bytes) ends at byte ", expected, ", past the end of ",
                   bin_path_, " (", bin_size, " bytes)");
    total_tokens_ += len;
  }
  MT_INPUT_CHECK(expected == bin_size, f, ": the index describes ", expected,
                 " bytes of tokens but ", bin_path_, " has ", bin_size,
                 " bytes (mismatched or truncated .bin)");

  doc_idx_.resize(d);
  std::memcpy(doc_idx_.data(), idx_data_ + doc_off, d * 8);
  MT_INPUT_CHECK(doc_idx_[0] == 0, f, ": document index 0 is ", doc_idx_[0], " (must be 0)");
  for (size_t k = 1; k < d; ++k) {
    MT_INPUT_CHECK(doc_idx_[k] >= doc_idx_[k - 1], f, ": document indices are not monotonic (",
                   "entry ", k, " = ", doc_idx_[k], " < entry ", k - 1, " = ", doc_idx_[k - 1],
                   ")");
    MT_INPUT_CHECK(doc_idx_[k] <= n_, f, ": document index entry ", k, " = ", doc_idx_[k],
                   " exceeds the sequence count ", n_);
  }
  MT_INPUT_CHECK(doc_idx_.back() == n_, f, ": the last document index is ", doc_idx_.back(),
                 " but must equal the sequence count ", n_);
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  MT_CHECK(i >= 0 && i < n_, prefix_, ": sequence ", i, " out of range [0, ", n_, ")");
  return load<int32_t>(idx_data_ + lengths_off_ + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  MT_CHECK(i >= 0 && i < n_, prefix_, ": sequence ", i, " out of range [0, ", n_, ")");
  return load<int64_t>(idx_data_ + pointers_off_ + 8 * i);
}

void IndexedDataset::read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(sequence);
  MT_CHECK(offset >= 0 && count >= 0 && offset <= len && count <= len - offset, prefix_,
           ": read of tokens [", offset, ", ", offset + count, ") from sequence ", sequence,
           " of length ", len);
  if (count == 0) return;
  const unsigned char* src = bin_data_ + sequence_pointer(sequence);
  dispatch_dtype(dtype_, [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      const unsigned char* p = src + offset * static_cast<int64_t>(sizeof(T));
      if constexpr (std::is_same_v<T, int32_t>) {
        std::memcpy(out, p, static_cast<size_t>(count) * sizeof(int32_t));
      } else {
        for (int64_t k = 0; k < count; ++k) {
          const T v = load<T>(p + k * static_cast<int64_t>(sizeof(T)));
          if constexpr (sizeof(T) > sizeof(int32_t)) {
            MT_INPUT_CHECK(v >= std::numeric_limits<int32_t>::min() &&
                               v <= std::numeric_limits<int32_t>::max(),
                           bin_path_, ": token ", v, " at position ", offset + k, " of sequence ",
                           sequence, " does not fit int32");
          }
          out[k] = static_cast<int32_t>(v);
        }
      }
    } else {
      MT_CHECK(false, "non-integer token dtype");
    }
  });
}

std::vector<int32_t> IndexedDataset::read(int64_t sequence) const {
  std::vector<int32_t> out(static_cast<size_t>(sequence_length(sequence)));
  read(sequence, 0, static_cast<int64_t>(out.size()), out.data());
  return out;
}

}  // namespace megatron::data

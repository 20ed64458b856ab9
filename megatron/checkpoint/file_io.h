#pragma once
// POSIX file helpers for checkpoints: full reads/writes that retry on EINTR and short transfers,
// fsync of files and directories, atomic small-file replacement. Failures throw megatron::Error
// (InputError for reads) naming the path and the system error.
#include <cstddef>
#include <cstdint>
#include <string>

namespace megatron::checkpoint::io {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Closes now, reporting a failed close (which can surface delayed write errors).
  void close(const std::string& path);

 private:
  int fd_ = -1;
};

Fd open_for_write(const std::string& path);  // create/truncate, mode 0644
Fd open_for_read(const std::string& path);   // InputError when missing
void write_all(int fd, const void* data, size_t n, const std::string& path);
// Writes exactly n bytes at offset (the file position is unchanged).
void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path);
// Reads exactly n bytes at offset; a short file is an InputError naming the path.
void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path);
uint64_t file_size(int fd, const std::string& path);
void fsync_fd(int fd, const std::string& path);
// fsyncs a directory so that renames and new entries inside it are durable.
void fsync_dir(const std::string& path);
// Writes `contents` to path + suffix, fsyncs it, renames it over `path` and fsyncs the parent.
void write_file_atomic(const std::string& path, const std::string& contents,
                       const std::string& tmp_suffix);
// The whole file (for small files: metadata.json, latest); InputError naming it if unreadable.
std::string read_file(const std::string& path);
std::string errno_text(int err);

}  // namespace megatron::checkpoint::io

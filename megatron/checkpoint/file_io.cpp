#include "megatron/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "megatron/core/error.h"

namespace megatron::checkpoint::io {

std::string errno_text(int err) { return std::strerror(err); }

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Fd::close(const std::string& path) {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR)
    throw Error(concat("closing ", path, ": ", errno_text(errno)));
}

Fd open_for_write(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(concat("cannot create ", path, ": ", errno_text(errno)));
  return Fd(fd);
}

Fd open_for_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(concat("cannot open ", path, ": ", errno_text(errno)));
  return Fd(fd);
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(concat("writing ", path, ": ", errno_text(errno)));
    }
    if (w == 0) throw Error(concat("writing ", path, ": no progress (disk full?)"));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(concat("writing ", path, " at byte ", offset, ": ", errno_text(errno)));
    }
    if (w == 0) throw Error(concat("writing ", path, ": no progress (disk full?)"));
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw InputError(concat("reading ", path, " at byte ", offset, ": ", errno_text(errno)));
    }
    if (r == 0)
      throw InputError(concat("reading ", path, ": unexpected end of file at byte ", offset, " (",
                              n, " more bytes expected; truncated?)"));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw InputError(concat("cannot stat ", path, ": ", errno_text(errno)));
  if (!S_ISREG(st.st_mode)) throw InputError(concat(path, " is not a regular file"));
  return static_cast<uint64_t>(st.st_size);
}

void fsync_fd(int fd, const std::string& path) {
  while (::fsync(fd) != 0) {
    if (errno == EINTR) continue;
    throw Error(concat("fsync of ", path, ": ", errno_text(errno)));
  }
}

void fsync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(concat("cannot open directory ", path, ": ", errno_text(errno)));
  Fd guard(fd);
  // Some file systems refuse fsync on directories (EINVAL); their metadata is then synchronous
  // or not ours to force.
  while (::fsync(fd) != 0) {
    if (errno == EINTR) continue;
    if (errno == EINVAL || errno == EROFS) break;
    throw Error(concat("fsync of directory ", path, ": ", errno_text(errno)));
  }
}

void write_file_atomic(const std::string& path, const std::string& contents,
                       const std::string& tmp_suffix) {
  const std::string tmp = path + tmp_suffix;
  {
    Fd fd = open_for_write(tmp);
    write_all(fd.get(), contents.data(), contents.size(), tmp);
    fsync_fd(fd.get(), tmp);
    fd.close(tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(concat("renaming ", tmp, " to ", path, ": ", errno_text(err)));
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  fsync_dir(parent.empty() ? std::string(".") : parent.string());
}

std::string read_file(const std::string& path) {
  Fd fd = open_for_read(path);
  const uint64_t size = file_size(fd.get(), path);
  std::string s(size, '\0');
  if (size) pread_all(fd.get(), s.data(), size, 0, path);
  return s;
}

}  // namespace megatron::checkpoint::io

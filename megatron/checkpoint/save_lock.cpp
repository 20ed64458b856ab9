#include "megatron/checkpoint/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/error.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string who_am_i() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string s = concat("host ", host, ", pid ", ::getpid());
  if (const char* job = std::getenv("SLURM_JOB_ID")) s += concat(", Slurm job ", job);
  return s;
}

}  // namespace

SaveDirLock::SaveDirLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(concat("checkpoint.save: cannot create '", dir, "': ", ec.message()));
  const std::string path = (fs::path(dir) / kLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw InputError(concat("checkpoint.save: cannot open '", path, "': ", io::errno_text(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    if (err == EWOULDBLOCK) {
      char buf[512] = {0};
      const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
      holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "another process";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    }
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw InputError(concat("checkpoint.save: '", dir, "' is in use by another run (", holder,
                              "); two runs saving into one directory would delete each "
                              "other's checkpoints: stop that run or choose another "
                              "checkpoint.save"));
    throw InputError(concat("checkpoint.save: cannot lock '", path, "': ", io::errno_text(err)));
  }
  const std::string me = who_am_i() + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
}

SaveDirLock::~SaveDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace megatron::checkpoint

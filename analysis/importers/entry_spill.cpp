#include "entry_spill.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "memtrace/format/varint.h"

namespace memtrace::snapshot {

namespace {

constexpr size_t kBlock = 1 << 20;         // written and read a MiB at a time
constexpr size_t kBatch = 4096;            // entries handed to the writer's thread at a time
constexpr size_t kMaxRecord = 2 + 7 * 10;  // two bytes of flags, seven varints of 10 bytes at most

// An entry's first byte: its action (0: one this table does not know, else 1 + TorchAction), and
// which of the fields after its address and size it has.
constexpr uint8_t kActionMask = 0x0f, kHasStream = 0x10, kHasFree = 0x20, kHasTime = 0x40, kHasMore = 0x80;
// kHasMore: a second byte follows, saying which of the stack and the category it has.
constexpr uint8_t kHasStack = 0x01, kHasCategory = 0x02;

// Opens an unnamed file in DIR: O_TMPFILE where the file system has it, else a name let go at once.
int open_temporary(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/memtrace-snapshot-entries.XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

}  // namespace

std::unique_ptr<EntrySpill> EntrySpill::create(Follower follower) {
  const char* tmpdir = std::getenv("TMPDIR");
  int fd = open_temporary(tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (fd < 0 && tmpdir && *tmpdir) fd = open_temporary("/tmp");
  if (fd < 0) return nullptr;
  return std::unique_ptr<EntrySpill>(new EntrySpill(fd, std::move(follower)));
}

EntrySpill::~EntrySpill() {
  stop_writer();
  ::close(fd_);
}

void EntrySpill::add(const Entry& e) {
  batch_.push_back(e);
  ++count_;
  if (batch_.size() == kBatch) hand_over();
}

// A full batch goes to the writer's thread (started with the first), which encodes and writes
// it while the caller reads on; where no thread can be had, it is written here.
void EntrySpill::hand_over() {
  if (!writer_.joinable() && !writer_failed_) {
    try {
      writer_ = std::thread([this] { write_batches(); });
    } catch (const std::system_error&) {
      writer_failed_ = true;
    }
  }
  if (writer_failed_) {
    encode(batch_);
    batch_.clear();
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  taken_.wait(lock, [this] { return !handed_full_; });
  handed_.swap(batch_);
  handed_full_ = true;
  lock.unlock();
  handed_cv_.notify_one();
  batch_.clear();
}

void EntrySpill::write_batches() {
  std::vector<Entry> mine;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      handed_cv_.wait(lock, [this] { return handed_full_ || closing_; });
      if (!handed_full_) return;  // closing, nothing left
      mine.swap(handed_);
      handed_full_ = false;
    }
    taken_.notify_one();
    encode(mine);
    mine.clear();
  }
}

void EntrySpill::stop_writer() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  handed_cv_.notify_one();
  writer_.join();
}

void EntrySpill::encode(const std::vector<Entry>& entries) {
  for (const Entry& e : entries) {
    if (follower_) follower_(e);
    if (failed_) continue;
    uint8_t first = e.action ? static_cast<uint8_t>(1 + static_cast<int>(*e.action)) : 0;
    uint8_t more = (e.stack ? kHasStack : 0) | (e.category ? kHasCategory : 0);
    first |= (e.stream ? kHasStream : 0) | (e.device_free != e.addr ? kHasFree : 0) | (e.time_us != -1 ? kHasTime : 0) |
             (more ? kHasMore : 0);
    char record[kMaxRecord];
    char* p = record;
    *p++ = static_cast<char>(first);
    if (more) *p++ = static_cast<char>(more);
    p = put_varint(p, zigzag(static_cast<int64_t>(e.addr - last_addr_)));
    last_addr_ = e.addr;
    p = put_varint(p, e.size);
    if (e.stream) p = put_varint(p, e.stream);
    if (e.device_free != e.addr) p = put_varint(p, e.device_free);
    if (e.time_us != -1) {
      uint64_t change = static_cast<uint64_t>(e.time_us) - static_cast<uint64_t>(last_time_);
      p = put_varint(p, zigzag(static_cast<int64_t>(change)));
      last_time_ = e.time_us;
    }
    if (e.stack) p = put_varint(p, e.stack);
    if (e.category) p = put_varint(p, e.category);
    buffer_.append(record, static_cast<size_t>(p - record));
    if (buffer_.size() >= kBlock) flush();
  }
}

bool EntrySpill::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      error_ = std::string("its entries' temporary file could not be written: ") + std::strerror(errno);
      buffer_.clear();
      return false;
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return true;
}

bool EntrySpill::finish() {
  if (finished_) return !failed_;
  if (!batch_.empty() && writer_.joinable()) hand_over();
  stop_writer();
  encode(batch_);  // what never filled a batch
  batch_ = {};
  if (!failed_) flush();
  buffer_ = {};
  finished_ = true;
  last_addr_ = 0;
  last_time_ = 0;
  return !failed_;
}

bool EntrySpill::refill() {
  buffer_.erase(0, at_);
  at_ = 0;
  size_t had = buffer_.size();
  buffer_.resize(had + kBlock);
  ssize_t n;
  do n = ::pread(fd_, buffer_.data() + had, kBlock, static_cast<off_t>(read_offset_));
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    error_ = std::string("its entries' temporary file could not be read back: ") + std::strerror(errno);
    buffer_.resize(had);
    return false;
  }
  buffer_.resize(had + static_cast<size_t>(n));
  read_offset_ += static_cast<uint64_t>(n);
  at_end_ = n == 0;
  return true;
}

bool EntrySpill::next(Entry& out) {
  if (!finished_ || failed_ || !error_.empty() || count_ == 0) return false;
  if (buffer_.size() - at_ < kMaxRecord && !at_end_ && !refill()) return false;
  if (at_ == buffer_.size()) return false;
  const char* p = buffer_.data() + at_;
  const char* end = buffer_.data() + buffer_.size();
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
      uint8_t b = static_cast<uint8_t>(*p++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  uint8_t first = static_cast<uint8_t>(*p++), more = 0;
  if ((first & kHasMore) && p < end) more = static_cast<uint8_t>(*p++);
  out = Entry();
  uint8_t action = first & kActionMask;
  if (action) out.action = static_cast<TorchAction>(action - 1);
  uint64_t v = 0;
  bool ok = varint(v);
  out.addr = last_addr_ + static_cast<uint64_t>(unzigzag(v));
  last_addr_ = out.addr;
  ok = ok && varint(out.size);
  if (first & kHasStream) ok = ok && varint(out.stream);
  out.device_free = out.addr;
  if (first & kHasFree) ok = ok && varint(out.device_free);
  if (first & kHasTime) {
    ok = ok && varint(v);
    out.time_us = static_cast<int64_t>(static_cast<uint64_t>(last_time_) + static_cast<uint64_t>(unzigzag(v)));
    last_time_ = out.time_us;
  }
  if (more & kHasStack) ok = ok && varint(out.stack);
  if (more & kHasCategory) ok = ok && varint(out.category);
  if (!ok) {  // only what add() wrote is here: the file changed under us
    error_ = "its entries' temporary file was not as written";
    return false;
  }
  at_ = static_cast<size_t>(p - buffer_.data());
  return true;
}

}  // namespace memtrace::snapshot

#include "memtrace/format/chunk_channel.h"

#include <utility>

namespace memtrace {

bool ChunkChannel::put(Item item) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return reading_closed_ || items_.size() < kMaxItems; });
  if (reading_closed_) return false;
  items_.push_back(std::move(item));
  changed_.notify_all();
  return true;
}

bool ChunkChannel::put_bytes(const void* data, size_t size) {
  Item item;
  item.bytes.assign(static_cast<const char*>(data), size);
  return put(std::move(item));
}

bool ChunkChannel::put_events(std::vector<Event>& events) {
  Item item;
  item.is_events = true;
  item.events.swap(events);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_.empty()) {
      events.swap(spare_.back());
      spare_.pop_back();
    }
  }
  events.clear();
  return put(std::move(item));
}

void ChunkChannel::close_writing() {
  std::lock_guard<std::mutex> lock(mutex_);
  writing_closed_ = true;
  changed_.notify_all();
}

bool ChunkChannel::take(Item& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (out.is_events && out.events.capacity() > 0 && spare_.size() < kMaxItems) {
    spare_.push_back(std::move(out.events));
    out.events = {};
  }
  changed_.wait(lock, [this] { return !items_.empty() || writing_closed_ || reading_closed_; });
  if (items_.empty()) return false;
  out = std::move(items_.front());
  items_.pop_front();
  changed_.notify_all();
  return true;
}

void ChunkChannel::close_reading() {
  std::lock_guard<std::mutex> lock(mutex_);
  reading_closed_ = true;
  items_.clear();
  changed_.notify_all();
}

}  // namespace memtrace

// A map from 64-bit keys (addresses, ordinals) to values: open addressing with linear probing and
// backward-shift deletion. The replay looks up every event's address in it, the trace's writer and
// reader every allocation freed by reference, so it is built for that: one cache line a lookup in
// the common case, no node allocation, no tombstones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memtrace {

template <typename Value>
class AddressMap {
 public:
  AddressMap() { rehash(16); }

  const Value* find(uint64_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.full) return nullptr;
      if (s.key == key) return &s.value;
    }
  }
  Value* find(uint64_t key) { return const_cast<Value*>(std::as_const(*this).find(key)); }

  // Inserts VALUE at KEY unless KEY is there; returns the value at KEY and whether it is new.
  std::pair<Value*, bool> try_emplace(uint64_t key, const Value& value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);  // at most 3/4 full
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.full && s.key == key) return {&s.value, false};
      if (!s.full) {
        s = Slot{key, value, true};
        ++size_;
        return {&s.value, true};
      }
    }
  }

  bool erase(uint64_t key) {
    size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (!slots_[i].full) return false;
      if (slots_[i].key == key) break;
    }
    // Shift back the entries after the hole that probed past it, so no lookup stops early.
    for (size_t j = (i + 1) & mask_; slots_[j].full; j = (j + 1) & mask_) {
      size_t k = home(slots_[j].key);
      bool movable = i <= j ? (k <= i || k > j) : (k <= i && k > j);
      if (movable) {
        slots_[i] = std::move(slots_[j]);
        i = j;
      }
    }
    slots_[i].full = false;
    --size_;
    return true;
  }

  size_t size() const { return size_; }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_)
      if (s.full) fn(s.key, s.value);
  }

 private:
  struct Slot {
    uint64_t key = 0;
    Value value{};
    bool full = false;
  };

  size_t home(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (Slot& s : old)
      if (s.full) try_emplace(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace memtrace

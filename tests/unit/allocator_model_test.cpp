// The allocator model's rules (analysis/allocator_model), each against what PyTorch's
// CUDACachingAllocator.cpp (v2.6.0) does, and PYTORCH_CUDA_ALLOC_CONF read as CUDAAllocatorConfig
// reads it.
#include <gtest/gtest.h>

#include "memtrace/allocator_model/alloc_conf.h"
#include "memtrace/allocator_model/caching_allocator_model.h"

namespace memtrace::torch_model {
namespace {

constexpr size_t kMiB = 1 << 20;

AllocConf conf(const std::string& text) {
  std::string error;
  auto c = parse_alloc_conf(text, error);
  EXPECT_TRUE(c) << text << ": " << error;
  return c.value_or(AllocConf{});
}

std::string refusal(const std::string& text) {
  std::string error;
  EXPECT_FALSE(parse_alloc_conf(text, error)) << text;
  return error;
}

TEST(AllocConf, ReadsPyTorchsSyntax) {
  AllocConf c = conf(" expandable_segments:True, max_split_size_mb:512,garbage_collection_threshold:0.6");
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, 512 * kMiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_EQ(conf("").text(), "");
  EXPECT_EQ(conf("roundup_power2_divisions:4").roundup_power2_divisions[15], 4u);
  // The list: the first interval also fills those below it; ">" fills from the last named one on,
  // that one included (v2.6.0: the 512 MiB interval ends with 8, not 2).
  AllocConf list = conf("roundup_power2_divisions:[256:1,512:2,>:8]");
  EXPECT_EQ(list.roundup_power2_divisions[0], 1u);
  EXPECT_EQ(list.roundup_power2_divisions[8], 1u);
  EXPECT_EQ(list.roundup_power2_divisions[9], 8u);
  EXPECT_EQ(list.roundup_power2_divisions[15], 8u);
  EXPECT_EQ(list.divisions_for(300 * kMiB), 1u);   // [256 MiB, 512 MiB): interval 8
  EXPECT_EQ(list.divisions_for(100), 1u);          // below 1 MiB: the first interval
  EXPECT_EQ(list.divisions_for(64ull << 30), 8u);  // past 32 GiB: the last
  EXPECT_EQ(conf(list.text()), list);              // written back in the same syntax
  EXPECT_EQ(conf("pinned_use_cuda_host_register:True,pinned_num_register_threads:8").text(), "");
}

// std::stoi's reading: the leading number, a negative one wrapped as a size_t holds it.
TEST(AllocConf, ReadsNumbersAsStoiDoes) {
  EXPECT_EQ(conf("max_split_size_mb:512MB").max_split_size, 512 * kMiB);
  EXPECT_EQ(conf("max_split_size_mb:-1").max_split_size, SIZE_MAX / kMiB * kMiB);
  EXPECT_DOUBLE_EQ(conf("garbage_collection_threshold:0.6x").garbage_collection_threshold, 0.6);
  // Only the first interval named fills those below it.
  AllocConf list = conf("roundup_power2_divisions:[1:4,256:2]");
  EXPECT_EQ(list.roundup_power2_divisions[0], 4u);
  EXPECT_EQ(list.roundup_power2_divisions[1], 0u);
  EXPECT_EQ(list.roundup_power2_divisions[8], 2u);
  EXPECT_TRUE(conf("release_lock_on_hipmalloc:True").text().empty());
  EXPECT_NE(refusal("max_split_size_mb:99999999999").find("max_split_size_mb"), std::string::npos);
  EXPECT_EQ(refusal("pinned_num_register_threads:3"), "Number of register threads has to be power of 2 ");
}

TEST(AllocConf, RefusesWhatPyTorchRefusesWithItsWords) {
  EXPECT_EQ(refusal("max_split_size_mb:20"), "CachingAllocator option max_split_size_mb too small, must be > 20");
  EXPECT_EQ(refusal("colour:blue"), "Unrecognized CachingAllocator option: colour");
  EXPECT_EQ(refusal("expandable_segments:1"), "Expected a single True/False argument for expandable_segments");
  EXPECT_EQ(refusal("garbage_collection_threshold:1.5"), "garbage_collect_threshold too big, set it 0.0~1.0");
  EXPECT_EQ(refusal("roundup_power2_divisions:3"), "For roundups, the divisons has to be power of 2 ");
  EXPECT_EQ(refusal("roundup_power2_divisions:[300:2]"), "For roundups, the intervals have to be power of 2 ");
  EXPECT_NE(refusal("max_split_size_mb").find("max_split_size_mb"), std::string::npos);
  EXPECT_NE(refusal("max_split_size_mb:lots").find("max_split_size_mb"), std::string::npos);
  EXPECT_NE(refusal("backend:magic").find("native and cudaMallocAsync"), std::string::npos);
}

// Memory for the model: addresses from a counter, bytes against a capacity.
class Memory : public DeviceMemory {
 public:
  explicit Memory(uint64_t capacity = 1ull << 40) : capacity_(capacity) {}
  uint64_t allocate(size_t bytes, PoolId) override {
    if (used + bytes > capacity_) return 0;
    used += bytes;
    ++segments;
    uint64_t at = next_;
    next_ += bytes + kMiB * 2;
    return at;
  }
  void free(uint64_t, size_t bytes, PoolId) override {
    used -= bytes;
    --segments;
  }
  uint64_t reserve_range(size_t bytes) override {
    uint64_t at = next_;
    next_ += bytes;
    return at;
  }
  bool map(uint64_t, size_t bytes, size_t) override {
    if (used + bytes > capacity_) return false;
    used += bytes;
    return true;
  }
  void unmap(uint64_t, size_t bytes, size_t) override { used -= bytes; }
  void free_range(uint64_t, size_t) override {}
  size_t free_bytes() override { return capacity_ - used; }
  size_t total_bytes() override { return capacity_; }
  uint64_t used = 0;
  int segments = 0;

 private:
  uint64_t capacity_, next_ = 1ull << 32;
};

CachingAllocatorModel::Options options(const std::string& text, bool streams_done = true) {
  CachingAllocatorModel::Options o;
  o.conf = conf(text);
  o.release = Release{6};
  o.streams_done_at_malloc = streams_done;
  return o;
}

TEST(AllocatorModel, SegmentSizesAndSplittingAreGetAllocationSizesAndShouldSplits) {
  Memory m;
  CachingAllocatorModel a(m, options(""));
  uint64_t small = a.malloc(1000, 0, 0, nullptr);  // 1 KiB: the small pool's 2 MiB segment
  EXPECT_EQ(m.used, 2 * kMiB);
  uint64_t mid = a.malloc(3 * kMiB, 0, 0, nullptr);  // below 10 MiB: a 20 MiB segment, split
  EXPECT_EQ(m.used, 22 * kMiB);
  a.malloc(5 * kMiB, 0, 0, nullptr);  // from the rest of that segment
  EXPECT_EQ(m.used, 22 * kMiB);
  a.malloc(11 * kMiB + 1, 0, 0, nullptr);  // the 12 MiB left of it (512 B rounding), whole: no split
  EXPECT_EQ(m.used, 22 * kMiB);
  a.malloc(13 * kMiB, 0, 0, nullptr);  // 10 MiB or more: a segment of its size rounded to 2 MiB
  EXPECT_EQ(m.used, 36 * kMiB);
  EXPECT_EQ(a.stats().requested_bytes.all.current,
            static_cast<int64_t>(1000 + 3 * kMiB + 5 * kMiB + 11 * kMiB + 1 + 13 * kMiB));
  EXPECT_TRUE(a.free(small, false));
  EXPECT_TRUE(a.free(mid, false));
  EXPECT_FALSE(a.free(mid, false));  // no longer a live block
  a.empty_cache();                   // the small segment goes; the 20 MiB one still holds the 5 MiB block
  EXPECT_EQ(m.used, 34 * kMiB);
}

TEST(AllocatorModel, MaxSplitSizeKeepsOversizeBlocksWholeAndForTheirOwnSize) {
  Memory m;
  CachingAllocatorModel a(m, options("max_split_size_mb:100"));
  uint64_t big = a.malloc(300 * kMiB, 0, 0, nullptr);
  a.free(big, false);
  // A smaller request does not take the cached 300 MiB block (it would have, split, without the setting).
  a.malloc(50 * kMiB, 0, 0, nullptr);
  EXPECT_EQ(m.used, 350 * kMiB);
  EXPECT_EQ(a.stats().oversize_segments.current, 1);
  // A large request takes it only within kLargeBuffer's rounding (max_non_split_rounding_mb's default).
  uint64_t near = a.malloc(290 * kMiB, 0, 0, nullptr);
  EXPECT_EQ(near, big);
  CachingAllocatorModel plain(m, options(""));
  uint64_t p = plain.malloc(300 * kMiB, 0, 0, nullptr);
  plain.free(p, false);
  EXPECT_EQ(plain.malloc(50 * kMiB, 0, 0, nullptr), p);  // split from the cached block
}

TEST(AllocatorModel, OutOfMemoryReleasesTheCacheAndRetriesFirst) {
  Memory m(100 * kMiB);
  CachingAllocatorModel a(m, options(""));
  uint64_t x = a.malloc(60 * kMiB, 0, 0, nullptr);
  a.free(x, false);
  EXPECT_NE(a.malloc(70 * kMiB, 0, 0, nullptr), 0u);  // the 60 MiB cached segment released, then retried
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  OutOfMemory oom;
  EXPECT_EQ(a.malloc(40 * kMiB, 0, 0, &oom), 0u);
  EXPECT_EQ(oom.alloc_size, 40 * kMiB);
  EXPECT_EQ(a.stats().num_ooms, 1);
}

TEST(AllocatorModel, ARecordStreamFreeWaitsUntilItCompletes) {
  Memory m;
  CachingAllocatorModel a(m, options("", /*streams_done=*/false));
  uint64_t x = a.malloc(12 * kMiB, 0, 0, nullptr);
  a.free(x, true);
  EXPECT_NE(a.malloc(12 * kMiB, 0, 0, nullptr), x);  // still in use on another stream
  EXPECT_TRUE(a.complete_free(x));
  EXPECT_EQ(a.malloc(12 * kMiB, 0, 0, nullptr), x);
}

TEST(AllocatorModel, ExpandableSegmentsGrowOneSegmentByPages) {
  Memory m(1ull << 34);
  CachingAllocatorModel a(m, options("expandable_segments:True"));
  std::vector<uint64_t> blocks;
  for (size_t mib : {12, 15, 18, 21}) blocks.push_back(a.malloc(mib * kMiB, 0, 0, nullptr));
  EXPECT_EQ(a.expandable_segment_count(), 1u);
  EXPECT_EQ(m.used, 80 * kMiB);  // 66 MiB in 20 MiB pages
  EXPECT_EQ(a.segment_count(), a.segments().size());
  a.free(blocks[1], false);
  a.free(blocks[2], false);
  a.empty_cache();  // the pages under the two freed blocks go: two runs of mapped pages
  EXPECT_EQ(a.segments().size(), 2u);
  EXPECT_EQ(a.segment_count(), 2u);
  blocks = {blocks[0], blocks[3]};
  for (uint64_t b : blocks) a.free(b, false);
  a.empty_cache();
  EXPECT_EQ(m.used, 0u);  // every page unmapped
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
}

TEST(AllocatorModel, GarbageCollectionActsOnlyWithAMemoryFraction) {
  for (bool fraction : {false, true}) {
    Memory m;
    CachingAllocatorModel a(m, options("garbage_collection_threshold:0.5"));
    if (fraction) a.set_memory_limit(100 * kMiB);
    uint64_t x = a.malloc(40 * kMiB, 0, 0, nullptr);
    a.free(x, false);
    a.malloc(30 * kMiB, 1, 0, nullptr);  // another stream: the cached block cannot serve it
    a.malloc(30 * kMiB, 2, 0, nullptr);  // 70 MiB reserved, past half of 100 MiB: the cache goes
    EXPECT_EQ(m.used, fraction ? 60 * kMiB : 100 * kMiB) << fraction;
  }
}

// A state adopted from a recording may hold a split block of max_split_size or more, which PyTorch
// never makes: releasing cached oversize blocks must leave it (it is not a whole segment).
TEST(AllocatorModel, AnAdoptedSplitOversizeBlockIsNeverReleased) {
  Memory m(350 * kMiB);
  CachingAllocatorModel a(m, options("max_split_size_mb:64"));
  m.used = 300 * kMiB;  // the adopted segment's bytes, as the replay's memory counts them
  ASSERT_TRUE(a.adopt_segment(1ull << 40, 300 * kMiB, 0, {0, 0}));
  ASSERT_TRUE(a.adopt_block(1ull << 40, 10 * kMiB, 0, 0));
  OutOfMemory oom;
  EXPECT_EQ(a.malloc(100 * kMiB, 0, 0, &oom), 0u);  // no room, and nothing whole to release
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<int64_t>(300 * kMiB));
  EXPECT_TRUE(a.free(1ull << 40, false));  // merges with the rest it was split from
  EXPECT_EQ(a.segments().size(), 1u);
  EXPECT_EQ(a.segments()[0].blocks.size(), 1u);
}

TEST(AllocatorModel, AnExaByteIsRefusedBeforeAnySearch) {
  Memory m;
  CachingAllocatorModel a(m, options(""));
  OutOfMemory oom;
  EXPECT_EQ(a.malloc(size_t(1) << 60, 0, 0, &oom), 0u);
  EXPECT_EQ(a.malloc(SIZE_MAX, 0, 0, &oom), 0u);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
  EXPECT_FALSE(a.adopt_segment(UINT64_MAX - kMiB, 20 * kMiB, 0, {0, 0}));  // past the address space
}

TEST(AllocatorModel, AnAdoptedStateIsServedAsItWas) {
  Memory m;
  CachingAllocatorModel a(m, options(""));
  ASSERT_TRUE(a.adopt_segment(1ull << 40, 20 * kMiB, 7, {0, 0}));
  ASSERT_TRUE(a.adopt_block((1ull << 40) + 4 * kMiB, 3 * kMiB, 7, 0));
  EXPECT_FALSE(a.adopt_block((1ull << 40) + 5 * kMiB, kMiB, 7, 0));  // inside a block already handed out
  EXPECT_EQ(a.malloc(2 * kMiB, 7, 0, nullptr), 1ull << 40);          // the hole before it, best fit
  EXPECT_EQ(a.malloc(12 * kMiB, 7, 0, nullptr), (1ull << 40) + 7 * kMiB);
  EXPECT_EQ(m.segments, 0);  // nothing new
  EXPECT_EQ(a.segments().size(), 1u);
}

}  // namespace
}  // namespace memtrace::torch_model

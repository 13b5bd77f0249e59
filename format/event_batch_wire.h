// An events chunk's body (an EventBatch) written and read straight as bytes, column by column,
// without protobuf's message in between: the reader's thread spent most of its time decoding, the
// collector's most of its time encoding (filling RepeatedFields, then sizing and serializing
// them). Private to the format's writer and reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/format/event.h"

namespace memtrace {

// Writes EVENTS[0..N) as a serialized EventBatch at OUT, which has room for
// event_batch_bound(N) bytes, and returns how many it wrote: the bytes protobuf writes for the
// same columns (count first, then each column, packed, in field order). The layer, stream, aux,
// result, stack, device memory, flags and freed columns are left out when no event needs them.
// FREED holds the freed column's N values (freed_references.h), or is null for none.
size_t encode_event_batch(const Event* events, size_t n, const uint64_t* freed, unsigned char* out);
size_t event_batch_bound(size_t n);

// Makes the batch of BATCH_BYTES bytes at BATCH, which has kEventsChunkRoom bytes of room before
// it, a serialized Chunk (the batch as its events field); returns where the chunk begins.
inline constexpr size_t kEventsChunkRoom = 6;  // the field's tag, and a length of up to 5 bytes
unsigned char* wrap_as_events_chunk(unsigned char* batch, size_t batch_bytes);

// Decodes BATCH into OUT; an event may name no stack id at or above STACK_COUNT. FREED gets the
// freed column's values (freed_references.h), none when the batch has none; without FREED (a
// snapshot's own batches) a batch with the column is refused. Returns what is wrong, or nothing.
std::string decode_event_batch(const pb::EventBatch& batch, uint64_t stack_count, std::vector<Event>& out,
                               std::vector<uint64_t>* freed);

// Decodes the serialized EventBatch at BYTES (SIZE bytes) into OUT and FREED straight from its
// bytes, when it is a valid batch as memtrace writes it (count first, then each column once,
// packed, in field order, every varint as protobuf reads it). False for anything else, valid or
// not (fields in another order, unpacked or split columns, unknown fields, a column that
// disagrees with the count, an unknown stack): the caller parses those with protobuf and decodes
// them with the function above, which reads them as protobuf does and says what is wrong.
bool decode_event_batch_as_written(const unsigned char* bytes, size_t size, uint64_t stack_count,
                                   std::vector<Event>& out, std::vector<uint64_t>& freed);

}  // namespace memtrace

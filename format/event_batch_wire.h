// An events chunk's body (an EventBatch) decoded straight from its bytes into Events, column by
// column, without protobuf's message in between: the reader's thread spent most of its time
// there. Private to the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/format/event.h"

namespace memtrace {

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

// cuptiSubscribe_v2's parameters as CUPTI 13.3 takes them, for code built against older headers
// (the toolkit here is 13.0's): CUPTI 13.2 added a request for several subscribers, which CUPTI
// 13.3 (CUPTI_API_VERSION 130300) and a driver of r610 or later honour. "If 1, requesting to allow
// multiple subscribers ... cuptiSubscribe_v2 will return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
// if the request cannot be fulfilled"; the first subscriber decides for every later one
// (docs.nvidia.com/cupti/api/structCUpti__SubscriberParams.html, and the usage guide's
// "Multiple Subscribers" section, docs.nvidia.com/cupti/main/main.html, 2.4).
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>

namespace memtrace::cupti {

// The first CUPTI that honours the request.
inline constexpr uint32_t kMultipleSubscribersVersion = 130300;

// CUpti_SubscriberParams with its CUPTI 13.2 member. structSize tells CUPTI which members there
// are: sizeof this struct, as code built against newer headers sends it.
struct SubscriberParams {
  CUpti_SubscriberParams base;
  uint8_t allowMultipleSubscribers;
  uint8_t padding[7];
};
static_assert(offsetof(SubscriberParams, allowMultipleSubscribers) == sizeof(CUpti_SubscriberParams));

// Whether PARAMS (as a caller passed them) ask for several subscribers.
inline bool asks_for_several(const CUpti_SubscriberParams* params) {
  return params && params->structSize > offsetof(SubscriberParams, allowMultipleSubscribers) &&
         reinterpret_cast<const SubscriberParams*>(params)->allowMultipleSubscribers == 1;
}

}  // namespace memtrace::cupti

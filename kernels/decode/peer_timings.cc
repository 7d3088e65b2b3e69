#include "kernels/decode/peer_timings.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mlaps::bench {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<double> Number(const Struct& row, const std::string& key, int index,
                              const std::string& array) {
  const auto it = row.fields().find(key);
  if (it == row.fields().end() || it->second.kind_case() != Value::kNumberValue ||
      !std::isfinite(it->second.number_value())) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer timings: ", array, "[", index, "] has no number '", key, "'"));
  }
  return it->second.number_value();
}

}  // namespace

absl::StatusOr<std::vector<PeerTiming>> ParsePeerTimings(const std::string& json) {
  Struct doc;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &doc);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer timings: not a JSON object: ", std::string(parsed.message())));
  }
  std::vector<PeerTiming> rows;
  for (const std::string array : {"dense", "sparse"}) {
    const auto it = doc.fields().find(array);
    if (it == doc.fields().end()) continue;
    if (it->second.kind_case() != Value::kListValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer timings: '", array, "' is not an array"));
    }
    int index = 0;
    for (const Value& v : it->second.list_value().values()) {
      if (v.kind_case() != Value::kStructValue) {
        return absl::InvalidArgumentError(
            absl::StrCat("peer timings: ", array, "[", index, "] is not an object"));
      }
      const Struct& row = v.struct_value();
      PeerTiming t;
      t.sparse = array == "sparse";
      const auto kind = row.fields().find("kind");
      if (kind != row.fields().end() && kind->second.kind_case() == Value::kStringValue) {
        t.kind = kind->second.string_value();
      }
      for (auto [key, field] : {std::pair<const char*, int*>{"b", &t.batch},
                                {"ctx", &t.ctx},
                                {"h_q", &t.heads},
                                {"s_q", &t.qlen}}) {
        const absl::StatusOr<double> x = Number(row, key, index, array);
        if (!x.ok()) return x.status();
        *field = static_cast<int>(*x);
      }
      if (t.sparse) {
        const absl::StatusOr<double> topk = Number(row, "topk", index, array);
        if (!topk.ok()) return topk.status();
        t.topk = static_cast<int>(*topk);
      }
      const absl::StatusOr<double> us = Number(row, "median_us", index, array);
      if (!us.ok()) return us.status();
      t.median_us = *us;
      const auto meta_field = row.fields().find("eager_meta_us");
      if (meta_field != row.fields().end() &&
          meta_field->second.kind_case() != Value::kNullValue) {  // null: the peer had none
        const absl::StatusOr<double> meta = Number(row, "eager_meta_us", index, array);
        if (!meta.ok()) return meta.status();
        t.meta_us = *meta;
      }
      rows.push_back(t);
      ++index;
    }
  }
  return rows;
}

const PeerTiming* FindPeerTiming(const std::vector<PeerTiming>& rows, bool sparse, int batch,
                                 int ctx, int heads, int qlen, int topk) {
  for (const PeerTiming& t : rows) {
    if (t.sparse != sparse || t.batch != batch || t.heads != heads || t.qlen != qlen) continue;
    if (sparse ? t.topk == topk : t.ctx == ctx) return &t;
  }
  return nullptr;
}

}  // namespace mlaps::bench

// Conversions between mlaps' structs and their text-format protos (proto/mlaps.proto), and
// text-format file reading / writing, so batches and plans can be saved and replayed.
#ifndef MLAPS_METADATA_PROTO_IO_H_
#define MLAPS_METADATA_PROTO_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/proto/mlaps.pb.h"
#include "metadata/work_plan.h"

namespace mlaps {

proto::Batch BatchToProto(const Batch& batch);
// Errors: InvalidArgument for an unknown arch or dtype name. The batch is not validated
// (call ValidateBatch).
absl::StatusOr<Batch> BatchFromProto(const proto::Batch& p);

proto::PlanOptions OptionsToProto(const PlanOptions& options);
absl::StatusOr<PlanOptions> OptionsFromProto(const proto::PlanOptions& p);

proto::WorkPlan PlanToProto(const WorkPlan& plan);
// Errors: InvalidArgument when reduce_final_map has an odd number of entries.
absl::StatusOr<WorkPlan> PlanFromProto(const proto::WorkPlan& p);

// Text format. Errors: InvalidArgument with the parser's line:column message.
absl::Status ParseTextProto(absl::string_view text, google::protobuf::Message* message);
std::string PrintTextProto(const google::protobuf::Message& message);

// Files. Errors: NotFound / PermissionDenied naming the path, or the parse error.
absl::Status ReadTextProtoFile(const std::string& path, google::protobuf::Message* message);
absl::Status WriteTextProtoFile(const std::string& path, const google::protobuf::Message& message);

}  // namespace mlaps

#endif  // MLAPS_METADATA_PROTO_IO_H_

#include "metadata/proto_io.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace mlaps {
namespace {

template <typename T>
std::vector<int32_t> ToVector(const T& repeated) {
  return std::vector<int32_t>(repeated.begin(), repeated.end());
}

// Collects the text parser's errors as one message.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!error_.empty()) error_ += "; ";
    absl::StrAppend(&error_, "line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

proto::Batch BatchToProto(const Batch& batch) {
  proto::Batch p;
  p.set_arch(std::string(ArchName(batch.arch)));
  p.set_q_dtype(std::string(DTypeName(batch.q_dtype)));
  p.set_kv_dtype(std::string(DTypeName(batch.kv_dtype)));
  p.set_num_heads(batch.num_heads);
  p.set_page_size(batch.page_size);
  p.mutable_qo_indptr()->Add(batch.qo_indptr.begin(), batch.qo_indptr.end());
  p.mutable_kv_indptr()->Add(batch.kv_indptr.begin(), batch.kv_indptr.end());
  p.mutable_kv_last_page_lens()->Add(batch.kv_last_page_lens.begin(),
                                     batch.kv_last_page_lens.end());
  p.set_causal(batch.causal);
  p.set_cp_round_robin(batch.cp_round_robin);
  p.set_sparse_topk(batch.sparse_topk);
  return p;
}

absl::StatusOr<Batch> BatchFromProto(const proto::Batch& p) {
  Batch batch;
  absl::StatusOr<Arch> arch = ParseArch(p.arch());
  if (!arch.ok()) return arch.status();
  absl::StatusOr<DType> q = ParseDType(p.q_dtype());
  if (!q.ok()) return q.status();
  absl::StatusOr<DType> kv = ParseDType(p.kv_dtype());
  if (!kv.ok()) return kv.status();
  batch.arch = *arch;
  batch.q_dtype = *q;
  batch.kv_dtype = *kv;
  batch.num_heads = p.num_heads();
  batch.page_size = p.page_size();
  batch.qo_indptr = ToVector(p.qo_indptr());
  batch.kv_indptr = ToVector(p.kv_indptr());
  batch.kv_last_page_lens = ToVector(p.kv_last_page_lens());
  batch.causal = p.causal();
  batch.cp_round_robin = p.cp_round_robin();
  batch.sparse_topk = p.sparse_topk();
  return batch;
}

proto::PlanOptions OptionsToProto(const PlanOptions& o) {
  proto::PlanOptions p;
  p.set_num_cu(o.num_cu);
  p.set_kv_granularity(o.kv_granularity);
  p.set_fixed_overhead(o.fixed_overhead);
  p.set_max_split_per_batch(o.max_split_per_batch);
  p.set_policy(std::string(PolicyName(o.policy)));
  p.set_kv_lanes(o.kv_lanes);
  p.set_lse(o.lse);
  return p;
}

absl::StatusOr<PlanOptions> OptionsFromProto(const proto::PlanOptions& p) {
  PlanOptions o;
  o.num_cu = p.num_cu();
  o.kv_granularity = p.kv_granularity();
  o.fixed_overhead = p.fixed_overhead();
  o.kv_lanes = p.kv_lanes();
  o.max_split_per_batch = p.max_split_per_batch();
  absl::StatusOr<PlanPolicy> policy = ParsePolicy(p.policy());
  if (!policy.ok()) return policy.status();
  o.policy = *policy;
  o.lse = p.lse();
  return o;
}

proto::WorkPlan PlanToProto(const WorkPlan& plan) {
  proto::WorkPlan p;
  p.set_variant(plan.variant);
  p.set_rows_per_tile(plan.rows_per_tile);
  p.set_tokens_per_tile(plan.tokens_per_tile);
  p.set_head_fold(plan.head_fold);
  p.set_num_cu(plan.num_cu);
  p.mutable_work_indptr()->Add(plan.work_indptr.begin(), plan.work_indptr.end());
  for (const WorkInfo& w : plan.work_info) {
    proto::WorkItem* item = p.add_work();
    item->set_batch_idx(w.batch_idx);
    item->set_partial_qo_loc(w.partial_qo_loc);
    item->set_qo_start(w.qo_start);
    item->set_qo_end(w.qo_end);
    item->set_kv_start(w.kv_start);
    item->set_kv_end(w.kv_end);
    item->set_kv_offset(w.kv_offset);
  }
  p.mutable_reduce_indptr()->Add(plan.reduce_indptr.begin(), plan.reduce_indptr.end());
  p.mutable_reduce_final_map()->Add(plan.reduce_final_map.begin(), plan.reduce_final_map.end());
  p.mutable_reduce_partial_map()->Add(plan.reduce_partial_map.begin(),
                                      plan.reduce_partial_map.end());
  p.set_num_partial_rows(plan.num_partial_rows);
  p.mutable_qo_indptr()->Add(plan.qo_indptr.begin(), plan.qo_indptr.end());
  return p;
}

absl::StatusOr<WorkPlan> PlanFromProto(const proto::WorkPlan& p) {
  if (p.reduce_final_map_size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce_final_map has ", p.reduce_final_map_size(), " entries; must be pairs"));
  }
  WorkPlan plan;
  plan.variant = p.variant();
  plan.rows_per_tile = p.rows_per_tile();
  plan.tokens_per_tile = p.tokens_per_tile();
  plan.head_fold = p.head_fold() == 0 ? 1 : p.head_fold();
  plan.num_cu = p.num_cu();
  plan.work_indptr = ToVector(p.work_indptr());
  for (const proto::WorkItem& item : p.work()) {
    plan.work_info.push_back({item.batch_idx(), item.partial_qo_loc(), item.qo_start(),
                              item.qo_end(), item.kv_start(), item.kv_end(), item.kv_offset(), 0});
  }
  plan.reduce_indptr = ToVector(p.reduce_indptr());
  plan.reduce_final_map = ToVector(p.reduce_final_map());
  plan.reduce_partial_map = ToVector(p.reduce_partial_map());
  plan.num_partial_rows = p.num_partial_rows();
  plan.qo_indptr = ToVector(p.qo_indptr());
  return plan;
}

absl::Status ParseTextProto(absl::string_view text, google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse ", message->GetTypeName(), ": ", errors.error()));
  }
  return absl::OkStatus();
}

std::string PrintTextProto(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(message, &text);
  return text;
}

absl::Status ReadTextProtoFile(const std::string& path, google::protobuf::Message* message) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "' for reading"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::Status s = ParseTextProto(buffer.str(), message);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status WriteTextProtoFile(const std::string& path, const google::protobuf::Message& message) {
  std::ofstream out(path);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open '", path, "' for writing"));
  }
  out << PrintTextProto(message);
  if (!out) return absl::DataLossError(absl::StrCat("write to '", path, "' failed"));
  return absl::OkStatus();
}

}  // namespace mlaps

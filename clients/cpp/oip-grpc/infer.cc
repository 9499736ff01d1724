// Runs two models on a netaccel node over the Open Inference Protocol's gRPC service,
// with grpc++ stubs generated from the node's protos (the Makefile): to_uppercase on
// bytes, topk with its parameter k, and topk without it (refused, INVALID_ARGUMENT).
// Usage: infer HOST:PORT (the node's gRPC listener).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "grpc_service.grpc.pb.h"

namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

void AddInput(ModelInferRequest& request, const std::string& datatype, int64_t length) {
  auto* input = request.add_inputs();
  input->set_name("INPUT0");
  input->set_datatype(datatype);
  input->add_shape(length);
}

// A deadline per call: a node that does not answer ends the program, not hangs it.
std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

// Little-endian 32-bit integers, as the protocol's raw contents carry them.
std::string Int32s(std::initializer_list<int32_t> values) {
  std::string bytes;
  for (int32_t v : values) {
    auto u = static_cast<uint32_t>(v);
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>((u >> shift) & 0xff));
  }
  return bytes;
}

int32_t Int32At(const std::string& bytes, size_t at) {
  uint32_t u = 0;
  for (int i = 3; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(bytes[at + i]);
  return static_cast<int32_t>(u);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: infer HOST:PORT\n";
    return 2;
  }
  auto node = GRPCInferenceService::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));

  ModelInferRequest upper;
  upper.set_model_name("to_uppercase");
  const std::string text = "hello, grpc";
  AddInput(upper, "UINT8", static_cast<int64_t>(text.size()));
  upper.add_raw_input_contents(text);
  ModelInferResponse answer;
  grpc::Status status = node->ModelInfer(Context().get(), upper, &answer);
  if (!status.ok()) {
    std::cerr << "to_uppercase: " << status.error_message() << "\n";
    return 1;
  }
  std::cout << answer.outputs(0).name() << " " << answer.raw_output_contents(0) << "\n";

  ModelInferRequest topk;
  topk.set_model_name("topk");
  AddInput(topk, "INT32", 5);
  topk.add_raw_input_contents(Int32s({3, 9, 1, 7, 5}));
  ModelInferRequest with_k = topk;
  (*with_k.mutable_parameters())["k"].set_int64_param(3);
  status = node->ModelInfer(Context().get(), with_k, &answer);
  if (!status.ok()) {
    std::cerr << "topk: " << status.error_message() << "\n";
    return 1;
  }
  const std::string& out = answer.raw_output_contents(0);
  for (size_t at = 0; at + 4 <= out.size(); at += 4) std::cout << (at ? " " : "") << Int32At(out, at);
  std::cout << "\n";

  status = node->ModelInfer(Context().get(), topk, &answer);  // no k
  if (status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
    std::cerr << "topk without k: code " << status.error_code() << "\n";
    return 1;
  }
  std::cout << "INVALID_ARGUMENT " << status.error_message() << "\n";
  return 0;
}

package io.netaccel.examples;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import inference.GRPCInferenceServiceGrpc;
import inference.GRPCInferenceServiceGrpc.GRPCInferenceServiceBlockingStub;
import inference.GrpcService.InferParameter;
import inference.GrpcService.ModelInferRequest;
import inference.GrpcService.ModelInferRequest.InferInputTensor;
import inference.GrpcService.ModelInferResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * Runs two models on a netaccel node over the Open Inference Protocol's gRPC service,
 * with stubs generated from the node's protos: {@code to_uppercase} on bytes, {@code topk}
 * with its parameter {@code k}, and {@code topk} without it (refused, INVALID_ARGUMENT).
 * Usage: {@code Infer HOST:PORT} (the node's gRPC listener).
 */
public final class Infer {
  private Infer() {}

  public static void main(String[] args) throws InterruptedException {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(args[0]).usePlaintext().build();
    try {
      GRPCInferenceServiceBlockingStub node =
          GRPCInferenceServiceGrpc.newBlockingStub(channel).withDeadlineAfter(30, TimeUnit.SECONDS);
      byte[] text = "hello, grpc".getBytes(StandardCharsets.UTF_8);
      ModelInferResponse upper = node.modelInfer(ModelInferRequest.newBuilder()
          .setModelName("to_uppercase")
          .addInputs(input("UINT8", text.length))
          .addRawInputContents(ByteString.copyFrom(text))
          .build());
      System.out.println(upper.getOutputs(0).getName() + " "
          + upper.getRawOutputContents(0).toString(StandardCharsets.UTF_8));

      ByteBuffer values = ByteBuffer.allocate(20).order(ByteOrder.LITTLE_ENDIAN);
      for (int v : new int[] {3, 9, 1, 7, 5}) {
        values.putInt(v);
      }
      ModelInferRequest topk = ModelInferRequest.newBuilder()
          .setModelName("topk")
          .addInputs(input("INT32", 5))
          .addRawInputContents(ByteString.copyFrom(values.array()))
          .build();
      ModelInferResponse top = node.modelInfer(topk.toBuilder()
          .putParameters("k", InferParameter.newBuilder().setInt64Param(3).build())
          .build());
      ByteBuffer out = top.getRawOutputContents(0).asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
      System.out.println(out.getInt() + " " + out.getInt() + " " + out.getInt());
      try {
        node.modelInfer(topk); // no k
      } catch (StatusRuntimeException e) {
        System.out.println(e.getStatus().getCode() + " " + e.getStatus().getDescription());
      }
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private static InferInputTensor input(String datatype, long length) {
    return InferInputTensor.newBuilder().setName("INPUT0").setDatatype(datatype).addShape(length).build();
  }
}

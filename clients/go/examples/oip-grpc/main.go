// Command infer runs two models on a netaccel node over the Open Inference Protocol's
// gRPC service, with grpc-go stubs generated from the node's protos (build.sh):
// to_uppercase on bytes, topk with its parameter k, and topk without it (refused,
// InvalidArgument). Usage: infer HOST:PORT (the node's gRPC listener).
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"netaccel.dev/examples/oip-grpc/inference"
)

func main() {
	conn, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	node := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	text := []byte("hello, grpc")
	upper, err := node.ModelInfer(ctx, &inference.ModelInferRequest{
		ModelName:        "to_uppercase",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{input("UINT8", len(text))},
		RawInputContents: [][]byte{text},
	})
	check(err)
	fmt.Println(upper.Outputs[0].Name, string(upper.RawOutputContents[0]))

	values := binary.LittleEndian.AppendUint32(nil, 3)
	for _, v := range []uint32{9, 1, 7, 5} {
		values = binary.LittleEndian.AppendUint32(values, v)
	}
	topk := &inference.ModelInferRequest{
		ModelName:        "topk",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{input("INT32", 5)},
		RawInputContents: [][]byte{values},
	}
	withK := &inference.ModelInferRequest{
		ModelName:        topk.ModelName,
		Inputs:           topk.Inputs,
		RawInputContents: topk.RawInputContents,
		Parameters: map[string]*inference.InferParameter{
			"k": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}},
		},
	}
	top, err := node.ModelInfer(ctx, withK)
	check(err)
	out := top.RawOutputContents[0]
	for i := 0; i+4 <= len(out); i += 4 {
		if i > 0 {
			fmt.Print(" ")
		}
		fmt.Print(int32(binary.LittleEndian.Uint32(out[i:])))
	}
	fmt.Println()

	if _, err := node.ModelInfer(ctx, topk); err != nil { // no k
		s := status.Convert(err)
		fmt.Println(s.Code(), s.Message())
	}
}

func input(datatype string, n int) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: "INPUT0", Datatype: datatype, Shape: []int64{int64(n)}}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

package netaccel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"netaccel.dev/client"
)

// A call, pipelined calls, and a typed error (needs a node at 127.0.0.1:9400).
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, err := netaccel.Dial(ctx, "127.0.0.1:9400", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	top, _ := node.Call(ctx, "topk", netaccel.Params{"k": 3}, []byte{5, 0, 0, 0, 9, 0, 0, 0})
	fmt.Println(len(top) / 4)
	a := node.Go(ctx, &netaccel.Request{Accelerator: "echo", Payload: []byte("a")})
	b := node.Go(ctx, &netaccel.Request{Accelerator: "echo", Payload: []byte("b")})
	outB, _ := b.Wait(ctx) // in any order: each result is matched to its call
	outA, _ := a.Wait(ctx)
	fmt.Println(string(outA), string(outB))
	_, err = node.Call(ctx, "minmax", nil, []byte{0, 0, 0xc0, 0x7f}) // NaN
	var e *netaccel.Error
	if errors.As(err, &e) && e.Kind == netaccel.KindBadRequest {
		fmt.Println("refused:", e.Status)
	}
}

// Calls through the registry's binding of function "shout".
func ExampleBind() {
	ctx := context.Background()
	registry := netaccel.NewRegistry("http://10.0.0.1:7400,http://10.0.0.2:7400", "")
	shout, err := netaccel.Bind(ctx, registry, "shout", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shout.Release(ctx)
	out, err := shout.Call(ctx, nil, []byte("hello"))
	fmt.Println(string(out), err)
}

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

var testSlots = map[string]string{"n0/d-sobel/0": "sobel", "n1/d-sobel/0": "sobel", "n0/d-echo/0": "echo"}

func bound(id, node, device string, slot uint32, gen uint64) *Binding {
	return &Binding{ID: id, Function: "f", Node: &node, Device: &device, Slot: &slot, Generation: gen}
}

// op: an operation on function f from call to ret (in ms).
func op(client int, f, inst, acc string, call, ret int64, out modelOutput) porcupine.Operation {
	if ret < 0 {
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: modelInput{F: f, Fn: "f", Inst: inst, Acc: acc},
		Call: call, Output: out, Return: ret}
}

func check(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(registryModel(testSlots), ops, 10*time.Second)
}

func TestALegalHistoryPasses(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, FPutFn, "", "sobel", 0, 10, modelOutput{Status: 200}),
		op(1, FPostInst, "i0", "", 20, 30, modelOutput{Status: 201, Binding: bound("i0", "n0", "d-sobel", 0, 2)}),
		// A migration between two reads: the generation grew.
		op(2, FGetInst, "i0", "", 40, 50, modelOutput{Status: 200, Binding: bound("i0", "n1", "d-sobel", 0, 4)}),
		op(0, FGetFn, "", "", 60, 70, modelOutput{Status: 200, Doc: &FnDoc{Name: "f", Accelerator: "sobel",
			Instances: []Binding{*bound("i0", "n1", "d-sobel", 0, 4)}}}),
		// Concurrent: a delete and a read that did or did not see it.
		op(1, FDelInst, "i0", "", 80, 100, modelOutput{Status: 204}),
		op(2, FGetInst, "i0", "", 85, 95, modelOutput{Status: 200, Binding: bound("i0", "n1", "d-sobel", 0, 4)}),
		op(0, FGetInst, "i0", "", 110, 120, modelOutput{Status: 404}),
		// A delete whose answer was lost, and a read that saw it done.
		op(1, FDelFn, "", "", 130, -1, modelOutput{Unknown: true}),
		op(2, FGetFn, "", "", 140, 150, modelOutput{Status: 404}),
	}
	if got := check(t, ops); got != porcupine.Ok {
		t.Fatalf("a legal history was judged %s", got)
	}
}

func TestEachBrokenPromiseIsCaught(t *testing.T) {
	put := op(0, FPutFn, "", "sobel", 0, 10, modelOutput{Status: 200})
	// A creation answered 201 is two operations (see Operations): the creation and
	// a read of the binding it answered.
	created := op(1, FPostInst, "i0", "", 20, 30, modelOutput{Status: 201})
	answered := op(1, FGetInst, "i0", "", 20, 30, modelOutput{Status: 200, Binding: bound("i0", "n0", "d-sobel", 0, 3)})
	cases := map[string]porcupine.Operation{
		"a read misses a write that completed before it": op(2, FGetFn, "", "", 40, 50, modelOutput{Status: 200,
			Doc: &FnDoc{Name: "f", Accelerator: "sobel", Instances: []Binding{}}}),
		"a generation goes back": op(2, FGetInst, "i0", "", 40, 50, modelOutput{Status: 200,
			Binding: bound("i0", "n1", "d-sobel", 0, 2)}),
		"one generation, two places": op(2, FGetInst, "i0", "", 40, 50, modelOutput{Status: 200,
			Binding: bound("i0", "n1", "d-sobel", 0, 3)}),
		"a slot holding another accelerator": op(2, FGetInst, "i0", "", 40, 50, modelOutput{Status: 200,
			Binding: bound("i0", "n0", "d-echo", 0, 5)}),
		"a slot no node has": op(2, FGetInst, "i0", "", 40, 50, modelOutput{Status: 200,
			Binding: bound("i0", "n9", "d-sobel", 0, 5)}),
		"one instance listed twice": op(2, FGetFn, "", "", 40, 50, modelOutput{Status: 200,
			Doc: &FnDoc{Name: "f", Accelerator: "sobel", Instances: []Binding{
				*bound("i0", "n0", "d-sobel", 0, 3), *bound("i0", "n0", "d-sobel", 0, 3)}}}),
		"a second creation of one id":            op(2, FPostInst, "i0", "", 40, 50, modelOutput{Status: 201}),
		"a delete of what is there answered 404": op(2, FDelInst, "i0", "", 40, 50, modelOutput{Status: 404}),
	}
	for name, bad := range cases {
		if got := check(t, []porcupine.Operation{put, created, answered, bad}); got != porcupine.Illegal {
			t.Errorf("%s: judged %s", name, got)
		}
	}
}

func TestAnInstanceSeenUnboundWhileItsCreationPlacesItPasses(t *testing.T) {
	unbound := Binding{ID: "i0", Function: "f", Generation: 1}
	records := []Record{
		{Type: TypeSetup},
		{Type: TypeInvoke, Op: 1, F: FPutFn, Fn: "f", Acc: "sobel", Time: 0},
		{Type: TypeOK, Op: 1, F: FPutFn, Fn: "f", Status: 200, Time: 10},
		{Type: TypeInvoke, Op: 2, F: FPostInst, Fn: "f", Inst: "i0", Time: 20},
		{Type: TypeInvoke, Op: 3, F: FGetFn, Fn: "f", Time: 22},
		{Type: TypeOK, Op: 3, F: FGetFn, Fn: "f", Status: 200, Time: 25,
			Doc: &FnDoc{Name: "f", Accelerator: "sobel", Instances: []Binding{unbound}}},
		{Type: TypeOK, Op: 2, F: FPostInst, Fn: "f", Inst: "i0", Status: 201, Time: 30,
			Binding: bound("i0", "n0", "d-sobel", 0, 2)},
	}
	if got := check(t, Operations(records, 0)); got != porcupine.Ok {
		t.Fatalf("judged %s", got)
	}
}

func TestOperationsPairsRecordsAndDropsFailures(t *testing.T) {
	records := []Record{
		{Type: TypeSetup},
		{Type: TypeInvoke, Op: 1, F: FPutFn, Fn: "f", Acc: "sobel", Time: 100},
		{Type: TypeInvoke, Op: 2, F: FGetFn, Fn: "f", Time: 110},
		{Type: TypeInvoke, Op: 3, F: FDelFn, Fn: "f", Time: 120},
		{Type: TypeInvoke, Op: 4, F: FPostInst, Fn: "f", Inst: "i", Time: 125},
		{Type: TypeOK, Op: 1, Status: 200, Time: 130},
		{Type: TypeInfo, Op: 2, Time: 140}, // a read without an answer: dropped
		{Type: TypeFail, Op: 3, Time: 150}, // certainly not done: dropped
		{Type: TypeInvoke, Op: 5, F: FPutNode, Node: "n0", Time: 160},
		// op 4 never completes: open until the end
	}
	ops := Operations(records, 0)
	if len(ops) != 2 {
		t.Fatalf("%d operations: %+v", len(ops), ops)
	}
	if ops[0].Call != 100 || ops[0].Return != 130 || ops[1].Return != math.MaxInt64 {
		t.Fatalf("times: %+v", ops)
	}
	if !ops[1].Output.(modelOutput).Unknown {
		t.Fatalf("an operation without completion is not open: %+v", ops[1])
	}
}

func TestALostNodeStillBoundIsAnAnomaly(t *testing.T) {
	node := "n0"
	b := bound("i0", node, "d-sobel", 0, 2)
	s := int64(time.Second)
	setup := Record{Type: TypeSetup, LeaseMs: 1000, ElectionTTLMs: 1000}
	history := func(readAt int64) []Record {
		return []Record{setup,
			{Type: TypeNemesis, F: NodeLoss, Phase: "start", Target: node, Time: 10 * s},
			{Type: TypeInvoke, Op: 1, F: FGetInst, Fn: "f", Inst: "i0", Time: readAt},
			{Type: TypeOK, Op: 1, F: FGetInst, Fn: "f", Inst: "i0", Status: 200, Binding: b, Time: readAt + s/100},
			{Type: TypeNemesis, F: NodeLoss, Phase: "end", Target: node, Time: 30 * s},
		}
	}
	if got := checkLostNodes(history(11*s), setup); len(got) != 0 {
		t.Fatalf("within the lease: %v", got)
	}
	got := checkLostNodes(history(20*s), setup)
	if len(got) != 1 || !strings.Contains(got[0], "bound to node n0") {
		t.Fatalf("long after the lease: %v", got)
	}
}

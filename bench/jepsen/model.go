package main

// The model of the registry's state that porcupine checks the history against, one
// function at a time (the registry's operations never touch two functions, so a history
// is linearizable if and only if each function's part of it is; porcupine checks the
// parts in parallel, which is what makes minutes of history checkable).
//
// A function's state: whether it exists, its accelerator, and for each instance the
// last binding a linearized operation saw (its generation and its place
// "node/device/slot"). What the model allows:
//
//   - at most one binding per instance, and a function document lists exactly the
//     instances the operations before it left;
//   - a binding's slot is one the simulated nodes registered, holding the function's
//     accelerator (never a slot holding another accelerator);
//   - generations only grow, and a binding with the generation already seen is the
//     same place; background work (migration, placing unbound instances) may change a
//     binding between operations, which the model accepts as long as the generation
//     grew.
//
// What it does not decide: whether a binding names a node whose lease ran out (that
// depends on time, not on order: checkLostNodes does it).

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

type modelInput struct {
	F, Fn, Inst, Acc string
}

type modelOutput struct {
	Unknown bool // the operation's outcome is not known (TypeInfo or no completion)
	Status  int
	Binding *Binding
	Doc     *FnDoc
}

type instState struct {
	Gen   uint64
	Place string
	Known bool // false after a creation whose answer was lost: any binding fits
}

type fnState struct {
	Exists bool
	Acc    string
	Inst   map[string]instState
}

func (s fnState) with(id string, is instState) fnState {
	inst := make(map[string]instState, len(s.Inst)+1)
	for k, v := range s.Inst {
		inst[k] = v
	}
	inst[id] = is
	return fnState{Exists: s.Exists, Acc: s.Acc, Inst: inst}
}

func (s fnState) without(id string) fnState {
	inst := make(map[string]instState, len(s.Inst))
	for k, v := range s.Inst {
		if k != id {
			inst[k] = v
		}
	}
	return fnState{Exists: s.Exists, Acc: s.Acc, Inst: inst}
}

// registryModel is the model for a cluster whose slots hold the accelerators in
// slots ("node/device/slot" → accelerator).
func registryModel(slots map[string]string) porcupine.Model {
	return porcupine.Model{
		Partition: partitionByFunction,
		Init:      func() interface{} { return fnState{Inst: map[string]instState{}} },
		Step: func(state, in, out interface{}) (bool, interface{}) {
			return step(slots, state.(fnState), in.(modelInput), out.(modelOutput))
		},
		Equal:             equalStates,
		DescribeOperation: describeOperation,
		DescribeState:     describeState,
	}
}

func partitionByFunction(history []porcupine.Operation) [][]porcupine.Operation {
	byFn := map[string][]porcupine.Operation{}
	var names []string
	for _, op := range history {
		fn := op.Input.(modelInput).Fn
		if _, ok := byFn[fn]; !ok {
			names = append(names, fn)
		}
		byFn[fn] = append(byFn[fn], op)
	}
	sort.Strings(names)
	parts := make([][]porcupine.Operation, 0, len(names))
	for _, fn := range names {
		parts = append(parts, byFn[fn])
	}
	return parts
}

func step(slots map[string]string, s fnState, in modelInput, out modelOutput) (bool, interface{}) {
	if out.Unknown {
		return true, applyUnknown(s, in)
	}
	_, present := s.Inst[in.Inst]
	switch in.F {
	case FPutFn:
		return out.Status == 200, fnState{Exists: true, Acc: in.Acc, Inst: map[string]instState{}}
	case FDelFn:
		if out.Status == 404 {
			return !s.Exists, s
		}
		return out.Status == 204 && s.Exists, fnState{Inst: map[string]instState{}}
	case FPostInst:
		switch out.Status {
		case 404:
			return !s.Exists, s
		case 201:
			// The creation; the binding answered is checked as a read (Operations).
			if !s.Exists || present {
				return false, s
			}
			return true, s.with(in.Inst, instState{})
		case 200:
			if !s.Exists || !present {
				return false, s
			}
			return seeBinding(slots, s, in, out.Binding)
		case 409:
			// NO_DEVICE: no slot could take it, nothing was created.
			return s.Exists && !present, s
		}
	case FDelInst:
		if out.Status == 404 {
			return !present, s
		}
		return out.Status == 204 && present, s.without(in.Inst)
	case FGetInst:
		if out.Status == 404 {
			return !present, s
		}
		if out.Status != 200 || !present {
			return false, s
		}
		return seeBinding(slots, s, in, out.Binding)
	case FGetFn:
		if out.Status == 404 {
			return !s.Exists, s
		}
		return seeDocument(slots, s, in, out)
	}
	return false, s
}

// applyUnknown: the effect of an operation whose answer was lost, had it taken
// effect (porcupine places it last when it had none).
func applyUnknown(s fnState, in modelInput) fnState {
	switch in.F {
	case FPutFn:
		return fnState{Exists: true, Acc: in.Acc, Inst: map[string]instState{}}
	case FDelFn:
		return fnState{Inst: map[string]instState{}}
	case FPostInst:
		if _, present := s.Inst[in.Inst]; s.Exists && !present {
			return s.with(in.Inst, instState{})
		}
	case FDelInst:
		return s.without(in.Inst)
	}
	return s
}

// seeBinding checks binding b of instance in.Inst against s; the state with b seen.
func seeBinding(slots map[string]string, s fnState, in modelInput, b *Binding) (bool, interface{}) {
	if b == nil || b.ID != in.Inst || b.Function != in.Fn {
		return false, s
	}
	place := b.Place()
	if place != "" && slots[place] != s.Acc {
		return false, s // an unknown slot, or one holding another accelerator
	}
	if cur := s.Inst[in.Inst]; cur.Known {
		if b.Generation < cur.Gen || (b.Generation == cur.Gen && place != cur.Place) {
			return false, s
		}
	}
	return true, s.with(in.Inst, instState{Gen: b.Generation, Place: place, Known: true})
}

func seeDocument(slots map[string]string, s fnState, in modelInput, out modelOutput) (bool, interface{}) {
	doc := out.Doc
	if out.Status != 200 || doc == nil || !s.Exists || doc.Name != in.Fn || doc.Accelerator != s.Acc {
		return false, s
	}
	if len(doc.Instances) != len(s.Inst) {
		return false, s
	}
	next := interface{}(s)
	listed := make(map[string]bool, len(doc.Instances))
	for i := range doc.Instances {
		b := &doc.Instances[i]
		if _, present := s.Inst[b.ID]; !present || listed[b.ID] {
			return false, s // not an instance, or one instance listed twice
		}
		listed[b.ID] = true
		var ok bool
		ok, next = seeBinding(slots, next.(fnState), modelInput{F: FGetInst, Fn: in.Fn, Inst: b.ID}, b)
		if !ok {
			return false, s
		}
	}
	return true, next
}

func equalStates(a, b interface{}) bool {
	x, y := a.(fnState), b.(fnState)
	if x.Exists != y.Exists || x.Acc != y.Acc || len(x.Inst) != len(y.Inst) {
		return false
	}
	for k, v := range x.Inst {
		if w, ok := y.Inst[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func describeOperation(in, out interface{}) string {
	i, o := in.(modelInput), out.(modelOutput)
	target := i.Fn
	if i.Inst != "" {
		target += "/" + i.Inst
	}
	if i.Acc != "" {
		target += " " + i.Acc
	}
	result := fmt.Sprint(o.Status)
	switch {
	case o.Unknown:
		result = "?"
	case o.Binding != nil:
		result += fmt.Sprintf(" g%d %s", o.Binding.Generation, o.Binding.Place())
	case o.Doc != nil:
		var parts []string
		for _, b := range o.Doc.Instances {
			parts = append(parts, fmt.Sprintf("%s g%d %s", b.ID, b.Generation, b.Place()))
		}
		result += " " + o.Doc.Accelerator + " [" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%s(%s) -> %s", i.F, target, result)
}

func describeState(state interface{}) string {
	s := state.(fnState)
	if !s.Exists {
		return "absent"
	}
	ids := make([]string, 0, len(s.Inst))
	for id := range s.Inst {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		is := s.Inst[id]
		if !is.Known {
			parts = append(parts, id+" ?")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s g%d %s", id, is.Gen, is.Place))
	}
	return s.Acc + " [" + strings.Join(parts, ", ") + "]"
}

// Operations turns a history into porcupine's operations: fails are dropped (they
// changed nothing), reads whose answer was lost are dropped, writes whose answer was
// lost stay open until the end. A read may be answered from a copy up to staleness
// old (a follower's, or a leader's that has not yet noticed it was deposed), so it is
// checked as if invoked that much earlier.
func Operations(records []Record, staleness int64) []porcupine.Operation {
	invokes := map[int64]Record{}
	var ops []porcupine.Operation
	add := func(inv Record, out modelOutput, ret int64) {
		call := inv.Time
		if isRead(inv.F) {
			call -= staleness
		}
		ops = append(ops, porcupine.Operation{
			ClientId: inv.Client,
			Input:    modelInput{F: inv.F, Fn: inv.Fn, Inst: inv.Inst, Acc: inv.Acc},
			Call:     call,
			Output:   out,
			Return:   ret,
		})
	}
	for _, r := range records {
		if r.F == FPutNode {
			continue
		}
		switch r.Type {
		case TypeInvoke:
			invokes[r.Op] = r
		case TypeOK:
			inv := invokes[r.Op]
			delete(invokes, r.Op)
			if inv.F == FPostInst && r.Status == 201 {
				// Two steps in the registry (ops.rs): the instance is created (and
				// may be seen unbound meanwhile), then placed, and the binding read
				// back. So two operations of the same interval: the creation, and a
				// read of what it answered.
				add(inv, modelOutput{Status: 201}, r.Time)
				inv.F = FGetInst
				add(inv, modelOutput{Status: 200, Binding: r.Binding}, r.Time)
				continue
			}
			add(inv, modelOutput{Status: r.Status, Binding: r.Binding, Doc: r.Doc}, r.Time)
		case TypeFail:
			delete(invokes, r.Op)
		case TypeInfo:
			inv := invokes[r.Op]
			delete(invokes, r.Op)
			switch {
			case isRead(inv.F) || notSent(r):
			case r.Status == 404 && (inv.F == FPutFn || inv.F == FPostInst):
				// Done, then undone by a concurrent delete before the answer was
				// read back (the client's note): the write certainly happened
				// within its interval, which keeps it from staying open.
				add(inv, modelOutput{Status: map[string]int{FPutFn: 200, FPostInst: 201}[inv.F]}, r.Time)
			default:
				add(inv, modelOutput{Unknown: true}, math.MaxInt64)
			}
		}
	}
	for _, inv := range invokes {
		if !isRead(inv.F) {
			add(inv, modelOutput{Unknown: true}, math.MaxInt64)
		}
	}
	return ops
}

func isRead(f string) bool { return f == FGetFn || f == FGetInst }

// notSent: the registry answered that it could not even connect to etcd, so its
// transaction was never sent and a write of one transaction did nothing (a POST of an
// instance commits twice, creation then placement: the first may have gone through).
func notSent(r Record) bool {
	return r.F != FPostInst && r.Status == 503 && strings.Contains(r.Error, "tcp connect error")
}

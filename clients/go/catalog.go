package netaccel

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// Params are an accelerator's parameters by name ("k", "width", "eps", …), laid out
// in the 44-byte parameter block by the catalog.
type Params map[string]float64

type paramSpec struct {
	name     string
	float    bool // f32, else u32
	offset   int
	required bool
}

type builtin struct {
	id     uint16
	params []paramSpec
}

// builtins is the catalog of the built-in accelerators (spec/accelerators.md).
var builtins = map[string]builtin{
	"echo":         {1, nil},
	"to_uppercase": {2, nil},
	"topk":         {3, []paramSpec{{"k", false, 0, true}}},
	"logit":        {4, []paramSpec{{"eps", true, 0, false}}},
	"minmax":       {5, nil},
	"sobel":        {6, []paramSpec{{"width", false, 0, true}, {"height", false, 4, true}}},
	"matmul":       {7, []paramSpec{{"n", false, 0, true}}},
}

// BuiltinID is the id of a built-in accelerator, false when there is none by that name.
func BuiltinID(name string) (uint16, bool) {
	b, ok := builtins[name]
	return b.id, ok
}

// EncodeParams lays out params for built-in accelerator name, refusing an unknown
// accelerator (KindUnknownAccelerator) or parameter, a missing required one, or a value
// the accelerator rejects before it runs (KindBadRequest).
func EncodeParams(name string, params Params) (uint16, [ParamsLen]byte, error) {
	var block [ParamsLen]byte
	b, ok := builtins[name]
	if !ok {
		return 0, block, &Error{Kind: KindUnknownAccelerator, Message: name + " is not a built-in accelerator; call it by id (Request.ID)"}
	}
	if len(params) > 0 {
		if err := refuseUnknown(name, b, params); err != nil {
			return 0, block, err
		}
	}
	for _, s := range b.params {
		v, given := params[s.name]
		if !given && s.required {
			return 0, block, &Error{Kind: KindBadRequest, Message: fmt.Sprintf("%s needs parameter %q", name, s.name)}
		}
		if s.float {
			binary.LittleEndian.PutUint32(block[s.offset:], math.Float32bits(float32(v)))
			continue
		}
		if v < 1 || v > math.MaxUint32 || v != math.Trunc(v) {
			return 0, block, &Error{Kind: KindBadRequest, Message: fmt.Sprintf("%s: %s must be a whole number >= 1, not %v", name, s.name, v)}
		}
		binary.LittleEndian.PutUint32(block[s.offset:], uint32(v))
	}
	return b.id, block, nil
}

// refuseUnknown refuses the first parameter, in name order, that accelerator name
// does not take.
func refuseUnknown(name string, b builtin, params Params) error {
	known := map[string]bool{}
	for _, s := range b.params {
		known[s.name] = true
	}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !known[k] {
			return &Error{Kind: KindBadRequest, Message: fmt.Sprintf("%s takes no parameter %q", name, k)}
		}
	}
	return nil
}

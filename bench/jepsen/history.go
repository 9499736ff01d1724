package main

// The history: every operation a client invoked and how it completed, every fault the
// nemesis started and healed, as JSON lines. The checker reads only this file, so a
// saved history can be checked again (`jepsen check FILE`) without the cluster.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Record types, in the order Jepsen names them.
const (
	TypeInvoke  = "invoke"  // a client sent the operation
	TypeOK      = "ok"      // it took effect, with this result
	TypeFail    = "fail"    // it certainly did not take effect
	TypeInfo    = "info"    // unknown: it may or may not have taken effect
	TypeNemesis = "nemesis" // a fault started or ended
	TypeSetup   = "setup"   // the cluster's shape, first line
)

// Operation names (Record.F).
const (
	FPutFn    = "put_fn"    // PUT /v1/functions/{fn} {"accelerator":A,"instances":0}
	FDelFn    = "del_fn"    // DELETE /v1/functions/{fn}
	FGetFn    = "get_fn"    // GET /v1/functions/{fn}
	FPostInst = "post_inst" // POST /v1/functions/{fn}/instances {"id":I}
	FDelInst  = "del_inst"  // DELETE /v1/functions/{fn}/instances/{I}
	FGetInst  = "get_inst"  // GET /v1/functions/{fn}/instances/{I}
	FPutNode  = "put_node"  // PUT /v1/nodes/{node}: a simulated node's lease renewal
)

// Binding is the part of the registry's binding the model checks.
type Binding struct {
	ID         string  `json:"id"`
	Function   string  `json:"function"`
	Node       *string `json:"node"`
	Device     *string `json:"device"`
	Slot       *uint32 `json:"slot"`
	Generation uint64  `json:"generation"`
}

// Place is "node/device/slot", or "" when unbound.
func (b *Binding) Place() string {
	if b.Node == nil || b.Device == nil || b.Slot == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s/%d", *b.Node, *b.Device, *b.Slot)
}

// FnDoc is the part of a function document the model checks.
type FnDoc struct {
	Name        string    `json:"name"`
	Accelerator string    `json:"accelerator"`
	Instances   []Binding `json:"instances"`
}

// Record is one line of the history.
type Record struct {
	Type    string `json:"type"`
	Op      int64  `json:"op,omitempty"`      // pairs an invoke with its completion
	Client  int    `json:"client,omitempty"`  // the client (or node) that ran it
	F       string `json:"f,omitempty"`       // operation, or fault kind for nemesis
	Fn      string `json:"fn,omitempty"`      // function
	Inst    string `json:"inst,omitempty"`    // instance id
	Acc     string `json:"acc,omitempty"`     // accelerator, for put_fn
	Node    string `json:"node,omitempty"`    // simulated node, for put_node
	Replica string `json:"replica,omitempty"` // the replica that answered
	Status  int    `json:"status,omitempty"`  // HTTP status
	Error   string `json:"error,omitempty"`
	// The answer: a binding (post_inst, get_inst) or a function document (get_fn).
	Binding *Binding `json:"binding,omitempty"`
	Doc     *FnDoc   `json:"doc,omitempty"`
	// Nemesis: "start" or "end", and what it hit.
	Phase  string `json:"phase,omitempty"`
	Target string `json:"target,omitempty"`
	// Setup: every simulated slot ("node/device/slot") and the accelerator it holds,
	// and the timings the checks depend on.
	Slots           map[string]string `json:"slots,omitempty"`
	LeaseMs         int64             `json:"lease_ms,omitempty"`
	ElectionTTLMs   int64             `json:"election_ttl_ms,omitempty"`
	ReadStalenessMs int64             `json:"read_staleness_ms,omitempty"`
	// Wall-clock time, nanoseconds since the Unix epoch.
	Time int64 `json:"time"`
}

// Recorder appends records to a file, one JSON object a line, in the order they
// happened (a mutex orders concurrent clients; times come from one clock).
type Recorder struct {
	mu   sync.Mutex
	out  *bufio.Writer
	file *os.File
	next int64
}

// NewRecorder creates (truncates) path.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Recorder{out: bufio.NewWriterSize(f, 1<<16), file: f}, nil
}

// Write stamps r with the time (when unset) and appends it.
func (rec *Recorder) Write(r Record) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if r.Time == 0 {
		r.Time = time.Now().UnixNano()
	}
	line, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("a record that cannot be encoded: %v", err))
	}
	rec.out.Write(line)
	rec.out.WriteByte('\n')
}

// Invoke records the start of an operation; its op number, for the completion.
func (rec *Recorder) Invoke(r Record) int64 {
	rec.mu.Lock()
	rec.next++
	r.Op = rec.next
	rec.mu.Unlock()
	r.Type = TypeInvoke
	rec.Write(r)
	return r.Op
}

// Close flushes and closes the file.
func (rec *Recorder) Close() error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err := rec.out.Flush(); err != nil {
		return err
	}
	return rec.file.Close()
}

// ReadHistory parses a history file.
func ReadHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var records []Record
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; scanner.Scan(); line++ {
		var r Record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		records = append(records, r)
	}
	return records, scanner.Err()
}

package main

// The checks over a saved history, and the figures of a run: porcupine's verdict on
// the model (model.go), the time-based check that no binding names a node whose
// lease had run out, operation counts, faults by kind, and the longest time without a
// successful write around each kind of fault.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// After a node's lease runs out the registry needs a moment to migrate its instances
// (its lease check runs a few times a second); a read that still finds the node bound
// later than this is an anomaly.
const migrationGrace = 2 * time.Second

// Verdict is what a check says, saved as verdict.json.
type Verdict struct {
	Valid            bool              `json:"valid"`
	Linearizable     string            `json:"linearizable"` // "ok", "illegal" or "unknown" (timed out)
	OperationsKnown  int               `json:"operations_checked"`
	OperationsOpen   int               `json:"operations_unknown_outcome"`
	Records          map[string]int    `json:"records_by_type"`
	ByOperation      map[string]int    `json:"completions_by_operation"`
	Faults           map[string]int    `json:"faults_by_kind"`
	FaultsLeftOut    map[string]string `json:"faults_left_out"` // kinds this machine could not inject, and why
	UnavailabilityMs map[string]int64  `json:"longest_write_unavailability_ms_by_fault"`
	Anomalies        []string          `json:"anomalies"`
	CheckMs          int64             `json:"check_ms"`
}

// Check decides a history; with html set, porcupine's visualisation is written there.
func Check(records []Record, timeout time.Duration, html string) (Verdict, error) {
	if len(records) == 0 || records[0].Type != TypeSetup {
		return Verdict{}, fmt.Errorf("the history does not start with its setup record")
	}
	setup := records[0]
	v := Verdict{Records: map[string]int{}, ByOperation: map[string]int{}, Faults: map[string]int{},
		FaultsLeftOut:    map[string]string{},
		UnavailabilityMs: map[string]int64{}, Anomalies: []string{}}
	for _, r := range records {
		v.Records[r.Type]++
		if r.Type == TypeOK || r.Type == TypeFail || r.Type == TypeInfo {
			v.ByOperation[r.F+" "+r.Type]++
		}
		if r.Type == TypeNemesis && r.Phase == "start" {
			v.Faults[r.F]++
		}
		if r.Type == TypeNemesis && r.Phase == "refused" {
			v.FaultsLeftOut[r.F] = r.Error
		}
	}
	staleness := setup.ReadStalenessMs * int64(time.Millisecond)
	ops := Operations(records, staleness)
	for _, op := range ops {
		if op.Output.(modelOutput).Unknown {
			v.OperationsOpen++
		} else {
			v.OperationsKnown++
		}
	}
	model := registryModel(setup.Slots)
	started := time.Now()
	result, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v.CheckMs = time.Since(started).Milliseconds()
	v.Linearizable = string(result)
	if result == porcupine.Illegal {
		v.Anomalies = append(v.Anomalies, "not linearizable: see the visualisation for the longest linearizable prefix of each function")
		for _, where := range firstIllegal(model, ops, timeout) {
			v.Anomalies = append(v.Anomalies, "first illegal operation of "+where)
		}
	}
	if html != "" {
		if err := porcupine.VisualizePath(model, info, html); err != nil {
			return v, err
		}
	}
	v.Anomalies = append(v.Anomalies, checkLostNodes(records, setup)...)
	v.Anomalies = append(v.Anomalies, checkWorkload(records)...)
	v.UnavailabilityMs = unavailability(records)
	v.Valid = result == porcupine.Ok && len(v.Anomalies) == 0
	return v, nil
}

// processFaults may change who leads: a new leader gives every node a fresh lease.
func processFault(kind string) bool {
	return kind != NodeLoss && kind != NetemLeader
}

// checkLostNodes: a binding read while its node had been down longer than its lease
// (plus a takeover's fresh lease, plus the migration's grace) is an anomaly.
func checkLostNodes(records []Record, setup Record) []string {
	lease := time.Duration(setup.LeaseMs) * time.Millisecond
	ttl := time.Duration(setup.ElectionTTLMs) * time.Millisecond
	staleness := time.Duration(setup.ReadStalenessMs) * time.Millisecond
	type down struct{ from, to int64 }
	downs := map[string][]down{}
	var takeovers []int64
	invokes := map[int64]Record{}
	for _, r := range records {
		switch {
		case r.Type == TypeInvoke:
			invokes[r.Op] = r
		case r.Type == TypeNemesis && r.F == NodeLoss && r.Phase == "start":
			downs[r.Target] = append(downs[r.Target], down{from: r.Time, to: 1 << 62})
		case r.Type == TypeNemesis && r.F == NodeLoss && r.Phase == "end":
			d := downs[r.Target]
			d[len(d)-1].to = r.Time
		case r.Type == TypeNemesis && r.Phase != "refused" && processFault(r.F):
			takeovers = append(takeovers, r.Time+int64(ttl))
		}
	}
	// A renewal in flight when the node "crashed" may land late: count from its end.
	for node, ds := range downs {
		for i := range ds {
			for _, r := range records {
				if r.F == FPutNode && r.Node == node && r.Type != TypeInvoke &&
					invokes[r.Op].Time < ds[i].from && r.Time > ds[i].from {
					ds[i].from = r.Time
				}
			}
		}
	}
	var anomalies []string
	for _, r := range records {
		if r.Type != TypeOK {
			continue
		}
		var bindings []Binding
		if r.Binding != nil {
			bindings = append(bindings, *r.Binding)
		}
		if r.Doc != nil {
			bindings = append(bindings, r.Doc.Instances...)
		}
		inv := invokes[r.Op]
		for _, b := range bindings {
			if b.Node == nil {
				continue
			}
			for _, d := range downs[*b.Node] {
				base := d.from
				for _, t := range takeovers {
					if t > base && t < inv.Time {
						base = t
					}
				}
				limit := base + int64(lease+migrationGrace+staleness)
				if inv.Time > limit && r.Time < d.to {
					anomalies = append(anomalies, fmt.Sprintf(
						"op %d (%s %s/%s) at %s: bound to node %s, down since %s (lease %v)",
						r.Op, r.F, r.Fn, b.ID, time.Unix(0, inv.Time).UTC().Format(time.RFC3339Nano),
						*b.Node, time.Unix(0, d.from).UTC().Format(time.RFC3339Nano), lease))
				}
			}
		}
	}
	return anomalies
}

// unavailability: for each fault kind, the longest time without a successful (2xx)
// write that overlaps one of its faults (faults come one at a time, so a gap that began
// during a fault and ended after it was healed is that fault's).
func unavailability(records []Record) map[string]int64 {
	var oks []int64
	type fault struct {
		kind       string
		start, end int64
	}
	var faults []fault
	open := map[string]int{}
	for _, r := range records {
		switch {
		case r.Type == TypeOK && !isRead(r.F) && r.Status/100 == 2:
			// A write that changed something (a 404 or 409 may come from a cache).
			oks = append(oks, r.Time)
		case r.Type == TypeNemesis && r.Phase == "start":
			open[r.F+r.Target] = len(faults)
			faults = append(faults, fault{kind: r.F, start: r.Time, end: r.Time})
		case r.Type == TypeNemesis && r.Phase == "end":
			faults[open[r.F+r.Target]].end = r.Time
		}
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i] < oks[j] })
	longest := map[string]int64{}
	for _, f := range faults {
		for k := 0; k+1 < len(oks); k++ {
			if oks[k+1] < f.start || oks[k] > f.end {
				continue
			}
			if gap := (oks[k+1] - oks[k]) / int64(time.Millisecond); gap > longest[f.kind] {
				longest[f.kind] = gap
			}
		}
	}
	return longest
}

// SaveVerdict writes v as indented JSON.
func SaveVerdict(v Verdict, path string) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// firstIllegal: for each function whose history is not linearizable, the operation
// that makes it so (the shortest prefix, in order of completion, that is illegal
// ends with it), described.
func firstIllegal(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) []string {
	var found []string
	for _, part := range partitionByFunction(ops) {
		sorted := append([]porcupine.Operation{}, part...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Return < sorted[j].Return })
		single := model
		single.Partition = nil
		illegal := func(n int) bool {
			return porcupine.CheckOperationsTimeout(single, prefix(part, sorted[n-1].Return), timeout) == porcupine.Illegal
		}
		if !illegal(len(sorted)) {
			continue
		}
		lo, hi := 1, len(sorted) // illegal(hi) holds
		for lo < hi {
			mid := (lo + hi) / 2
			if illegal(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		op := sorted[hi-1]
		found = append(found, fmt.Sprintf("%s: client %d, %s, invoked %s, answered %s",
			op.Input.(modelInput).Fn, op.ClientId, describeOperation(op.Input, op.Output),
			stamp(op.Call), stamp(op.Return)))
	}
	return found
}

// prefix: the history as it stood at time t: what had returned by then, and the
// writes sent but not yet answered, open (their answers are not known yet).
func prefix(ops []porcupine.Operation, t int64) []porcupine.Operation {
	var kept []porcupine.Operation
	for _, op := range ops {
		switch {
		case op.Return <= t:
			kept = append(kept, op)
		case op.Call <= t && !isRead(op.Input.(modelInput).F):
			op.Output, op.Return = modelOutput{Unknown: true}, math.MaxInt64
			kept = append(kept, op)
		}
	}
	return kept
}

func stamp(ns int64) string {
	if ns == math.MaxInt64 {
		return "never"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}

// checkWorkload: a history in which the registry refused the workload's requests as
// invalid, or in which no instance was ever placed, checks less than it claims (a bug
// of the test, not of the registry, but one that must not pass unnoticed).
func checkWorkload(records []Record) []string {
	var problems []string
	refused := map[string]int{}
	placed := 0
	for _, r := range records {
		if r.Type != TypeOK {
			continue
		}
		if r.Status == 400 {
			refused[r.F+": "+r.Error]++
		}
		if r.Binding != nil && r.Binding.Place() != "" {
			placed++
		}
	}
	for _, what := range sortedKeys(refused) {
		problems = append(problems, fmt.Sprintf("the workload: %d requests refused as invalid (%s)", refused[what], what))
	}
	if placed == 0 && len(records) > 1000 {
		problems = append(problems, "the workload: no instance was ever seen placed, so no binding was checked")
	}
	return problems
}

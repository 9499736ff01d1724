package netaccel

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type vector struct {
	Name      string  `json:"name"`
	HeaderHex string  `json:"header_hex"`
	Payload   string  `json:"payload_hex"`
	Expect    *string `json:"expect_output_hex"`
}

func specFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "spec", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every vector of spec/rac-v1-vectors.json decodes and encodes to the same 64 bytes.
func TestVectorsRoundTripByteForByte(t *testing.T) {
	var vectors []vector
	if err := json.Unmarshal(specFile(t, "rac-v1-vectors.json"), &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 6 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, v := range vectors {
		raw, _ := hex.DecodeString(v.HeaderHex)
		var again [HeaderLen]byte
		switch raw[4] {
		case kindCall, kindControl:
			h, err := DecodeCallHeader(raw)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			again = h.Encode()
			payload, _ := hex.DecodeString(v.Payload)
			if int(h.PayloadLen) != len(payload) {
				t.Errorf("%s: payload_len %d, payload %d bytes", v.Name, h.PayloadLen, len(payload))
			}
		default:
			h, err := DecodeResultHeader(raw, ResultPayloadMax)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			again = h.Encode()
		}
		if !bytes.Equal(again[:], raw) {
			t.Errorf("%s: encodes to %x, not %x", v.Name, again, raw)
		}
	}
}

// Parameters by name lay out the blocks the vectors carry.
func TestParamsByNameMatchTheVectors(t *testing.T) {
	want := map[string]struct {
		name   string
		params Params
	}{
		"topk k=3 over [5,-3,9,9,0,2]": {"topk", Params{"k": 3}},
		"sobel 4x4":                    {"sobel", Params{"width": 4, "height": 4}},
	}
	var vectors []vector
	_ = json.Unmarshal(specFile(t, "rac-v1-vectors.json"), &vectors)
	found := 0
	for _, v := range vectors {
		w, ok := want[v.Name]
		if !ok {
			continue
		}
		found++
		raw, _ := hex.DecodeString(v.HeaderHex)
		id, block, err := EncodeParams(w.name, w.params)
		if err != nil || id != uint16(raw[6]) || !bytes.Equal(block[:], raw[20:]) {
			t.Errorf("%s: id %d block %x err %v", v.Name, id, block, err)
		}
	}
	if found != len(want) {
		t.Fatalf("found %d of %d vectors", found, len(want))
	}
	var e *Error
	if _, _, err := EncodeParams("topk", Params{"k": 0}); !errors.As(err, &e) || e.Kind != KindBadRequest {
		t.Errorf("k=0: %v", err)
	}
	if _, _, err := EncodeParams("topk", Params{"kk": 1}); !errors.As(err, &e) || e.Kind != KindBadRequest {
		t.Errorf("kk: %v", err)
	}
	if _, _, err := EncodeParams("nope", nil); !errors.As(err, &e) || e.Kind != KindUnknownAccelerator {
		t.Errorf("nope: %v", err)
	}
}

// Result headers v1 does not define are refused, each for its reason.
func TestMalformedResultHeadersAreRefused(t *testing.T) {
	good := (&ResultHeader{Status: StatusOK, RequestID: 7, Slot: NoSlot}).Encode()
	cases := map[string]func(b []byte){
		"bad_magic":         func(b []byte) { b[0] = 'X' },
		"wrong_direction":   func(b []byte) { b[4] = kindCall },
		"unknown_kind":      func(b []byte) { b[4] = 9 },
		"non_zero_flags":    func(b []byte) { b[5] = 1 },
		"non_zero_reserved": func(b []byte) { b[63] = 1 },
		"unknown_status":    func(b []byte) { b[6] = 10 },
		"payload_too_large": func(b []byte) { b[11] = 0xFF },
	}
	for reason, spoil := range cases {
		b := good
		spoil(b[:])
		_, err := DecodeResultHeader(b[:], ResultPayloadMax)
		var he *HeaderError
		if !errors.As(err, &he) || he.Reason != reason {
			t.Errorf("%s: got %v", reason, err)
		}
	}
	if _, err := DecodeResultHeader(good[:30], ResultPayloadMax); err == nil {
		t.Error("a short header was accepted")
	}
}

// oneConnNode listens on a free loopback port, serves the first connection made to
// it with serve (which may return at any time: the connection is closed then), and
// returns the address; the listener is closed when the test ends.
func oneConnNode(t testing.TB, serve func(net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		serve(conn)
	}()
	return l.Addr().String()
}

// fakeNode answers the calls it reads in reverse order of arrival, once `batch`
// have arrived; with batch 0 it reads one call and closes.
func fakeNode(t *testing.T, batch int) string {
	return oneConnNode(t, func(conn net.Conn) {
		var got []CallHeader
		var payloads [][]byte
		for len(got) < max(batch, 1) {
			head := make([]byte, HeaderLen)
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			h, _ := DecodeCallHeader(head)
			p := make([]byte, h.PayloadLen)
			io.ReadFull(conn, p)
			got, payloads = append(got, h), append(payloads, p)
		}
		if batch == 0 {
			return
		}
		for i := len(got) - 1; i >= 0; i-- {
			r := (&ResultHeader{Status: StatusOK, PayloadLen: uint32(len(payloads[i])), RequestID: got[i].RequestID, AccelID: got[i].AccelID}).Encode()
			conn.Write(append(r[:], payloads[i]...))
		}
		time.Sleep(time.Second)
	})
}

// Results that come in another order than the calls reach their own callers.
func TestPipelinedResultsAreMatchedById(t *testing.T) {
	ctx := context.Background()
	c, err := Dial(ctx, fakeNode(t, 8), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pending []*Pending
	for i := 0; i < 8; i++ {
		pending = append(pending, c.Go(ctx, &Request{Accelerator: "echo", Payload: []byte{byte(i)}}))
	}
	for i, p := range pending {
		out, err := p.Wait(ctx)
		if err != nil || !bytes.Equal(out, []byte{byte(i)}) {
			t.Fatalf("call %d: %x %v", i, out, err)
		}
	}
}

// A node that closes mid-call gives KindClosed; a silent one, the context's deadline.
func TestAClosedOrSilentNodeGivesATypedErrorNotAHang(t *testing.T) {
	ctx := context.Background()
	c, err := Dial(ctx, fakeNode(t, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(ctx, "echo", nil, []byte("x"))
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindClosed {
		t.Fatalf("closed: %v", err)
	}
	silent := fakeNode(t, 2) // waits for a second call that never comes
	c2, err := Dial(ctx, silent, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c2.Call(short, "echo", nil, []byte("x"))
	if !errors.As(err, &e) || e.Kind != KindDeadline || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent: %v", err)
	}
}

// A deadline from the context is sent as the call's deadline_us.
func TestTheContextDeadlineBecomesTheNodeDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	us := deadlineUs(ctx, 0)
	if us < 1_500_000 || us > 2_000_000 {
		t.Fatalf("deadline_us %d", us)
	}
	if deadlineUs(context.Background(), 0) != 0 || deadlineUs(context.Background(), time.Nanosecond) != 1 {
		t.Fatal("no deadline must be 0 and a tiny one at least 1 us")
	}
}

// Every header of spec/rac-v1-refused.json is refused, for the reason it names.
func TestRefusedVectorsAreRefusedForTheirReason(t *testing.T) {
	var refused []struct {
		Name      string `json:"name"`
		HeaderHex string `json:"header_hex"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(specFile(t, "rac-v1-refused.json"), &refused); err != nil || len(refused) == 0 {
		t.Fatalf("%d vectors, %v", len(refused), err)
	}
	for _, v := range refused {
		raw, _ := hex.DecodeString(v.HeaderHex)
		_, err := DecodeResultHeader(raw, ResultPayloadMax)
		var he *HeaderError
		if !errors.As(err, &he) || he.Reason != v.Reason {
			t.Errorf("%s: got %v, want %s", v.Name, err, v.Reason)
		}
	}
}

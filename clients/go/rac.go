// Package netaccel is the Go client of netaccel nodes: RAC v1 calls over TCP or TLS
// (mutual TLS with a client certificate), many calls in flight on one connection with
// results matched by request id in completion order, parameters by name from the
// built-in catalog, node-side deadlines from a context, typed errors
// (errors.As(err, &*netaccel.Error)), and the registry's binding: an instance of a
// function whose node is found, followed across migrations and failed over between
// registry replicas.
//
//	c, err := netaccel.Dial(ctx, "127.0.0.1:9400", nil)
//	out, err := c.Call(ctx, "topk", netaccel.Params{"k": 3}, payload)
//
// The wire format is spec/rac-v1.md; this file is its encoder and decoder, pure
// functions over byte slices. The standard library is the only dependency.
package netaccel

import (
	"encoding/binary"
	"fmt"
)

// Wire constants of RAC v1.
const (
	HeaderLen      = 64
	ParamsLen      = 44
	ControlID      = 0xFFFF
	NoSlot         = 0xFFFF
	kindCall       = 0x01
	kindResult     = 0x02
	kindControl    = 0x03
	kindControlRes = 0x04
)

var magic = [4]byte{'R', 'A', 'C', '1'}

// Status is a result's status code.
type Status uint16

// The statuses of RAC v1.
const (
	StatusOK Status = iota
	StatusBadRequest
	StatusUnknownAccelerator
	StatusBusy
	StatusTooLarge
	StatusDeadlineExceeded
	StatusUnavailable
	StatusUnauthorized
	StatusInternal
	StatusProtocolError
)

var statusNames = [...]string{"OK", "BAD_REQUEST", "UNKNOWN_ACCELERATOR", "BUSY", "TOO_LARGE",
	"DEADLINE_EXCEEDED", "UNAVAILABLE", "UNAUTHORIZED", "INTERNAL", "PROTOCOL_ERROR"}

// String is the status's upper-case name, as the spec writes it.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", uint16(s))
}

// CallHeader is the header of a call (or, with AccelID ControlID, a control message).
type CallHeader struct {
	Control    bool
	AccelID    uint16
	PayloadLen uint32
	RequestID  uint32
	DeadlineUs uint32
	Params     [ParamsLen]byte
}

// Encode writes the header's 64 bytes.
func (h *CallHeader) Encode() [HeaderLen]byte {
	var b [HeaderLen]byte
	copy(b[0:4], magic[:])
	b[4] = kindCall
	if h.Control {
		b[4] = kindControl
	}
	binary.LittleEndian.PutUint16(b[6:], h.AccelID)
	binary.LittleEndian.PutUint32(b[8:], h.PayloadLen)
	binary.LittleEndian.PutUint32(b[12:], h.RequestID)
	binary.LittleEndian.PutUint32(b[16:], h.DeadlineUs)
	copy(b[20:], h.Params[:])
	return b
}

// DecodeCallHeader reads a call header (what a node does; for tests and fakes).
func DecodeCallHeader(b []byte) (CallHeader, error) {
	var h CallHeader
	if len(b) < HeaderLen {
		return h, &HeaderError{Reason: "short", Message: fmt.Sprintf("%d of %d header bytes", len(b), HeaderLen)}
	}
	if [4]byte(b[0:4]) != magic {
		return h, &HeaderError{Reason: "bad_magic", Message: fmt.Sprintf("bad magic % x", b[0:4])}
	}
	if b[4] != kindCall && b[4] != kindControl {
		return h, &HeaderError{Reason: "unknown_kind", Message: fmt.Sprintf("kind %d is not a call", b[4])}
	}
	if b[5] != 0 {
		return h, &HeaderError{Reason: "non_zero_flags", Message: "flags must be 0"}
	}
	h.Control = b[4] == kindControl
	h.AccelID = binary.LittleEndian.Uint16(b[6:])
	h.PayloadLen = binary.LittleEndian.Uint32(b[8:])
	h.RequestID = binary.LittleEndian.Uint32(b[12:])
	h.DeadlineUs = binary.LittleEndian.Uint32(b[16:])
	copy(h.Params[:], b[20:HeaderLen])
	if h.Control != (h.AccelID == ControlID) {
		return h, &HeaderError{Reason: "accelerator_id_mismatch", Message: "accelerator id 0xFFFF is for control messages only"}
	}
	return h, nil
}

// ResultHeader is the header of a result or control result.
type ResultHeader struct {
	Control    bool
	Status     Status
	PayloadLen uint32
	RequestID  uint32
	AccelID    uint16
	Slot       uint16 // NoSlot when no slot ran the call
	QueueNs    uint64
	ExecNs     uint64
}

// HeaderError is a header the decoder refused: the stream is not what it claims.
type HeaderError struct {
	Reason  string // bad_magic, unknown_kind, wrong_direction, non_zero_flags, unknown_status, non_zero_reserved, payload_too_large, short
	Message string
}

func (e *HeaderError) Error() string { return "bad RAC header: " + e.Message }

// Encode writes the result header's 64 bytes (what a node does; for tests and fakes).
func (h *ResultHeader) Encode() [HeaderLen]byte {
	var b [HeaderLen]byte
	copy(b[0:4], magic[:])
	b[4] = kindResult
	if h.Control {
		b[4] = kindControlRes
	}
	binary.LittleEndian.PutUint16(b[6:], uint16(h.Status))
	binary.LittleEndian.PutUint32(b[8:], h.PayloadLen)
	binary.LittleEndian.PutUint32(b[12:], h.RequestID)
	binary.LittleEndian.PutUint16(b[16:], h.AccelID)
	binary.LittleEndian.PutUint16(b[18:], h.Slot)
	binary.LittleEndian.PutUint64(b[24:], h.QueueNs)
	binary.LittleEndian.PutUint64(b[32:], h.ExecNs)
	return b
}

// DecodeResultHeader reads a result header, refusing what v1 does not define: another
// magic or kind, non-zero flags or reserved bytes, an unknown status, or a payload
// longer than payloadMax.
func DecodeResultHeader(b []byte, payloadMax uint32) (ResultHeader, error) {
	var h ResultHeader
	if len(b) < HeaderLen {
		return h, &HeaderError{Reason: "short", Message: fmt.Sprintf("%d of %d header bytes", len(b), HeaderLen)}
	}
	if [4]byte(b[0:4]) != magic {
		return h, &HeaderError{Reason: "bad_magic", Message: fmt.Sprintf("bad magic % x: not a RAC1 message", b[0:4])}
	}
	switch b[4] {
	case kindResult, kindControlRes:
	case kindCall, kindControl:
		return h, &HeaderError{Reason: "wrong_direction", Message: fmt.Sprintf("kind %d is sent by a client", b[4])}
	default:
		return h, &HeaderError{Reason: "unknown_kind", Message: fmt.Sprintf("unknown message kind %d", b[4])}
	}
	if b[5] != 0 {
		return h, &HeaderError{Reason: "non_zero_flags", Message: "flags must be 0"}
	}
	// The reserved bytes, 20..24 then 40..64, numbered 0..28 in that order.
	for i := 0; i < 28; i++ {
		at := 20 + i
		if i >= 4 {
			at = 36 + i
		}
		if r := b[at]; r != 0 {
			return h, &HeaderError{Reason: "non_zero_reserved", Message: fmt.Sprintf("reserved byte %d is %d", i, r)}
		}
	}
	h.Control = b[4] == kindControlRes
	h.Status = Status(binary.LittleEndian.Uint16(b[6:]))
	if int(h.Status) >= len(statusNames) {
		return h, &HeaderError{Reason: "unknown_status", Message: fmt.Sprintf("status %d is not defined by v1", h.Status)}
	}
	h.PayloadLen = binary.LittleEndian.Uint32(b[8:])
	if h.PayloadLen > payloadMax {
		return h, &HeaderError{Reason: "payload_too_large", Message: fmt.Sprintf("payload of %d bytes (at most %d)", h.PayloadLen, payloadMax)}
	}
	h.RequestID = binary.LittleEndian.Uint32(b[12:])
	h.AccelID = binary.LittleEndian.Uint16(b[16:])
	h.Slot = binary.LittleEndian.Uint16(b[18:])
	h.QueueNs = binary.LittleEndian.Uint64(b[24:])
	h.ExecNs = binary.LittleEndian.Uint64(b[32:])
	return h, nil
}

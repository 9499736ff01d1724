package netaccel

import (
	"fmt"
	"time"
)

// Kind says what went wrong, the same words every netaccel client uses
// (clients/conformance/README.md, "Error kinds").
type Kind string

// The kinds of Error.
const (
	KindBadRequest         Kind = "bad_request"
	KindUnknownAccelerator Kind = "unknown_accelerator"
	KindBusy               Kind = "busy"
	KindTooLarge           Kind = "too_large"
	KindDeadline           Kind = "deadline"
	KindUnavailable        Kind = "unavailable"
	KindUnauthorized       Kind = "unauthorized"
	KindInternal           Kind = "internal"
	KindProtocol           Kind = "protocol"
	KindClosed             Kind = "closed"
	KindConnect            Kind = "connect"
	KindRegistry           Kind = "registry"
)

// RetryAfter is the retry hint of BUSY and UNAVAILABLE: RAC v1 carries none, and the
// node's HTTP front end answers the same refusals with Retry-After: 1.
const RetryAfter = time.Second

var statusKinds = [...]Kind{"", KindBadRequest, KindUnknownAccelerator, KindBusy, KindTooLarge,
	KindDeadline, KindUnavailable, KindUnauthorized, KindInternal, KindProtocol}

// Error is every failure of this package. Get it with errors.As:
//
//	var e *netaccel.Error
//	if errors.As(err, &e) && e.Kind == netaccel.KindBusy { time.Sleep(e.RetryAfter) }
type Error struct {
	Kind Kind
	// Status is the node's answer when it sent one (HasStatus).
	Status    Status
	HasStatus bool
	// RetryAfter: how long to wait before retrying (BUSY, UNAVAILABLE); 0: do not.
	RetryAfter time.Duration
	Message    string
	// Err is the cause (a network error, context.DeadlineExceeded, …), if any.
	Err error
}

func (e *Error) Error() string {
	what := string(e.Kind)
	if e.HasStatus {
		what = e.Status.String()
	}
	if e.Err != nil {
		return fmt.Sprintf("netaccel: %s: %s: %v", what, e.Message, e.Err)
	}
	return fmt.Sprintf("netaccel: %s: %s", what, e.Message)
}

// Unwrap gives the cause, so errors.Is(err, context.DeadlineExceeded) works.
func (e *Error) Unwrap() error { return e.Err }

// Retryable: the same call may succeed later (BUSY, UNAVAILABLE).
func (e *Error) Retryable() bool { return e.RetryAfter > 0 }

func statusError(s Status, message string) *Error {
	e := &Error{Kind: statusKinds[s], Status: s, HasStatus: true, Message: message}
	if s == StatusBusy || s == StatusUnavailable {
		e.RetryAfter = RetryAfter
	}
	return e
}

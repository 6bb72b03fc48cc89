// Package laneerr builds the errors every layer returns: a cause
// classified and wrapped as a *lanes.Error of one operation, saying
// whether the work was submitted.
package laneerr

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Wrap classifies err and wraps it as a *lanes.Error of op, saying whether
// the work was submitted. A cause already an *Error keeps its code and
// blame. Nothing submitted keeps the cause's retryability; something
// submitted is never blindly retryable (it may have run).
func Wrap(op string, notSubmitted bool, err error) *lanes.Error {
	c := cuda.Classify(err)
	e := &lanes.Error{Op: op, Code: c.Code, Blame: c.Blame, NotSubmitted: notSubmitted, Retryable: c.Retryable && notSubmitted, Sticky: c.Sticky, Err: err}
	return e
}

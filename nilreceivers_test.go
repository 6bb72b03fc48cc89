package lanes_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/remote"
)

// TestNoPanicOnNilOrZeroReceivers: every exported method of the types a
// user holds, called on a nil or zero value (a Server, Scheduler, Front
// or Host that no Start made, a staged program never prepared) with zero
// arguments, returns: an error or zero values, never a panic across the
// public API.
func TestNoPanicOnNilOrZeroReceivers(t *testing.T) {
	for name, v := range map[string]any{
		"nil *lanes.Server":         (*lanes.Server)(nil),
		"zero lanes.Server":         &lanes.Server{},
		"nil *actors.Scheduler":     (*actors.Scheduler)(nil),
		"zero actors.Scheduler":     &actors.Scheduler{},
		"nil *actors.StagedProgram": (*actors.StagedProgram)(nil),
		"zero actors.StagedProgram": &actors.StagedProgram{},
		"nil *remote.Front":         (*remote.Front)(nil),
		"zero remote.Front":         &remote.Front{},
		"nil *remote.Host":          (*remote.Host)(nil),
		"zero remote.Host":          &remote.Host{},
		"nil *remote.StagedProgram": (*remote.StagedProgram)(nil),
		"zero remote.StagedProgram": &remote.StagedProgram{},
	} {
		rv := reflect.ValueOf(v)
		for i := range rv.Type().NumMethod() {
			m := rv.Type().Method(i)
			args := []reflect.Value{rv}
			for j := 1; j < m.Type.NumIn(); j++ {
				if in := m.Type.In(j); in.String() == "context.Context" {
					args = append(args, reflect.ValueOf(context.Background()))
				} else {
					args = append(args, reflect.Zero(in))
				}
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s.%s panicked: %v", name, m.Name, r)
					}
				}()
				if m.Type.IsVariadic() {
					m.Func.CallSlice(args)
				} else {
					m.Func.Call(args)
				}
			}()
		}
	}
}

package lanes_test

import (
	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/remote"
)

// schedulerOf is the scheduler behind an in-process server (nil on lane
// hosts); frontOf the front behind one on lane hosts (nil in process).
func schedulerOf(srv *lanes.Server) *actors.Scheduler {
	s, _ := srv.Raw().(*actors.Scheduler)
	return s
}

func frontOf(srv *lanes.Server) *remote.Front {
	f, _ := srv.Raw().(*remote.Front)
	return f
}

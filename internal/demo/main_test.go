package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanesched/lanes/remote"
)

// TestMain gives this package's fronts and lane hosts a token of their
// own, kept out of the user's (the process keeps one endpoint, and so one
// token, for its life).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lanes-demo-token")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Setenv(remote.TokenFileEnv, filepath.Join(dir, "token"))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

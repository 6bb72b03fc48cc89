package system

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// TestTokenFileChecks: a token file is made private when missing, read
// when it is the user's own and private, and refused, with ErrConfig and
// what to fix, whenever another could read, replace or have planted it.
func TestTokenFileChecks(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "lanes", "token")
	tok, err := LoadToken(good)
	if err != nil || len(tok) != tokenBytes {
		t.Fatalf("a missing token file: got %v, %d bytes; want one made", err, len(tok))
	}
	if st, _ := os.Stat(good); st.Mode().Perm() != 0o600 {
		t.Errorf("the token file made: mode %04o, want 0600", st.Mode().Perm())
	}
	again, err := LoadToken(good)
	if err != nil || !again.equal(tok) {
		t.Errorf("read again: got %v, want the same token", err)
	}
	bad := func(name string, want string, setup func(path string)) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "token")
		setup(path)
		_, err := LoadToken(path)
		if !errors.Is(err, wire.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got err %v, want ErrConfig saying %q", name, err, want)
		}
	}
	write := func(path string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte(strings.Repeat("ab", tokenBytes)+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(path, mode)
	}
	bad("readable by others", "mode 0644", func(p string) { write(p, 0o644) })
	bad("a symbolic link", "symbolic link", func(p string) { _ = os.Symlink(good, p) })
	bad("a dangling symbolic link", "symbolic link", func(p string) { _ = os.Symlink(p+".gone", p) })
	bad("a directory", "not a regular file", func(p string) { _ = os.Mkdir(p, 0o700) })
	bad("garbage", "does not hold a token", func(p string) { _ = os.WriteFile(p, []byte("garbage"), 0o600) })
	bad("empty", "does not hold a token", func(p string) { _ = os.WriteFile(p, nil, 0o600) })
	bad("in a directory others may change", "may be changed by others", func(p string) {
		write(p, 0o600)
		_ = os.Chmod(filepath.Dir(p), 0o777)
	})
	bad("made in a directory others may change", "may be changed by others", func(p string) { _ = os.Chmod(filepath.Dir(p), 0o777) })
	bad("a token anyone could guess", "anyone could guess", func(p string) { write(p, 0o600) })
	bad("all zeros", "anyone could guess", func(p string) { _ = os.WriteFile(p, []byte(strings.Repeat("00", tokenBytes)), 0o600) })
	hexOf := func(b []byte) string { return fmt.Sprintf("%x", b) }
	var up, down, twice []byte
	for i := range tokenBytes {
		up, down, twice = append(up, byte(i)), append(down, byte(255-i)), append(twice, byte(i%16*17))
	}
	for name, tok := range map[string][]byte{"00 01 02 ...": up, "ff fe fd ...": down, "16 bytes twice": twice} {
		bad(name, "anyone could guess", func(p string) { _ = os.WriteFile(p, []byte(hexOf(tok)), 0o600) })
	}
	if os.Geteuid() == 0 {
		bad("owned by another user", "owned by another user", func(p string) { write(p, 0o600); _ = os.Chown(p, 65534, 65534) })
		bad("in another user's directory", "belongs to another user", func(p string) { _ = os.Chown(filepath.Dir(p), 65534, 65534) })
	}
	// A sticky directory (as /tmp) is one others cannot replace a file in.
	sticky := t.TempDir()
	_ = os.Chmod(sticky, 0o777|os.ModeSticky)
	if _, err := LoadToken(filepath.Join(sticky, "token")); err != nil {
		t.Errorf("a token file in a sticky directory: got %v, want it made and read", err)
	}
}

// TestTokenMadeOnceUnderARace: processes that make the missing token at
// once agree on one.
func TestTokenMadeOnceUnderARace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	got := make([]Token, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			tok, err := LoadToken(path)
			if err != nil {
				t.Errorf("loadToken: got err %v, want nil", err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	for i := range got {
		if !got[i].equal(got[0]) {
			t.Fatalf("token %d differs from token 0: want one token", i)
		}
	}
}

// TestRelativeRuntimeDirIsIgnored: $XDG_RUNTIME_DIR counts only when
// absolute, as the XDG spec says.
func TestRelativeRuntimeDirIsIgnored(t *testing.T) {
	t.Setenv(TokenFileEnv, "")
	t.Setenv("XDG_RUNTIME_DIR", "relative/dir")
	p, err := DefaultTokenFile()
	if err != nil || strings.HasPrefix(p, "relative") {
		t.Errorf("DefaultTokenFile with a relative XDG_RUNTIME_DIR: got %q, %v; want it ignored", p, err)
	}
}

// The root of trust of fronts and hosts on one machine: a token in a file
// only its user can read.

package system

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// TokenFileEnv names the environment variable that overrides the default
// token file (DefaultTokenFile).
const TokenFileEnv = "LANES_TOKEN_FILE"

// tokenBytes is a token's length: 256 random bits.
const tokenBytes = 32

// A token is the secret of fronts and lane hosts without TLS of their
// own. It is never sent: each process derives from it the same
// certificate authority and proves it holds the token by a certificate of
// that authority, in a TLS handshake on every connection, both ways
// (localTLS), so a listener that does not hold it (a squatter on a
// host's port, a false cluster member) learns nothing, and a process that
// cannot read the token file is refused before any of its bytes is read.
// It is a file, hex, 64 characters, owned by the user, mode 0600, in a
// directory only the user may change; the first front or host that needs
// it makes it.
type Token []byte

// DefaultTokenFile is where fronts and hosts look for the token when their
// configuration names none: $LANES_TOKEN_FILE if set, else lanes/token
// under $XDG_RUNTIME_DIR (a directory of the user's own, cleared at
// logout; ignored unless absolute, as the XDG spec says), else under the
// user's configuration directory ($XDG_CONFIG_HOME/lanes/token, by default
// ~/.config/lanes/token).
func DefaultTokenFile() (string, error) {
	if p := os.Getenv(TokenFileEnv); p != "" {
		return p, nil
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "lanes", "token"), nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("%w: no token file: set %s or HOME (%v)", wire.ErrConfig, TokenFileEnv, err)
	}
	return filepath.Join(dir, "lanes", "token"), nil
}

// LoadToken reads the token file at path (DefaultTokenFile when empty),
// creating it with a new random token when it does not exist. It refuses
// a file another user owns or may read or write, a symbolic link, a file
// in a directory others may change, and a file that holds no token,
// saying what to fix.
func LoadToken(path string) (Token, error) {
	if path == "" {
		var err error
		if path, err = DefaultTokenFile(); err != nil {
			return nil, err
		}
	}
	t, err := readToken(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createToken(path); err != nil {
			return nil, err
		}
		t, err = readToken(path)
	}
	return t, err
}

// mine reports whether the file is owned by this process's user.
func mine(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// checkTokenDir refuses a directory another user owns or may change (a
// token there could be swapped), unless it is sticky (as /tmp is: then
// only the owner of a file can replace it, and the file's own checks
// decide).
func checkTokenDir(path, dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: token file %s: its directory: %v", wire.ErrConfig, path, err)
	}
	sticky := st.Mode()&fs.ModeSticky != 0
	switch {
	case sticky:
	case !mine(st):
		return fmt.Errorf("%w: token file %s: directory %s belongs to another user, who could swap the token: keep it in a directory of your own (mode 0700)", wire.ErrConfig, path, dir)
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: token file %s: directory %s may be changed by others (mode %04o): keep the token in a directory only you may change (mode 0700)", wire.ErrConfig, path, dir, st.Mode().Perm())
	}
	return nil
}

// readToken reads and checks an existing token file.
func readToken(path string) (Token, error) {
	st, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: token file %s: %v", wire.ErrConfig, path, err)
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%w: token file %s is a symbolic link: name the file itself", wire.ErrConfig, path)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%w: token file %s is not a regular file", wire.ErrConfig, path)
	case !mine(st):
		return nil, fmt.Errorf("%w: token file %s is owned by another user, who would then hold the token: make your own", wire.ErrConfig, path)
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: token file %s has mode %04o: others may read or change it, which would let them in; chmod 600 it (and make a new one if it was seen)", wire.ErrConfig, path, st.Mode().Perm())
	}
	if err := checkTokenDir(path, filepath.Dir(path)); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: token file %s: %v", wire.ErrConfig, path, err)
	}
	t, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(t) != tokenBytes {
		return nil, fmt.Errorf("%w: token file %s does not hold a token (%d hex digits): remove it, and the next front or host makes a new one", wire.ErrConfig, path, 2*tokenBytes)
	}
	if why := weak(t); why != "" {
		return nil, fmt.Errorf("%w: token file %s holds a token anyone could guess (%s): remove it, and the next front or host makes a random one", wire.ErrConfig, path, why)
	}
	return t, nil
}

// weak says why a token is no secret, or "": one written by hand rather
// than drawn at random: few distinct bytes (zeros, a short pattern), a
// pattern repeated (a period of up to half its length), or a sequence of
// equal steps (00 01 02 ..., ff fe fd ...). 32 random bytes have fewer
// than 16 distinct values, a period, or equal steps with probability below
// 1e-9.
func weak(t Token) string {
	if n := distinct(t); n < 16 {
		return fmt.Sprintf("%d distinct bytes of %d", n, len(t))
	}
	for period := 1; period <= len(t)/2; period++ {
		if bytes.Equal(t[period:], t[:len(t)-period]) {
			return fmt.Sprintf("a pattern of %d bytes repeated", period)
		}
	}
	step, steady := t[1]-t[0], true
	for i := 2; i < len(t) && steady; i++ {
		steady = t[i]-t[i-1] == step
	}
	if steady {
		return fmt.Sprintf("bytes in steps of %d", int8(step))
	}
	return ""
}

func distinct(t Token) int {
	var seen [256]bool
	n := 0
	for _, b := range t {
		if !seen[b] {
			seen[b] = true
			n++
		}
	}
	return n
}

// createToken writes a new token file, atomically: whoever loses a race
// to create it reads the winner's. Its directory is made mode 0700 when
// missing, and must be one only this user may change.
func createToken(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: token file %s: make its directory: %v", wire.ErrConfig, path, err)
	}
	if err := checkTokenDir(path, dir); err != nil {
		return err
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("%w: token file %s: %v", wire.ErrConfig, path, err)
	}
	tmp, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return fmt.Errorf("%w: token file %s: %v", wire.ErrConfig, path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(raw) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		if err = os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
			err = nil // another process made it first: read theirs
		}
	}
	if err != nil {
		return fmt.Errorf("%w: token file %s: %v", wire.ErrConfig, path, err)
	}
	return nil
}

// equal reports whether two tokens are the same (configuration checks).
func (t Token) equal(o Token) bool { return string(t) == string(o) }

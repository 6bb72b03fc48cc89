package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHello runs the README's example and checks what it prints.
func TestHello(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	main()
	os.Stdout = stdout
	_ = w.Close()
	out, _ := io.ReadAll(r)
	want := "step 0: replayed\nstep 1: replayed\nstep 2: replayed\nevery element is now 3\n"
	if string(out) != want {
		t.Fatalf("hello printed %q, want %q", out, want)
	}
}

// TestTheReadmeShowsThisProgram: the README's example is this program's
// main, word for word (the README shows main's body, unindented, and the
// imports).
func TestTheReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- hello: examples/hello/main.go -->\n```go\n")
	if !ok {
		t.Fatal("README.md has no '<!-- hello: examples/hello/main.go -->' marker followed by a go block")
	}
	block, _, _ := strings.Cut(after, "```\n")
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !strings.Contains(string(src), line+"\n") && !strings.Contains(string(src), "\t"+line+"\n") {
			t.Errorf("README's example line %q is not in examples/hello/main.go: keep the two the same", line)
		}
	}
	_, body, _ := strings.Cut(string(src), "func main() {\n")
	body, _, _ = strings.Cut(body, "\n}\n")
	for _, line := range strings.Split(body, "\n") {
		if l := strings.TrimPrefix(line, "\t"); strings.TrimSpace(l) != "" && !strings.Contains(block, l+"\n") {
			t.Errorf("main's line %q is not in the README's example: keep the two the same", l)
		}
	}
}

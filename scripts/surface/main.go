// Command surface counts the exported names of the module's public
// packages: what a user can name, and so what a maintainer must keep. It
// walks every non-test Go file (all build tags) of every package whose
// import path has no internal/ element, skipping commands, examples and
// scripts, and counts exported types, functions, methods (on exported
// types, interface methods included), constants, variables and the
// exported fields of exported struct types.
//
//	go run ./scripts/surface            # the table, per package
//	go run ./scripts/surface -max 1000  # and fail above 1,000 in all
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the module's root directory")
	limit := flag.Int("max", 0, "exit 1 when the total exceeds this (0: no limit)")
	flag.Parse()
	counts, err := countTree(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(2)
	}
	total := printTable(counts)
	if *limit > 0 && total > *limit {
		fmt.Fprintf(os.Stderr, "surface: %d exported names, over the limit of %d\n", total, *limit)
		os.Exit(1)
	}
}

// printTable writes one row per package, largest first, and the total.
func printTable(counts map[string]int) int {
	dirs := make([]string, 0, len(counts))
	total := 0
	for dir, n := range counts {
		dirs = append(dirs, dir)
		total += n
	}
	sort.Slice(dirs, func(i, j int) bool {
		if counts[dirs[i]] != counts[dirs[j]] {
			return counts[dirs[i]] > counts[dirs[j]]
		}
		return dirs[i] < dirs[j]
	})
	fmt.Println("| package | exported names |")
	fmt.Println("|---|---|")
	for _, dir := range dirs {
		fmt.Printf("| `%s` | %d |\n", dir, counts[dir])
	}
	fmt.Printf("| all public packages | **%d** |\n", total)
	return total
}

// countTree counts each public package under root, keyed by its
// directory relative to root ("." for the root package).
func countTree(root string) (map[string]int, error) {
	counts := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && !public(filepath.ToSlash(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if file.Name.Name == "main" {
			return nil
		}
		counts[filepath.ToSlash(filepath.Dir(rel))] += countFile(file)
		return nil
	})
	return counts, err
}

// public reports whether a directory holds packages a user can import.
func public(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		switch {
		case part == "internal", part == "testdata", part == "vendor",
			strings.HasPrefix(part, "."), strings.HasPrefix(part, "_"):
			return false
		}
	}
	top := strings.Split(rel, "/")[0]
	switch top {
	case "cmd", "examples", "scripts", "tools", "bin", "docs", "proto":
		return false
	}
	return true
}

// countFile counts one file's exported names.
func countFile(file *ast.File) int {
	n := 0
	for _, decl := range file.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if !decl.Name.IsExported() {
				continue
			}
			if decl.Recv == nil || ast.IsExported(receiverName(decl.Recv.List[0].Type)) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if spec.Name.IsExported() {
						n += 1 + members(spec.Type)
					}
				case *ast.ValueSpec:
					for _, name := range spec.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// members counts an exported type's exported fields or interface methods.
func members(expr ast.Expr) int {
	var list *ast.FieldList
	switch t := expr.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return 0
	}
	n := 0
	for _, field := range list.List {
		if len(field.Names) == 0 { // embedded
			if ast.IsExported(receiverName(field.Type)) {
				n++
			}
			continue
		}
		for _, name := range field.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

// receiverName is the base type name of a receiver or embedded field.
func receiverName(expr ast.Expr) string {
	for {
		switch t := expr.(type) {
		case *ast.StarExpr:
			expr = t.X
		case *ast.IndexExpr:
			expr = t.X
		case *ast.IndexListExpr:
			expr = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

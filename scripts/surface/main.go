// Command surface counts the exported names of the module's public
// packages: what a user can name, and so what a maintainer must keep. It
// walks every non-test Go file (all build tags) of every package whose
// import path has no internal/ element, skipping commands, examples and
// scripts, and counts exported types, functions, methods (on exported
// types, interface methods included), constants, variables and the
// exported fields of exported struct types. An alias of a type defined
// in an internal package counts that type's exported fields and methods
// too: a user reaches them through the alias.
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
		counts[filepath.ToSlash(filepath.Dir(rel))] += countFile(file) + countAliased(root, file)
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

// countAliased counts the exported fields and methods of the internal
// types that a file's exported aliases name.
func countAliased(root string, file *ast.File) int {
	n := 0
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gen.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || !ts.Assign.IsValid() || !ts.Name.IsExported() {
				continue
			}
			sel, ok := ts.Type.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			pkg, _ := sel.X.(*ast.Ident)
			if pkg == nil {
				continue
			}
			dir := internalDir(root, file, pkg.Name)
			if dir == "" {
				continue
			}
			n += typeMembers(dir, sel.Sel.Name)
		}
	}
	return n
}

// internalDir is the directory of the internal package a file imports
// under name, or "" when that package is not one of the module's internal
// ones.
func internalDir(root string, file *ast.File, name string) string {
	mod := modulePath(root)
	for _, imp := range file.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local != name || !strings.HasPrefix(path, mod+"/") || !strings.Contains(path, "/internal/") {
			continue
		}
		return filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(path, mod+"/")))
	}
	return ""
}

// modulePath is the module's path, from root's go.mod.
func modulePath(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// typeMembers counts the exported fields (or interface methods) and the
// exported methods of the type name defined in the package in dir.
func typeMembers(dir, name string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, decl := range file.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv != nil && decl.Name.IsExported() && receiverName(decl.Recv.List[0].Type) == name {
					n++
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == name {
						n += members(ts.Type)
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

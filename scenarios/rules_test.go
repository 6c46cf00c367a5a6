package scenarios

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// module is the import path of the teapot-lb module.
const module = "github.com/teapot-lb/teapot-lb"

// maxFileLines bounds every hand-written Go file.
const maxFileLines = 1500

// maxMainLines bounds main.go, which only wires: the cobra root and the
// parts of serve, started in order and stopped in reverse. Policy lives
// in the parts' packages.
const maxMainLines = 400

// allowedImports maps each top-level folder to the other top-level folders
// its packages may import (a package may always import its own folder).
// "" is the main package at the module root; "*" allows everything.
var allowedImports = map[string][]string{
	"":           {"*"},
	"api":        {},
	"consensus":  {"api"},
	"proxy":      {"api"},
	"vip":        {"api"},
	"web":        {"api"},
	"tenantsync": {"api", "consensus"},
	"packaging":  {},
	"scenarios":  {"*"},
}

// listedPackage is the part of `go list -json` the rules need.
type listedPackage struct {
	Dir          string
	ImportPath   string
	Name         string
	Doc          string
	GoFiles      []string
	CgoFiles     []string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

var (
	listOnce sync.Once
	listed   []listedPackage
	listRoot string
	listErr  error
)

// modulePackages lists every package of the module once per test binary.
func modulePackages(t *testing.T) (root string, pkgs []listedPackage) {
	t.Helper()
	listOnce.Do(func() {
		listRoot, listErr = moduleRoot()
		if listErr != nil {
			return
		}
		cmd := exec.Command("go", "list", "-e", "-json", "./...")
		cmd.Dir = listRoot
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			listErr = errors.New("go list ./...: " + err.Error() + ": " + stderr.String())
			return
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p listedPackage
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				listErr = errors.New("decode go list output: " + err.Error())
				return
			}
			listed = append(listed, p)
		}
	})
	if listErr != nil {
		t.Fatal(listErr)
	}
	return listRoot, listed
}

// moduleRoot returns the directory holding go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", errors.New("go env GOMOD: " + err.Error())
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the teapot-lb module")
	}
	return filepath.Dir(gomod), nil
}

// topFolder returns the top-level folder of one of our import paths ("" for
// the module root), and false for a path outside the module.
func topFolder(importPath string) (string, bool) {
	if importPath == module {
		return "", true
	}
	rest, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		return "", false
	}
	top, _, _ := strings.Cut(rest, "/")
	return top, true
}

func TestDependencyRules(t *testing.T) {
	_, pkgs := modulePackages(t)
	for _, p := range pkgs {
		t.Run(strings.TrimPrefix(p.ImportPath, module+"/"), func(t *testing.T) {
			if p.Error != nil {
				t.Fatalf("go list: %s", p.Error.Err)
			}
			// Deps is transitive for the package itself; tests are checked
			// through their direct imports.
			uses := slices.Concat(p.Deps, p.TestImports, p.XTestImports)
			for _, problem := range importProblems(p.ImportPath, uses) {
				t.Error(problem)
			}
		})
	}
}

// importProblems returns what is wrong with pkg using the packages in uses.
func importProblems(pkg string, uses []string) []string {
	from, _ := topFolder(pkg)
	allowed, known := allowedImports[from]
	if !known {
		return []string{fmt.Sprintf("top-level folder %q is not part of the architecture (known: %s)", from, strings.Join(knownFolders(), ", "))}
	}
	var problems []string
	uses = slices.Clone(uses)
	slices.Sort(uses)
	for _, dep := range slices.Compact(uses) {
		to, ours := topFolder(dep)
		switch {
		case !ours || dep == pkg:
		case dep == module:
			problems = append(problems, "imports the main package "+dep)
		case to == "scenarios" && from != "scenarios":
			problems = append(problems, "imports "+dep+": nothing may import the scenarios")
		case to == from, slices.Contains(allowed, "*"), slices.Contains(allowed, to):
		default:
			problems = append(problems, fmt.Sprintf("depends on %s: %s/ may import only %s", dep, from, describeAllowed(from, allowed)))
		}
	}
	return problems
}

func TestImportProblems(t *testing.T) {
	tests := []struct {
		name string
		pkg  string
		uses []string
		want int
	}{
		{"api uses only api", module + "/api/client", []string{module + "/api", module + "/api/pki", "fmt"}, 0},
		{"api uses consensus", module + "/api", []string{module + "/consensus"}, 1},
		{"consensus uses api", module + "/consensus", []string{module + "/api/proto/teapotv1"}, 0},
		{"consensus uses proxy", module + "/consensus", []string{module + "/proxy"}, 1},
		{"proxy uses consensus", module + "/proxy/l7", []string{module + "/consensus", module + "/proxy"}, 1},
		{"vip uses web", module + "/vip", []string{module + "/web"}, 1},
		{"web uses tenantsync", module + "/web", []string{module + "/tenantsync"}, 1},
		{"tenantsync uses consensus", module + "/tenantsync/agent", []string{module + "/consensus", module + "/api"}, 0},
		{"tenantsync uses proxy", module + "/tenantsync", []string{module + "/proxy"}, 1},
		{"anything uses main", module + "/scenarios", []string{module}, 1},
		{"main uses everything", module, []string{module + "/proxy", module + "/consensus", module + "/web"}, 0},
		{"proxy uses scenarios", module + "/proxy", []string{module + "/scenarios"}, 1},
		{"scenarios uses everything", module + "/scenarios", []string{module + "/proxy", module + "/consensus"}, 0},
		{"unknown folder", module + "/internal/x", nil, 1},
		{"duplicates count once", module + "/api", []string{module + "/vip", module + "/vip"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := importProblems(tt.pkg, tt.uses)
			if len(got) != tt.want {
				t.Errorf("importProblems(%s, %v) = %q, want %d problems", tt.pkg, tt.uses, got, tt.want)
			}
		})
	}
}

func knownFolders() []string {
	var names []string
	for k := range allowedImports {
		if k != "" {
			names = append(names, k+"/")
		}
	}
	slices.Sort(names)
	return names
}

func describeAllowed(from string, allowed []string) string {
	names := []string{from + "/..."}
	for _, a := range allowed {
		names = append(names, a+"/...")
	}
	return strings.Join(names, ", ")
}

var generatedRE = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// isGenerated reports whether a Go file carries the standard generated-code
// marker before its package clause.
func isGenerated(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if generatedRE.MatchString(line) {
			return true, nil
		}
		if strings.HasPrefix(line, "package ") {
			return false, nil
		}
	}
	return false, sc.Err()
}

func TestPackagesHaveDocComments(t *testing.T) {
	_, pkgs := modulePackages(t)
	for _, p := range pkgs {
		t.Run(strings.TrimPrefix(p.ImportPath, module+"/"), func(t *testing.T) {
			files := slices.Concat(p.GoFiles, p.CgoFiles)
			if len(files) == 0 {
				t.Fatalf("%s has only test files: add a doc.go with a package doc comment", p.Dir)
			}
			generated := true
			for _, f := range files {
				g, err := isGenerated(filepath.Join(p.Dir, f))
				if err != nil {
					t.Fatal(err)
				}
				generated = generated && g
			}
			switch {
			case generated:
				t.Skip("generated code only")
			case p.Doc == "":
				t.Errorf("package %s has no doc comment: add one to doc.go", p.ImportPath)
			case p.Name != "main" && !strings.HasPrefix(p.Doc, "Package "+p.Name+" "):
				t.Errorf("doc comment of package %s must start with %q, it starts %q", p.ImportPath, "Package "+p.Name+" ", p.Doc)
			}
		})
	}
}

// skippedDirs are never walked for source files.
var skippedDirs = map[string]bool{".git": true, ".tools": true, "bin": true, "teapot-data": true, "node_modules": true}

func TestFileSizes(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		rel, _ := filepath.Rel(root, path)
		if lines >= maxFileLines {
			t.Errorf("%s has %d lines: split it, files stay under %d lines", rel, lines, maxFileLines)
		}
		if rel == "main.go" && lines >= maxMainLines {
			t.Errorf("main.go has %d lines: it only wires (the cobra root, serve's parts in order and in reverse) and stays under %d; move what decides into the package it concerns", lines, maxMainLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
